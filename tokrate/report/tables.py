"""Report tables as plain, unescaped strings; html.py and text.py escape and render them.

A :class:`Table` is a title, a header row, body rows and an optional note, all plain
text. Numbers are formatted through :mod:`tokrate.textfmt`, so HTML, markdown and the
terminal agree. Unknown values print as "—" (never 0).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import polars as pl

from tokrate.report.comparison import describe_change
from tokrate.runfolder.comparison import Comparison
from tokrate.runfolder.run_info import SloInfo
from tokrate.runfolder.summary import Group, Summary
from tokrate.textfmt import DASH, fmt_ms, fmt_num, fmt_pct, fmt_tps

__all__ = [
    "Table",
    "comparison_table",
    "errors_table",
    "summary_table",
    "tier_table",
]


@dataclass(frozen=True, slots=True)
class Table:
    title: str
    header: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]
    note: str = ""
    numeric: tuple[bool, ...] = field(default=())


def _cost(g: Group) -> str:
    if g.cost is None:
        return DASH
    mark = "" if g.cost.source == "price" else " (GPU-h)"
    return f"${g.cost.usd_per_m_output:,.2f}{mark}"


def summary_table(run_key: str, summary: Summary, *, title: str | None = None) -> Table:
    """One row per group (endpoint, model, scenario) of one run's summary."""
    header = (
        "endpoint",
        "model",
        "level",
        "ok",
        "errors",
        "TTFT p50",
        "TTFT p95",
        "TPOT p50",
        "ITL p99",
        "E2E p95",
        "decode tok/s p50",
        "aggregate tok/s",
        "req/s",
        "goodput req/s",
        "SLO met",
        "$ / M out",
    )
    rows = []
    buffered = 0
    for g in summary.groups:
        n_buffered = g.stream.buffered if g.stream else 0
        buffered += n_buffered
        # Every request buffered: say so instead of a dash (the value is not unknown,
        # it is not meaningful).
        per_token = "buffered" if n_buffered and not g.tpot_s.n else None
        rows.append(
            (
                g.endpoint,
                g.model,
                g.level,
                str(g.counts.ok),
                str(g.counts.failed),
                fmt_ms(g.ttft_s.p50),
                fmt_ms(g.ttft_s.p95),
                per_token or fmt_ms(g.tpot_s.p50),
                per_token or fmt_ms(g.itl_s.p99),
                fmt_ms(g.e2e_s.p95),
                per_token or fmt_tps(g.decode_tps.p50),
                fmt_tps(g.aggregate_output_tps),
                fmt_num(g.requests_per_s, 2),
                fmt_num(g.goodput_rps, 2),
                fmt_pct(g.slo_met_fraction),
                _cost(g),
            )
        )
    numeric = (False, False, False) + (True,) * (len(header) - 3)
    note = ""
    if buffered:
        note = (
            f"{buffered} buffered requests (held back by a proxy or the server: ITL/TPOT not "
            "meaningful) are left out of TPOT, ITL and decode tok/s; see Buffered streams."
        )
    return Table(title or f"Summary: {run_key}", header, tuple(rows), note=note, numeric=numeric)


#: The metrics the side-by-side table shows, with their headers.
SIDE_BY_SIDE = (("decode_tps_p50", "decode tok/s p50"), ("ttft_p95", "TTFT p95"))


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
                if result is not None and result.verdict != "not_comparable":
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


def tier_table(
    rows: Sequence[Mapping[str, Any]], slo_set: bool, slo: SloInfo, attainment: float
) -> Table:
    """The tier pick table from tokrate.report.data.tier_picks rows."""
    header = ("task", "load", "met every SLO", "fastest (E2E p50)", "cheapest", "smallest")
    body = []
    for r in rows:
        passing = ", ".join(r["passing"]) if r["passing"] else "none"
        body.append(
            (
                str(r["task"]),
                str(r["level"]),
                f"{len(r['passing'])}/{r['candidates']}: {passing}",
                r["fastest"] or DASH,
                r["cheapest"] or DASH,
                r["smallest"] or DASH,
            )
        )
    if slo_set:
        limits = ", ".join(
            f"{k.removesuffix('_s')} ≤ {fmt_ms(v)}"
            for k, v in slo.as_mapping().items()
            if v is not None
        )
        note = (
            f"A model meets the bar when ≥ {attainment * 100:.0f}% of its requests met every "
            f"SLO ({limits}); failed requests count as misses."
        )
    else:
        note = (
            "No SLOs were set ([slo] in the config), so every model with ok requests passes; "
            "set ttft_s / tpot_s / e2e_s / itl_p99_s to pick the smallest model that clears the bar."
        )
    return Table("Tier pick", header, tuple(body), note=note)


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
