"""Report tables as plain, unescaped strings; html.py and text.py escape and render them.

A :class:`Table` is a title, a header row, body rows and an optional note, all plain
text. Numbers are formatted through :mod:`tokrate.textfmt`, so HTML, markdown and the
terminal agree. Unknown values print as "—" (never 0).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final

import polars as pl

from tokrate.analysis.tier_pick import PASS_RATE, Candidate, Judgement, TierDecision
from tokrate.report.terminal.comparison_text import describe_change
from tokrate.report.terminal.stream_words import who_held
from tokrate.report.terminal.tier_text import candidate_text, cost_cell, slo_text, tasks_text
from tokrate.runfolder.comparison import Comparison
from tokrate.runfolder.summary import Group, Summary
from tokrate.spec.metric_table import metric_label
from tokrate.textfmt import DASH, fmt_ms, fmt_num, fmt_pct, fmt_pct_interval, fmt_tps

__all__ = [
    "Table",
    "comparison_table",
    "errors_table",
    "summary_table",
    "tier_tables",
]


@dataclass(frozen=True, slots=True)
class Table:
    title: str
    header: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]
    note: str = ""
    numeric: tuple[bool, ...] = field(default=())
    #: Columns whose cells may wrap (long text); the others never do.
    wrap: tuple[bool, ...] = field(default=())


def _with_es(p95: float | None, es: float | None) -> str:
    """A p95 with its early-stopping estimate beside it: "157 ms (≤ 170)"."""
    if es is None:
        return fmt_ms(p95)
    return f"{fmt_ms(p95)} (≤ {fmt_ms(es, unit=False)})"


def summary_table(run_key: str, summary: Summary, *, title: str | None = None) -> Table:
    """One row per group (endpoint, model, scenario) of one run's summary."""
    # The decision columns (SLO met, goodput, cost) first: a reader who scrolls
    # sideways for the rest has already seen what decides a tier.
    header = (
        "endpoint",
        "model",
        "level",
        "SLO met",
        "goodput req/s",
        "$ / 1k req (95% CI)",
        "ok",
        "errors",
        metric_label("ttft_p50"),
        metric_label("ttft_p95"),
        metric_label("ttft_from_due_p95"),
        metric_label("tpot_p50"),
        # The tier pick's sentences quote a missed TPOT limit as the p95: it is here.
        metric_label("tpot_p95"),
        metric_label("itl_p99"),
        metric_label("e2e_p95"),
        metric_label("decode_tps_p50"),
        "aggregate tok/s",
        "req/s",
    )
    rows = []
    buffered = by_client = short = 0
    lags: list[float] = []
    for g in summary.groups:
        n_buffered = g.stream.buffered if g.stream else 0
        buffered += n_buffered
        if g.stream:
            by_client += g.stream.client_held
            short += g.stream.short_hold
            if g.stream.client_held_lag_max_ms is not None:
                lags.append(g.stream.client_held_lag_max_ms)
        # Every request buffered: say so instead of a dash (the value is not unknown,
        # it is not meaningful).
        per_token = "buffered" if n_buffered and not g.tpot_s.n else None
        rows.append(
            (
                g.endpoint,
                g.model,
                g.level,
                fmt_pct(g.slo_met_fraction),
                fmt_num(g.goodput_rps, 2),
                cost_cell(g.cost),
                str(g.counts.ok),
                str(g.counts.failed),
                fmt_ms(g.ttft_s.p50),
                _with_es(g.ttft_s.p95, g.ttft_s.p95_es),
                _with_es(g.ttft_from_due_s.p95, g.ttft_from_due_s.p95_es),
                per_token or fmt_ms(g.tpot_s.p50),
                per_token or fmt_ms(g.tpot_s.p95),
                per_token or fmt_ms(g.itl_s.p99),
                _with_es(g.e2e_s.p95, g.e2e_s.p95_es),
                per_token or fmt_tps(g.decode_tps.p50),
                fmt_tps(g.aggregate_output_tps),
                fmt_num(g.requests_per_s, 2),
            )
        )
    numeric = (False, False, False) + (True,) * (len(header) - 3)
    notes = []
    if any(g.cost is not None for g in summary.groups):
        notes.append(COST_NOTE)
    if any(g.ttft_s.p95_es is not None or g.e2e_s.p95_es is not None for g in summary.groups):
        notes.append(
            "(≤ x): MLPerf LoadGen's early-stopping estimate of the p95, a value the true"
            " p95 stays at or below with 99% confidence (from 130 ok requests)."
        )
    if any(g.ttft_from_due_s.n for g in summary.groups):
        notes.append(
            "TTFT from due: from the moment each request was due (its schedule, or its"
            " slot freeing in a closed loop) instead of when it left: TTFT plus the"
            " client's own queueing (send_queue_s)."
        )
    if buffered:
        who = who_held(buffered, by_client, short, max(lags) if lags else None)
        notes.append(
            f"{buffered} buffered requests ({who}: ITL/TPOT not meaningful) are left out "
            "of TPOT, ITL and decode tok/s; see Buffered streams."
        )
    note = " ".join(notes)
    return Table(title or f"Summary: {run_key}", header, tuple(rows), note=note, numeric=numeric)


#: The metrics the side-by-side table shows, with their headers.
SIDE_BY_SIDE = tuple((m, metric_label(m)) for m in ("decode_tps_p50", "ttft_p95"))


def comparison_table(
    summaries: Sequence[tuple[str, Summary]], comparisons: Mapping[str, Comparison]
) -> Table:
    """Multi-run: one row per (endpoint, model, level); per metric a column with the
    first run's value and one per later run with its value and compare's verdict
    against the first run ("1.08x slower [1.02, 1.15], regressed"), so this table says
    exactly what ``tokrate compare first later`` says. ``comparisons`` maps a later
    run's key to its comparison against the first."""
    first = summaries[0][0]
    keys: dict[tuple[str, str, str], str] = {}
    values: dict[tuple[str, tuple[str, str, str]], Group] = {}
    for run_key, summary in summaries:
        for g in summary.groups:
            keys.setdefault(g.key, g.level)
            values[(run_key, g.key)] = g
    header = ["endpoint", "model", "level"]
    for _metric, name in SIDE_BY_SIDE:
        header += [f"{name} · {first}"]
        header += [f"{name} · {k} vs {first}" for k, _ in summaries[1:]]
    rows = []
    for key, level in keys.items():
        endpoint, model, scenario = key
        cells = [endpoint, model, level]
        for metric, _name in SIDE_BY_SIDE:
            cells.append(_metric_value(values.get((first, key)), metric))
            for run_key, _ in summaries[1:]:
                later = values.get((run_key, key))
                result = comparisons[run_key].result(endpoint, model, scenario, metric)
                text = _metric_value(later, metric)
                if result is not None and result.verdict == "inconclusive":
                    text += f" ({describe_change(result)}, inconclusive: {result.reason})"
                elif result is not None and result.verdict != "not_comparable":
                    text += f" ({describe_change(result)}, {result.verdict})"
                elif result is not None:
                    text += f" (not comparable: {result.reason})"
                cells.append(text)
        rows.append(tuple(cells))
    numeric = (False,) * 3 + (True,) * (len(header) - 3)
    note = (
        f"Each later run against {first}, with tokrate compare's statistics: the change, its "
        "block-bootstrap 95% interval and the verdict (a change must pass its threshold and "
        "its interval must exclude 0; fewer than the minimum samples is not comparable)."
    )
    return Table("Runs side by side", tuple(header), tuple(rows), note=note, numeric=numeric)


def _metric_value(g: Group | None, metric: str) -> str:
    if g is None:
        return DASH
    if metric == "decode_tps_p50":
        return fmt_tps(g.decode_tps.p50)
    return fmt_ms(g.ttft_s.p95)


def _fraction(j: Judgement) -> str:
    """ "47/48 = 98% (89–100%)"."""
    if not j.n or j.interval is None:
        return DASH
    lo, hi = j.interval
    return f"{j.met}/{j.n} = {j.met / j.n * 100:.0f}% ({fmt_pct_interval(lo, hi)})"


def _tier_note(decision: TierDecision) -> str:
    bar = f"{decision.attainment * 100:.0f}%"
    if decision.slo_set:
        judged = (
            f"A model meets the bar when ≥ {bar} of its requests met every SLO "
            f"({slo_text(decision.slo)}); failed requests count as misses."
        )
    else:
        judged = (
            "No SLOs were set ([slo] in the config), so every model with ok requests passes; "
            "set ttft_s / tpot_s / e2e_s / itl_p99_s to pick the smallest model that clears "
            "the bar."
        )
    if decision.checked:
        judged += (
            " Where answers were checked, a model must also pass the task's bar ([slo] "
            "min_pass_rate, per task [slo.min_pass_rate_by_task], default 90%), decided on "
            "at least 1 / (1 − bar) checked answers (10 for 90%: with fewer, one wrong "
            "answer is more than the share allowed); tasks without checks are judged on "
            "speed alone."
        )
    return (
        f"{judged} A fraction is decided on at least {decision.min_requests} requests (with "
        f"fewer, one request is more than the {100 - decision.attainment * 100:.0f}% allowed "
        "to miss); a level where some task has fewer is judged on its tasks pooled. "
        "In brackets: the Wilson 95% interval. The pick is the model that meets with the "
        "lowest cost per 1,000 of the requests sent (token prices on the run's own token "
        "mix, or GPU-hours at the measured throughput; models without a price are named, "
        "not ranked); without prices, the smallest where every size is known, else the "
        "highest goodput (decode speed where goodputs are within 5%). A model's name "
        "never decides. Tasks of one level with the same ranking share a row, their "
        "requests summed; a checked task always has a row of its own."
    )


def tier_tables(decision: TierDecision) -> tuple[Table, Table]:
    """The tier pick (one row per answer: the pick, its evidence and cost, the others)
    and the evidence behind it (one row per model per answer). Cost columns only
    where some model has a price."""
    priced = any(c.cost is not None for cell in decision.cells for c in cell.candidates)
    picks = []
    evidence = []
    for cell in decision.cells:
        tasks = tasks_text(cell)
        pick = cell.pick
        others = [c for c in cell.meeting if c is not pick]
        also = [f"{c.label} ({_cost_cell(c)})" if priced else c.label for c in others]
        row = [
            cell.level,
            tasks,
            pick.label if pick is not None else "none meets",
            _fraction(pick.judgements[0]) if pick is not None else DASH,
            _RULE_WORDS[cell.rule],
        ]
        if priced:
            row.append(_cost_cell(pick) if pick is not None else DASH)
        row += [
            ", ".join(also) or DASH,
            "; ".join(f"{c.label}: {candidate_text(c)}" for c in cell.not_meeting) or DASH,
        ]
        picks.append(tuple(row))
        for c in cell.candidates:
            evidence.append(
                (
                    cell.level,
                    tasks,
                    c.label,
                    _size_cell(c),
                    c.verdict,
                    *(_fraction(j) for j in c.judgements),
                    DASH if c.verdict == "meets" else candidate_text(c, fraction=False),
                    *((_cost_cell(c),) if priced else ()),
                    fmt_num(c.throughput, 2),
                    fmt_tps(c.decode_tps),
                )
            )
    cost = ("$ / 1k req (pick)",) if priced else ()
    header = (
        "load",
        "tasks",
        "pick",
        "SLO met (pick)",
        "ranked by",
        *cost,
        "also meets",
        "does not meet",
    )
    pick_table = Table(
        "Tier pick",
        header,
        tuple(picks),
        note=_tier_note(decision),
        wrap=tuple(h in ("tasks", "also meets", "does not meet") for h in header),
    )
    bars = tuple(_bar_header(b) for b in decision.bars)
    header = (
        "load",
        "tasks",
        "model",
        "size",
        "verdict",
        *bars,
        "why not",
        *(("$ / 1k req (95% CI)",) if priced else ()),
        "goodput req/s" if decision.slo_set else "req/s",
        "decode tok/s p50",
    )
    evidence_table = Table(
        "Tier evidence",
        header,
        tuple(evidence),
        note="Every model in every answer of the tier pick, with the requests it was judged on.",
        numeric=tuple(
            h == "size" or h.endswith("(95% CI)") or h.endswith("/s") or "tok/s" in h
            for h in header
        ),
        wrap=tuple(h in ("tasks", "why not") for h in header),
    )
    return pick_table, evidence_table


def _bar_header(bar: str) -> str:
    if bar == "SLOs":
        return "SLO met (95% CI)"
    if bar == PASS_RATE:
        return "pass rate (95% CI)"
    return f"{bar} met (95% CI)"


def _cost_cell(c: Candidate) -> str:
    return "no price" if c.cost is None else cost_cell(c.cost)


def _size_cell(c: Candidate) -> str:
    if c.size_b is None:
        return DASH
    return f"{c.size_b:g}B" + (" (from name)" if c.size_source == "name" else "")


#: How a pick was ranked among the tiers that meet (tokrate.analysis.tier_pick.Rule).
_RULE_WORDS: Final = {
    "cheapest": "cost per 1,000 requests",
    "smallest": "size (no price)",
    "goodput": "goodput (no price or size)",
    "none": DASH,
}

#: The note under a summary table with a cost column.
COST_NOTE: Final = (
    "$ / 1k req: what 1,000 of these requests cost at the target's token prices on their "
    "own token mix (cached input at price_cached_in_per_m, reasoning billed as output), "
    "or GPU-h: at gpu_hourly_usd × gpus over the measured throughput; in brackets the "
    "Student-t 95% interval of the mean (docs/definitions.md, cost)."
)


def errors_table(errors: pl.DataFrame) -> Table:
    """Failed requests by (series, model, error class, HTTP status), with an example
    message (server text, shown escaped by the renderers)."""
    header = ("series", "model", "class", "HTTP", "count", "example message")
    rows = []
    for r in errors.iter_rows(named=True):
        rows.append(
            (
                str(r["series"]),
                str(r["model"]),
                str(r["error_class"]),
                DASH if r["http_status"] is None else str(r["http_status"]),
                str(r["n"]),
                (r["example"] or "")[:300],
            )
        )
    numeric = (False, False, False, True, True, False)
    return Table("Errors", header, tuple(rows), numeric=numeric)
