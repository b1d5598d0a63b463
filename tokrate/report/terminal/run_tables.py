"""The tables ``tokrate run`` prints on the terminal: the summary of every model x load
level (:func:`render_summary`) and a capacity search's result (:func:`render_capacity`);
the comparison table is :func:`tokrate.report.terminal.comparison_text.render_table`.

The CLI draws them in the process that measured the run, after the load, from the
typed summary.json it read back, so this module imports rich and the run-folder types
only: never polars, numpy or matplotlib (tests/processes/test_lean_process.py). Every
table fits 80 columns; only names ever wrap.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Final

from rich import box
from rich.console import Console
from rich.table import Table as RichTable
from rich.text import Text

from tokrate.report.terminal.stream_words import who_held
from tokrate.report.terminal.tier_text import cost_cell, usd_text
from tokrate.runfolder.capacity_result import CapacityResult
from tokrate.runfolder.summary import Group, Summary
from tokrate.spec.metric_table import metric_label
from tokrate.textfmt import DASH, fmt_ms, fmt_num, fmt_pct, fmt_tps

__all__ = ["BUFFERED_MARK", "capacity_level", "render_capacity", "render_summary"]


#: Terminal table columns: (key, header, justify right). Units live in the headers,
#: so cells are bare numbers and the table fits 80 columns.
#: The decision columns (SLO met, goodput, cost) come first after the names, as in the
#: report's summary table: what decides a tier is read before the detail.
_TERMINAL_COLUMNS: Final = (
    ("endpoint", "endpoint", False),
    ("model", "model", False),
    ("load", "load", False),
    ("slo_met", "SLO\nmet", True),
    ("goodput", "goodput\nreq/s", True),
    ("cost", "$ / 1k\nreq", True),
    ("ok", "ok", True),
    ("err", "err", True),
    ("ttft_p50", f"{metric_label('ttft')}\np50 ms", True),
    ("ttft_p95", f"{metric_label('ttft')}\np95 ms", True),
    ("tpot_p50", f"{metric_label('tpot')}\np50 ms", True),
    ("decode", "tok/s\nstream", True),
    ("agg", "tok/s\ntotal", True),
)


#: Columns holding names (may fold); the narrowest a name column gets.
_NAMES: Final = ("endpoint", "model")
_NAME_MIN_WIDTH: Final = 8


#: Marks a TPOT / stream tok/s cell that leaves buffered requests out.
BUFFERED_MARK: Final = "*"
#: Marks a cost priced by GPU-hours (gpu_hourly_usd), not token prices.
GPU_MARK: Final = "†"


def _per_token(g: Group, text: str) -> str:
    """A TPOT or stream tok/s cell: "buf" when every request was buffered, the value
    marked with :data:`BUFFERED_MARK` when some were (both explained under the table)."""
    if g.stream is None or not g.stream.buffered:
        return text
    return "buf" if not g.tpot_s.n else text + BUFFERED_MARK


def _buffered_line(groups: Sequence[Group]) -> str | None:
    """The one line under the table that explains the buffered marks."""
    hit = [g for g in groups if g.stream is not None and g.stream.buffered]
    if not hit:
        return None
    where = ", ".join(
        f"{g.model} {g.level} {g.stream.buffered}/{g.stream.judged}" for g in hit[:3] if g.stream
    )
    if len(hit) > 3:
        where += f" and {len(hit) - 3} more"
    streams = [g.stream for g in hit if g.stream is not None]
    lags = [s.client_held_lag_max_ms for s in streams if s.client_held_lag_max_ms is not None]
    who = who_held(
        sum(s.buffered for s in streams),
        sum(s.client_held for s in streams),
        sum(s.short_hold for s in streams),
        max(lags) if lags else None,
    )
    return (
        f"{BUFFERED_MARK} after a TPOT or tok/s stream figure: it leaves out buffered "
        "requests; buf: every request was buffered, so there is no such figure. "
        f"{who}: ITL/TPOT not meaningful ({where} requests came in a few reads)."
    )


#: Cost intervals listed under the table before "and N more".
_COST_LINES: Final = 6


def _cost_line(groups: Sequence[Group]) -> str | None:
    """The line under the table that says what the cost column is, with each
    figure's 95% interval (the cells hold only the figure, to fit 80 columns)."""
    priced = [g for g in groups if g.cost is not None and g.cost.usd_per_1k_requests is not None]
    if not priced:
        return None
    many_levels = len({g.level for g in groups}) > 1
    parts = []
    for g in priced[:_COST_LINES]:
        assert g.cost is not None
        where = f"{g.model} {g.level}" if many_levels else g.model
        ci = g.cost.usd_per_1k_requests_ci
        span = DASH if ci is None else f"{usd_text(ci[0])}–{usd_text(ci[1])}"
        parts.append(f"{where} {span}")
    if len(priced) > _COST_LINES:
        parts.append(f"{len(priced) - _COST_LINES} more in summary.json")
    gpu = any(g.cost is not None and g.cost.source == "gpu_hourly" for g in priced)
    rule = (
        f"; {GPU_MARK} marks GPU-hour pricing (gpu_hourly_usd × gpus over the measured throughput)"
        if gpu
        else ""
    )
    return (
        "$ / 1k req: what 1,000 of these requests cost at the model's token prices on "
        f"their own token mix{rule}; 95% CI: {', '.join(parts)}."
    )


def _cells(g: Group) -> dict[str, str]:
    return {
        "endpoint": g.endpoint,
        "model": g.model,
        "load": g.level,
        "slo_met": fmt_pct(g.slo_met_fraction),
        "goodput": fmt_num(g.goodput_rps, 2),
        "cost": cost_cell(g.cost, interval=False).removeprefix("$").replace(" GPU-h", GPU_MARK),
        "ok": str(g.counts.ok),
        "err": str(g.counts.failed),
        "ttft_p50": fmt_ms(g.ttft_s.p50, unit=False),
        "ttft_p95": fmt_ms(g.ttft_s.p95, unit=False),
        "tpot_p50": _per_token(g, fmt_ms(g.tpot_s.p50, unit=False)),
        "decode": _per_token(g, fmt_tps(g.decode_tps.p50)),
        "agg": fmt_tps(g.aggregate_output_tps),
    }


def render_summary(summary: Summary, console: Console, *, title: str | None = None) -> None:
    """Print the terminal summary table (one row per model x load level) to ``console``.

    Fits 80 columns with every number whole: units sit in the headers, there are no
    vertical rules, and columns that say nothing are left out: the endpoint and the
    load level when every row has the same one, the error count when it is 0
    everywhere (each moves into the title), SLO met and goodput when no SLO is set,
    the cost (USD per 1,000 requests on their own token mix; the intervals in a line
    under the table) when no model has a price. The
    decision columns (SLO met, goodput, cost) come right after the names. When the
    names would have to fold, endpoint and model share one ``target`` column
    (endpoint/model).
    Only names ever wrap. A title line comes first: ``title`` (default ``tokrate run
    <run_id>``) plus what the dropped columns held. A group with buffered streams has
    its TPOT / stream tok/s cells marked (``*`` some, ``buf`` all) and one line under
    the table says what that means. Cells are rich ``Text``
    objects, so "[" in a model name is never read as markup.
    """
    groups = summary.groups
    if not groups:
        console.print(Text("no requests recorded"))
        return
    rows = [_cells(g) for g in groups]
    heading = title or f"tokrate run {summary.run_id or ''}".strip()
    shown: list[tuple[str, str, bool]] = []
    for key, header, right in _TERMINAL_COLUMNS:
        values = {r[key] for r in rows}
        if key in ("endpoint", "load") and len(values) == 1:
            value = next(iter(values))
            heading += f" · endpoint {value}" if key == "endpoint" else f" · {value}"
            continue
        if key == "err" and values == {"0"}:
            heading += " · no errors"
            continue
        if key in ("slo_met", "goodput") and all(g.goodput_rps is None for g in groups):
            continue
        if key == "cost" and all(g.cost is None for g in groups):
            continue
        shown.append((key, header, right))
    needed = _table_width(shown, rows, names_whole=True)
    if needed > console.width and {"endpoint", "model"} <= {k for k, *_ in shown}:
        for r in rows:
            r["model"] = f"{r['endpoint']}/{r['model']}"
        shown = [
            ("model", "target", False) if key == "model" else (key, header, right)
            for key, header, right in shown
            if key != "endpoint"
        ]
    table = RichTable(
        box=box.SIMPLE_HEAD,
        show_edge=False,
        pad_edge=False,
        collapse_padding=True,
    )
    for key, header, right in shown:
        if key in _NAMES:
            # Names fold onto more lines when space runs short; numbers never do.
            table.add_column(header, overflow="fold", min_width=_width(key, header, rows), ratio=1)
        else:
            table.add_column(
                header,
                justify="right" if right else "left",
                no_wrap=True,
                min_width=_width(key, header, rows),
            )
    for r in rows:
        table.add_row(*(Text(r[key]) for key, _h, _r in shown))
    console.print(Text(heading))
    console.print(table)
    for line in (_cost_line(groups), _buffered_line(groups)):
        if line is not None:
            console.print(Text(line))


def _width(key: str, header: str, rows: Sequence[Mapping[str, str]], *, whole: bool = False) -> int:
    """The narrowest a column may be: its widest cell (a name: at most _NAME_MIN_WIDTH
    unless ``whole``) and the longest line of its header."""
    widest = max(len(r[key]) for r in rows)
    if key in _NAMES and not whole:
        return min(widest, _NAME_MIN_WIDTH)
    return max(widest, *(len(line) for line in header.split("\n")))


def _table_width(
    shown: Sequence[tuple[str, str, bool]],
    rows: Sequence[Mapping[str, str]],
    *,
    names_whole: bool = False,
) -> int:
    """Characters the table needs: columns plus the two between neighbours (names
    unfolded with ``names_whole``, else at their narrowest)."""
    widths = [_width(key, header, rows, whole=names_whole) for key, header, _r in shown]
    return sum(widths) + 2 * (len(shown) - 1)


# --- a capacity search --------------------------------------------------------------


def capacity_level(value: float | None, unit: str) -> str:
    """A capacity as the tables show it: streams, or requests per second."""
    if value is None:
        return DASH
    return f"{value:g}" if unit == "concurrency" else f"{value:g}/s"


def render_capacity(result: CapacityResult, console: Console) -> None:
    """The capacity search's table: one line per target, then each target's note."""
    unit = "c" if result.unit == "concurrency" else "req/s"
    table = RichTable(
        title=f"capacity ({unit} per target; ≥ {result.goodput:.0%} of requests meet every SLO)",
        box=None,
        title_justify="left",
    )
    for name, right in (
        ("model", False),
        ("capacity", True),
        ("verdict", False),
        ("limit", False),
        ("probes", True),
        ("requests", True),
    ):
        table.add_column(name, justify="right" if right else "left")
    for t in result.targets:
        table.add_row(
            t.model,
            capacity_level(t.capacity, result.unit),
            t.verdict,
            t.limiting_slo or DASH,
            str(len(t.probes)),
            str(t.requests),
        )
    console.print(table)
    for t in result.targets:
        console.print(f"  {t.model}: {t.note}", markup=False, highlight=False, soft_wrap=True)
