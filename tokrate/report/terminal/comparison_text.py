"""A :class:`~tokrate.analysis.compare.Comparison` as markdown (CI step summaries, PR comments),
JSON (schema in tokrate.analysis.compare) and a terminal table that fits 80 columns.

Renderers only turn a comparison into text; every number was decided in
:mod:`tokrate.analysis.compare`. Verdict lines read like hyperfine's: "1.21x slower [1.15, 1.27]".
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import replace
from typing import Final

import orjson
from rich import box
from rich.console import Console
from rich.table import Table as RichTable
from rich.text import Text

from tokrate.analysis.ordering import model_key, natural_key
from tokrate.runfolder.comparison import Comparison, MetricResult
from tokrate.runfolder.jsondoc import to_json
from tokrate.spec.thresholds import ABSOLUTE_METRICS
from tokrate.textfmt import DASH, fmt_ms, fmt_tps, md_escape

__all__ = [
    "baseline_verdict_line",
    "confirmation_text",
    "attention_lines",
    "describe_change",
    "detectable_lines",
    "es_values",
    "footnote",
    "format_value",
    "headline",
    "noise_line",
    "render_json",
    "render_markdown",
    "render_table",
    "threshold_line",
]

_WORD: Final = {
    "regressed": "REGRESSION",
    "ok": "no regression",
    "inconclusive": "INCONCLUSIVE",
    "not_comparable": "NOT COMPARABLE",
}
_ICON: Final = {"regressed": "❌", "ok": "✅", "inconclusive": "⚠️", "not_comparable": "⚠️"}
_STYLE: Final = {
    "regressed": "bold red",
    "improved": "green",
    "unchanged": "",
    "inconclusive": "yellow",
    "not_comparable": "yellow",
}


def format_value(value: float | None, unit: str) -> str:
    """A metric value in its unit: ms for seconds, tok/s, % for a rate."""
    if value is None:
        return DASH
    if unit == "s":
        return fmt_ms(value)
    if unit == "rate":
        return f"{value * 100:.1f}%"
    return fmt_tps(value, f" {unit}")


def _values(r: MetricResult) -> str:
    """ "120 → 150 ms": both values, the unit once."""
    if r.unit == "s":
        return f"{fmt_ms(r.baseline, unit=False)} → {fmt_ms(r.current, unit=False)} ms"
    if r.unit == "rate":
        return f"{format_value(r.baseline, 'rate')} → {format_value(r.current, 'rate')}"
    return f"{fmt_tps(r.baseline)} → {fmt_tps(r.current)} {r.unit}"


def es_values(r: MetricResult) -> str | None:
    """The early-stopping estimates of a tail-percentile row, "170 → 420 ms" (a side
    below the samples its estimate needs shows –); None for other rows."""
    if r.baseline_es is None and r.current_es is None:
        return None
    return _values(replace(r, baseline=r.baseline_es, current=r.current_es))


def describe_change(r: MetricResult) -> str:
    """``1.21x slower [1.15, 1.27]``: a ratio where > 1 always reads the worse way for
    "slower" and the better way for "faster"; ``+2.0pp [0.4, 3.9]`` for error rate;
    ``+3%`` (no interval) where the verdict needed none."""
    if r.change is None:
        return DASH
    if r.metric in ABSOLUTE_METRICS:
        if r.ci_low is None or r.ci_high is None:
            return f"{r.change * 100:+.1f}pp"
        return f"{r.change * 100:+.1f}pp [{r.ci_low * 100:+.1f}, {r.ci_high * 100:+.1f}]"
    if r.ci_low is None or r.ci_high is None:
        return f"{r.change:+.1%}"
    ratio, lo, hi = 1.0 + r.change, 1.0 + r.ci_low, 1.0 + r.ci_high
    if ratio <= 0 or lo <= 0:
        # A value (or a replicate) of 0 has no finite ratio: show the plain change.
        return f"{r.change:+.0%} [{r.ci_low:+.0%}, {r.ci_high:+.0%}]"
    # Latency: a ratio > 1 is slower; throughput: a ratio < 1 is slower. The number
    # shown is always >= 1 (hyperfine style), so a ratio below 1 is inverted, which
    # also swaps the interval's ends.
    worse = ratio > 1.0 if r.direction == "lower_is_better" else ratio < 1.0
    word = "slower" if worse else "faster"
    if ratio >= 1.0:
        shown, a, b = ratio, lo, hi
    else:
        shown = 1.0 / ratio
        a = 1.0 / hi if hi > 0 else math.inf
        b = 1.0 / lo if lo > 0 else math.inf
    if f"{shown:.2f}" == "1.00":
        # A ratio that prints as 1.00 has no direction a reader could see ("1.00x
        # slower" for identical values reads as a contradiction); the interval, in
        # the current/baseline direction, still says how far it could go.
        return f"1.00x, no change to two digits [{lo:.2f}, {hi:.2f}]"
    return f"{shown:.2f}x {word} [{a:.2f}, {b:.2f}]"


def _count_text(c: Comparison) -> str:
    n = c.counts
    return (
        f"{n['regressed']} regressed, {n['improved']} improved, {n['unchanged']} unchanged, "
        f"{n['inconclusive']} inconclusive, {n['not_comparable']} not comparable"
    )


def confirmation_text(r: MetricResult) -> str | None:
    """What the re-measurement of a regressed row found, in a few words; None when the
    row was not re-measured."""
    c = r.confirmation
    if c is None:
        return None
    again = replace(r, current=c.current, change=c.change, ci=c.ci)
    word = "confirmed" if c.verdict == "regressed" else "not confirmed"
    return f"{word}: re-measured {describe_change(again)}, {c.verdict}"


def noise_line(c: Comparison) -> str | None:
    """Where fitted thresholds came from, in one line (None when none were fitted)."""
    if c.noise is None:
        return None
    lo, hi = c.noise.runs_min, c.noise.runs_max
    runs = f"{lo}" if lo == hi else f"{lo}-{hi}"
    # The count the fit made (a comparison read back rebuilds per_series from the rows
    # it shows, which can be fewer series than the history held).
    fitted = c.noise.fitted
    return (
        f"run-to-run noise: {runs} earlier comparable runs in {c.noise.folder};"
        f" {fitted} threshold(s) widened to it; {c.noise.fallback}"
    )


def _limit_text(metric: str, limit: float) -> str:
    """A noise limit as the change it stands for: ``±38%`` (a ratio), ``±1.2pp`` (a rate)."""
    if metric in ABSOLUTE_METRICS:
        return f"±{limit * 100:.1f}pp"
    return f"±{limit:.0%}"


def detectable_lines(c: Comparison, *, per_series: bool = False) -> list[str]:
    """The smallest change the benchmark's history lets the gate detect, per metric
    (``per_series``: per row): the noise limit of its series (tokrate.analysis.noise),
    "on these 12 nights ttft_p95 moves ±38% (sim-70b c=8; ±12-38% over 4 series):
    smaller changes cannot be told from noise". Empty without fitted rows."""
    rows = [r for r in _ordered(c) if r.noise_limit is not None and math.isfinite(r.noise_limit)]
    if per_series:
        return [
            f"{r.label} {r.metric}: on these {r.noise_nights} nights it moves"
            f" {_limit_text(r.metric, r.noise_limit or 0.0)}: smaller changes cannot be told"
            " from noise"
            for r in rows
        ]
    by_metric: dict[str, list[MetricResult]] = {}
    for r in rows:
        by_metric.setdefault(r.metric, []).append(r)
    out = []
    for metric, group in by_metric.items():
        widest = max(group, key=lambda r: r.noise_limit or 0.0)
        nights = sorted({r.noise_nights for r in group})
        span = f"{nights[0]}" if len(nights) == 1 else f"{nights[0]}-{nights[-1]}"
        limit = _limit_text(metric, widest.noise_limit or 0.0)
        spread = ""
        if len(group) > 1:
            low = _limit_text(metric, min(r.noise_limit or 0.0 for r in group))
            spread = f"; {low} to {limit[1:]} over {len(group)} series"
        out.append(
            f"on these {span} nights {metric} moves {limit} ({widest.label}{spread}):"
            " smaller changes cannot be told from noise"
        )
    return out


def attention_lines(c: Comparison) -> list[str]:
    """One line per regressed or inconclusive row, regressions first: target and
    level, metric, change with its interval, verdict and why (``--quiet``)."""
    order = {"regressed": 0, "inconclusive": 1}
    rows = sorted((r for r in _ordered(c) if r.verdict in order), key=lambda r: order[r.verdict])
    out = []
    for r in rows:
        change = describe_change(r)
        line = f"{r.verdict}: {r.label} {r.metric}" + ("" if change == DASH else f" {change}")
        if r.verdict == "regressed":
            th = r.threshold if r.threshold is not None else DASH
            line += f" (threshold {th})"
            again = confirmation_text(r)
            if again is not None:
                line += f"; {again}"
        else:
            line += f": {r.reason}"
        out.append(line)
    return out


def headline(c: Comparison) -> str:
    """The verdict line: what was decided, the counts, which runs."""
    return (
        f"tokrate compare: {_WORD[c.verdict]} ({_count_text(c)}) — "
        f"{c.current_name} vs baseline {c.baseline_name}"
    )


def threshold_line(c: Comparison) -> str:
    """The thresholds judged by, in one line."""
    searched = any(r.metric == "capacity" for r in c.results)
    # Capacity is judged only where both runs searched: named only then.
    judged = [t for t in c.thresholds if t.metric != "capacity" or searched]
    parts = ", ".join(f"{t.metric} {t.describe()}" for t in judged)
    widened = c.noise.fitted if c.noise is not None else c.fitted_rows
    if widened:
        parts += f"; {widened} widened to the run-to-run noise"
    return f"thresholds: {parts}"


def _uniform_thresholds(c: Comparison) -> bool:
    """Whether every row uses its metric's run-wide threshold (then one line says it)."""
    return not c.fitted_rows


def _ordered(c: Comparison) -> list[MetricResult]:
    """The results with models in the order of every table (tokrate.analysis.ordering:
    by name read naturally, sim-1b before sim-13b), then endpoint and level; a
    target's metrics keep their order."""
    return sorted(
        c.results,
        key=lambda r: (model_key(r.model), natural_key(r.endpoint), natural_key(r.scenario)),
    )


def _targets(c: Comparison) -> Iterator[tuple[str, list[MetricResult]]]:
    rows: dict[str, list[MetricResult]] = {}
    for r in _ordered(c):
        rows.setdefault(r.label, []).append(r)
    yield from rows.items()


def _md_line(r: MetricResult) -> str:
    """One result for markdown: the (untrusted) target label escaped, our own words
    and numbers as they are."""
    label = md_escape(r.label)
    if r.verdict == "not_comparable":
        return f"{label} {r.metric}: not comparable ({md_escape(r.reason)})"
    line = f"{label} {r.metric}: {describe_change(r)}, {r.verdict}"
    if r.verdict == "inconclusive":
        line += f" ({md_escape(r.reason)})"
    again = confirmation_text(r)
    return line if again is None else f"{line} ({again})"


def render_markdown(c: Comparison) -> str:
    """A CI step summary: the verdict line first, then the lines that need attention,
    then the full table. Plain GitHub-flavoured markdown; run and target names (which
    come from users and servers) are escaped."""
    head = (
        f"tokrate compare: {_WORD[c.verdict]} ({_count_text(c)}) — "
        f"{md_escape(c.current_name)} vs baseline {md_escape(c.baseline_name)}"
    )
    out = [f"### {_ICON[c.verdict]} {head}", ""]
    order = {"regressed": 0, "inconclusive": 1, "improved": 2}
    notable = [r for r in _ordered(c) if r.verdict in order or r.confirmation is not None]
    notable.sort(key=lambda r: order.get(r.verdict, 3))
    for r in notable:
        out.append(f"- {_md_line(r)}")
    # One line per target when all its metrics share the reason (a missing model),
    # else one line per metric.
    for label, rows in _targets(c):
        missing = [r for r in rows if r.verdict == "not_comparable"]
        if not missing:
            continue
        if len(missing) == len(rows) and len({r.reason for r in rows}) == 1:
            out.append(f"- {md_escape(label)}: not comparable ({md_escape(rows[0].reason)})")
        else:
            out += [f"- {_md_line(r)}" for r in missing]
    for w in c.warnings:
        out.append(f"- warning: {md_escape(w)}")
    for side, warnings in (("baseline", c.baseline.warnings), ("current", c.current.warnings)):
        out += [f"- {side} run warned: {md_escape(w)}" for w in warnings]
    if len(out) > 2:
        out.append("")
    out.append(
        "| target | metric | baseline | current | change [95% CI] | threshold | verdict"
        " | early-stopping estimate (99%) |"
    )
    out.append("|---|---|---:|---:|---|---:|---|---:|")
    for r in _ordered(c):
        th = r.threshold or DASH
        change = describe_change(r) if r.verdict != "not_comparable" else md_escape(r.reason)
        cells = (
            md_escape(r.label),
            r.metric,
            format_value(r.baseline, r.unit),
            format_value(r.current, r.unit),
            change,
            th,
            r.verdict.replace("_", " "),
            es_values(r) or DASH,
        )
        out.append("| " + " | ".join(cells) + " |")
    out += ["", footnote(c)]
    noise = noise_line(c)
    if noise is not None:
        out += ["", md_escape(noise)]
    detectable = detectable_lines(c, per_series=True)
    if detectable:
        out += ["", "Smallest change this history lets the gate detect (its noise limit):", ""]
        out += [f"- {md_escape(line)}" for line in detectable]
    return "\n".join(out) + "\n"


def footnote(c: Comparison) -> str:
    """What the change column's numbers are and what a regression needs, in the form
    they are printed: ratios around 1, points for rates."""
    s = c.settings
    return (
        "Changes are ratios of current to baseline, turned to read ≥ 1 with the word that"
        ' says which way ("1.25x slower", "1.10x faster"), with their'
        f" {s.confidence:.0%} bootstrap interval in the same form ([1.20, 1.31];"
        f" {s.resamples} resamples, seed {s.seed}); rates are differences in percentage"
        f" points with Newcombe's {s.confidence:.0%} interval. A regression reads"
        ' "slower" (a rate: higher errors, lower passes), with the change past its threshold'
        " and the whole interval above 1 (above 0 points for a rate)"
        + (", and a re-measurement that regressed too." if c.confirmed else ".")
    )


def render_json(c: Comparison) -> str:
    """The JSON document, indented, with a trailing newline."""
    return orjson.dumps(to_json(c), option=orjson.OPT_INDENT_2).decode() + "\n"


def render_table(c: Comparison, console: Console) -> None:
    """Print the verdict, the thresholds and a table that fits 80 columns.

    One section per target (its label on a line of its own), one row per metric:
    ``baseline → current`` with the unit once, the change with its interval, and the
    verdict. The threshold gets a column only where thresholds differ per series
    (fitted to noise); otherwise one line above the table names them. A target whose
    metrics are all not comparable for one reason is one line. Numbers never wrap;
    only names fold.
    """
    console.print(
        Text(
            f"tokrate compare: {_WORD[c.verdict]} — {c.current_name} vs baseline {c.baseline_name}"
        )
    )
    console.print(Text(_count_text(c)))
    console.print(Text(threshold_line(c)))
    noise = noise_line(c)
    if noise is not None:
        console.print(Text(noise))
    per_series = not _uniform_thresholds(c)
    table = RichTable(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, collapse_padding=True)
    table.add_column("target / metric", overflow="fold", ratio=1, min_width=14)
    table.add_column("baseline → current", justify="right", no_wrap=True)
    # Reasons (not numbers) may fold: the column is at least as wide as every change.
    widest = max(
        [len(describe_change(r)) for r in c.results if r.verdict != "not_comparable"]
        + [len("change [95% CI]")]
    )
    table.add_column("change [95% CI]", overflow="fold", min_width=widest, ratio=1)
    if per_series:
        table.add_column("limit", justify="right", no_wrap=True)
    table.add_column("verdict", no_wrap=True)
    for label, rows in _targets(c):
        same_reason = len({r.reason for r in rows}) == 1
        if all(r.verdict == "not_comparable" for r in rows) and same_reason:
            reason = Text(f"{label}: not comparable ({rows[0].reason})", style="yellow")
            table.add_row(reason, *([""] * (len(table.columns) - 1)))
            continue
        table.add_row(Text(label, style="bold"), *([""] * (len(table.columns) - 1)))
        for r in rows:
            change = describe_change(r) if r.verdict != "not_comparable" else r.reason
            cells = [Text(f"  {r.metric}"), Text(_values(r)), Text(change)]
            if per_series:
                cells.append(Text(r.threshold or DASH))
            short = {"not_comparable": "n/c", "inconclusive": "inconcl."}
            cells.append(Text(short.get(r.verdict, r.verdict)))
            table.add_row(*cells, style=_STYLE[r.verdict] or None)
    console.print(table)
    es_rows = [(r, es_values(r)) for r in _ordered(c) if r.verdict != "not_comparable"]
    es_lines = [f"{r.label} {r.metric} {text}" for r, text in es_rows if text is not None]
    if es_lines:
        console.print(Text("early-stopping estimates (99%): " + "; ".join(es_lines)))
    for r in _ordered(c):
        again = confirmation_text(r)
        if r.verdict == "inconclusive":
            console.print(Text(f"{r.label} {r.metric}: inconclusive ({r.reason})"))
        if again is not None:
            console.print(Text(f"{r.label} {r.metric}: {again}"))
    for w in c.warnings:
        console.print(Text(f"warning: {w}"))
    for side, warnings in (("baseline", c.baseline.warnings), ("current", c.current.warnings)):
        for w in warnings:
            console.print(Text(f"{side} run warned: {w}"))


def baseline_verdict_line(baseline: str, comparison: Comparison | None) -> str:
    """One line: what the baseline check decided."""
    if comparison is None:
        return f"baseline {baseline}: no baseline run yet; this run becomes {baseline}"
    n = comparison.counts
    word = {
        "regressed": "REGRESSION",
        "ok": "no regression",
        "inconclusive": "INCONCLUSIVE",
        "not_comparable": "not comparable",
    }[comparison.verdict]
    return (
        f"baseline {comparison.baseline_name}: {word} ({n['regressed']} regressed,"
        f" {n['improved']} improved, {n['unchanged']} unchanged,"
        f" {n['inconclusive']} inconclusive, {n['not_comparable']} not comparable)"
    )
