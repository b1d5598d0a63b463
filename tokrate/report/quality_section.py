"""The report's answer-quality section (docs/quality.md): the pass-rate table, the
routing table, quality per dollar, and the trade on one page: pass rate and speed
against model size (or, where not every size is known, cost per 1,000 requests, else
decode speed), at the routing table's level with its n and intervals."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal

from matplotlib.axes import Axes
from matplotlib.figure import Figure

from tokrate.analysis.routing import Route, RoutingTable, routing_table
from tokrate.report.figures import (
    fit_figure_to_legends,
    house_style,
    legend_columns,
    new_figure,
    plain_log_axes,
)
from tokrate.report.labels import Label, label_panels
from tokrate.report.model import Chart, LeftOut, ReportInputs
from tokrate.report.styles import report_order, series_colors
from tokrate.report.tables import Table
from tokrate.report.terminal.quality_text import HEADER, quality_rows
from tokrate.report.terminal.tier_text import cost_cell
from tokrate.textfmt import fmt_pct_interval

__all__ = ["quality_chart", "quality_tables"]


def _routings(inputs: ReportInputs) -> Iterator[tuple[str, RoutingTable]]:
    infos = dict((key, run.info) for key, run in inputs.runs)
    for key, summary in inputs.summaries:
        table = routing_table(summary, infos[key])
        if table is not None:
            yield key, table


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.0%}"


def quality_tables(inputs: ReportInputs) -> Iterator[Table | LeftOut]:
    """Pass rates per model x task, the routing table, and quality per dollar."""
    for key, summary in inputs.summaries:
        rows = quality_rows(summary)
        if rows:
            yield Table(
                f"Answer quality: {key}" if inputs.multi else "Answer quality",
                HEADER,
                tuple(rows),
                "Checked answers of measured requests; 95% CI: Wilson score interval "
                "(docs/quality.md).",
                (False, False, True, True, True, True, True),
            )
    for key, table in _routings(inputs):
        yield _routing_table(key, table, inputs.multi)
        per_dollar = _per_dollar(table)
        if per_dollar is not None:
            yield per_dollar


#: How a route's pick was ranked, for the routing table's evidence.
def _how(route: Route) -> str:
    pick = route.pick
    if pick is None:
        return ""
    if route.rule == "cheapest":
        return (
            f"the cheapest that meets ({cost_cell(pick.cost, interval=False)} per 1,000 requests)"
        )
    if route.rule == "smallest":
        return f"the smallest that meets ({pick.size_b:g}B)"
    rate = "-" if pick.goodput_rps is None else f"{pick.goodput_rps:.3g} req/s"
    return f"the highest goodput that meets ({rate}; no price or size known)"


def _routing_table(key: str, table: RoutingTable, multi: bool) -> Table:
    rows = []
    for route in table.routes:
        pick = route.pick
        if pick is None:
            evidence = route.reason or ""
        else:
            lo, hi = pick.quality.rate_ci or (0.0, 0.0)
            evidence = (
                f"passes {pick.quality.passed}/{pick.quality.n} = {pick.rate:.0%} "
                f"(95% CI {fmt_pct_interval(lo, hi)}); {_how(route)}"
                + ("" if pick.confident else " (its interval reaches below the bar)")
            )
        rows.append(
            (
                route.task,
                f"{route.bar:.0%}",
                "no route" if pick is None else pick.model,
                evidence,
            )
        )
    source = " (the default: set [slo] min_pass_rate)" if table.bar_source == "default" else ""
    needed = sorted({r.needed for r in table.routes})
    return Table(
        f"Routing table: {key}" if multi else "Routing table",
        ("task", "bar", "route", "evidence"),
        tuple(rows),
        f"At {table.level}, the heaviest load level: each task's route is the verdict's "
        f"pick, its pass rate on that level's answers. A model meets when its pass rate "
        f"reaches the task's own bar{source} on at least "
        f"{' / '.join(str(n) for n in needed)} checked answers and 95% of its requests met "
        "the SLOs; the cheapest by cost per 1,000 requests is picked, else the smallest "
        "where every size is known, else the highest goodput. routing.json holds every "
        "level and every model's evidence.",
        wrap=(False, False, False, True),
    )


def _per_dollar(table: RoutingTable) -> Table | None:
    rows = []
    for route in table.routes:
        for c in route.candidates:
            per_1k = c.usd_per_1k_requests
            if c.quality.n == 0 or per_1k is None or per_1k <= 0:
                continue
            rows.append(
                (
                    route.task,
                    c.model,
                    f"{c.rate:.0%}",
                    cost_cell(c.cost),
                    f"{c.rate * 1000 / per_1k:,.4g}",
                )
            )
    if not rows:
        return None
    return Table(
        f"Quality per dollar at {table.level}",
        ("task", "model", "pass rate", "$ / 1k req (95% CI)", "right answers per $"),
        tuple(rows),
        "Right answers per dollar: the pass rate times the requests one dollar buys at "
        "that task's cost per 1,000 requests (its own token mix): higher is more right "
        "answers for the money.",
        (False, False, True, True, True),
    )


#: The x axis of the quality chart: size where every model has one, else cost per
#: 1,000 requests where every model has one, else decode speed.
Axis = Literal["size", "cost", "speed"]


@dataclass(frozen=True, slots=True)
class _Point:
    #: The point's name: its model, with the run's key in a multi-run report.
    label: str
    model: str
    task: str
    bar: float
    n: int
    rate: float
    lo: float
    hi: float
    size_b: float | None
    usd_per_1k: float | None
    decode_tps: float | None

    def x(self, axis: Axis) -> float | None:
        if axis == "size":
            return self.size_b
        return self.usd_per_1k if axis == "cost" else self.decode_tps


@dataclass(frozen=True, slots=True)
class _QualityData:
    level: str
    axis: Axis
    points: tuple[_Point, ...]


def _points(inputs: ReportInputs) -> tuple[str | None, list[_Point]]:
    """Every checked (model, task) at each run's routing level: the routing table's
    own n, rate and interval, so the chart and that table never disagree."""
    points: list[_Point] = []
    levels: list[str] = []
    for key, table in _routings(inputs):
        if table.level is not None:
            levels.append(table.level)
        for route in table.routes:
            for c in route.candidates:
                if c.quality.n == 0:
                    continue  # no answer of it was checked on this task
                lo, hi = c.quality.rate_ci or (c.rate, c.rate)
                label = f"{c.model} ({key})" if inputs.multi else c.model
                points.append(
                    _Point(
                        label,
                        c.model,
                        route.task,
                        route.bar,
                        c.quality.n,
                        c.rate,
                        lo,
                        hi,
                        c.size_b,
                        c.usd_per_1k_requests,
                        c.decode_tps,
                    )
                )
    return (" / ".join(dict.fromkeys(levels)) or None), points


def _axis(points: Sequence[_Point]) -> Axis | None:
    axes: tuple[Axis, ...] = ("size", "cost", "speed")
    for axis in axes:
        if all((p.x(axis) or 0.0) > 0 for p in points):
            return axis
    return None


_AXIS_WORDS: Final[dict[str, str]] = {
    "size": "active parameters (billions, log scale)",
    "cost": "USD per 1,000 requests (log scale)",
    "speed": "decode speed per stream, median (tokens/s, log scale)",
}


def quality_chart(inputs: ReportInputs) -> Iterator[Chart[Any] | LeftOut]:
    """Pass rate per task at the routing level against size (where every model has
    one), else cost per 1,000 requests, else decode speed; the bar drawn, every model
    labelled; beside it decode speed against the same axis (size or cost)."""
    level, points = _points(inputs)
    if not points or level is None:
        return
    axis = _axis(points)
    if axis is None:
        missing = sorted({p.label for p in points if p.decode_tps is None})
        yield LeftOut(
            "answer quality: no axis every checked model has (no size, no price, and no "
            f"measurable decode speed for {', '.join(missing)})"
        )
        return
    slow = sorted({p.label for p in points if p.decode_tps is None})
    if slow and axis != "speed":
        yield LeftOut(
            f"quality vs {axis}: left out of the speed panel (no measurable decode speed: "
            "fewer than 2 tokens, or the stream was buffered: it came in a few reads): "
            f"{', '.join(slow)}"
        )
    why = {
        "size": "",
        "cost": " No model size is known for every model, so cost stands in for it.",
        "speed": " Neither every size nor every price is known, so decode speed stands in.",
    }[axis]
    name = {"size": "quality_vs_size", "cost": "quality_vs_cost", "speed": "quality_vs_speed"}
    yield Chart(
        name[axis],
        f"Answer quality vs {axis} at {level}",
        f"Pass rate of checked answers per task at {level}, the level of the Routing "
        "table, with the same n and Wilson 95% interval that table shows, in its model's "
        "colour, one marker per task (a grey line joins a task's points); the dashed "
        f"line is each task's pass-rate bar and every point names its model.{why}"
        + (
            f" Right: per-stream decode speed (median) at {level}, the Routing table's"
            " level, against the same axis."
            if axis != "speed"
            else ""
        ),
        _QualityData(level, axis, tuple(points)),
        _draw,
    )


#: One marker and line style per task (the colour is the model's, as in every chart).
_TASK_MARKERS: Final = ("o", "s", "^", "D", "v", "P", "X", "*")
_TASK_LINES: Final = ("-", "--", ":", "-.")
#: The colour of what belongs to a task, not to a model: the line joining a task's
#: points, its pass-rate bar and the bar's words.
_TASK_INK: Final = "0.45"


@house_style
def _draw(data: _QualityData) -> Figure:
    """Left: pass rate per (model, task) with its Wilson interval, each point in its
    model's colour (the report's), each task a marker joined by a grey line of its own
    style (a task's points nudged sideways so two tasks of one model do not cover each
    other), each bar dashed; right: decode speed per model, in its colour. Point
    labels never overlap (tokrate.report.labels); the legend is outside the panels."""
    axis = data.axis
    two = axis != "speed"
    fig, axes = new_figure(11.5 if two else 7.5, 4.8, ncols=2 if two else 1)
    left = axes[0]
    tasks = sorted({p.task for p in data.points})
    models = report_order([p.model for p in data.points])
    colors = series_colors(models)
    names: list[Label] = []
    for t, task in enumerate(tasks):
        marker = _TASK_MARKERS[t % len(_TASK_MARKERS)]
        nudge = 1.0 + 0.04 * (t - (len(tasks) - 1) / 2)
        mine = sorted((p for p in data.points if p.task == task), key=lambda p: p.x(axis) or 0)
        xs = [(p.x(axis) or 0.0) * nudge for p in mine]
        ys = [p.rate * 100 for p in mine]
        left.plot(
            xs,
            ys,
            color=_TASK_INK,
            linestyle=_TASK_LINES[t // len(_TASK_MARKERS) % len(_TASK_LINES)],
            marker=marker,
            markerfacecolor="none",
            linewidth=1,
            label=f"task: {task}",
            zorder=1,
        )
        for p, x, y in zip(mine, xs, ys, strict=True):
            # Clipped at 0: a Wilson end at 100% may sit a rounding error below the rate.
            err = [[max(0.0, p.rate - p.lo) * 100], [max(0.0, p.hi - p.rate) * 100]]
            left.errorbar(
                [x], [y], yerr=err, marker=marker, capsize=3, color=colors[p.model], zorder=2
            )
            names.append(Label(x, y, f"{p.label} (n={p.n})", colors[p.model]))
    # One line per bar value: tasks sharing a bar share its line and its words.
    bars: dict[float, list[str]] = {}
    for p in data.points:
        if p.task not in bars.setdefault(p.bar, []):
            bars[p.bar].append(p.task)
    for bar, of in sorted(bars.items()):
        left.axhline(bar * 100, color=_TASK_INK, linestyle="--", linewidth=1)
        left.annotate(
            f"bar {bar:.0%}: {', '.join(sorted(of))}",
            (0.0, bar * 100),
            xycoords=("axes fraction", "data"),
            xytext=(4, 2),
            textcoords="offset points",
            fontsize="x-small",
            color=_TASK_INK,
        )
    # The legend names each model once, in its colour, then each task's marker.
    for model in models:
        left.plot([], [], "o", color=colors[model], label=model)
    handles, labels = left.get_legend_handles_labels()
    order = sorted(range(len(labels)), key=lambda i: labels[i].startswith("task: "))
    left.set_xscale("log")
    plain_log_axes(left, y=False)
    left.set_ylim(0, 109)
    left.set_xlabel(_AXIS_WORDS[axis])
    left.set_ylabel("pass rate (%)")
    left.set_title(f"Answer quality vs {axis} at {data.level}")
    legend = fig.legend(
        [handles[i] for i in order],
        [labels[i] for i in order],
        loc="outside right upper",
        frameon=False,
        ncols=legend_columns(len(labels)),
    )
    fit_figure_to_legends(fig, beside=[legend])
    panels: list[tuple[Axes, Sequence[Label], float]] = [(left, names, 7.0)]
    if two:
        right = axes[1]
        by_label: dict[str, tuple[float, float, str]] = {}
        for p in data.points:
            at = p.x(axis)
            if p.decode_tps is not None and at is not None:
                by_label[p.label] = (at, p.decode_tps, p.model)
        speeds: list[Label] = []
        if by_label:
            ordered = sorted(by_label.items(), key=lambda kv: kv[1][0])
            right.plot(
                [v[0] for _m, v in ordered],
                [v[1] for _m, v in ordered],
                "-",
                color=_TASK_INK,
                linewidth=1,
                zorder=1,
            )
            for label, (x, y, model) in ordered:
                right.plot([x], [y], "o", color=colors[model], zorder=2)
                speeds.append(Label(x, y, label, colors[model]))
            right.set_xscale("log")
            right.set_yscale("log")
            plain_log_axes(right)
        right.set_xlabel(_AXIS_WORDS[axis])
        right.set_ylabel("decode speed, median (tokens/s)")
        right.set_title(f"Speed vs {axis}")
        panels.append((right, speeds, 8.0))
    label_panels(fig, panels)
    return fig
