"""The report's answer-quality section (docs/quality.md): the pass-rate table, the
routing table, quality per dollar, and the trade on one page (pass rate and speed
against model size)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from matplotlib.figure import Figure

from tokrate.analysis.ordering import model_key, natural_key
from tokrate.analysis.routing import RoutingTable, routing_table
from tokrate.report.figures import house_style, new_figure, plain_log_axes
from tokrate.report.model import Chart, LeftOut, ReportInputs
from tokrate.report.tables import Table
from tokrate.report.terminal.quality_text import HEADER, quality_rows
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


def _routing_table(key: str, table: RoutingTable, multi: bool) -> Table:
    rows = []
    for route in table.routes:
        pick = route.pick
        if pick is None:
            evidence = route.reason or ""
        else:
            lo, hi = pick.quality.rate_ci or (0.0, 0.0)
            how = "the cheapest priced" if route.rule == "cheapest" else "the smallest"
            evidence = (
                f"passes {pick.quality.passed}/{pick.quality.n} = {pick.rate:.0%} "
                f"(95% CI {fmt_pct_interval(lo, hi)}); {how} model that meets"
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
        f"pick. A model meets when its pass rate reaches the bar{source} on at least "
        f"{' / '.join(str(n) for n in needed)} checked answers and 95% of its requests met "
        "the SLOs; the cheapest priced model that meets is picked, else the smallest. "
        "routing.json holds every level and every model's evidence.",
    )


def _per_dollar(table: RoutingTable) -> Table | None:
    rows = []
    for route in table.routes:
        for c in route.candidates:
            if c.quality.n == 0 or c.usd_per_m_output is None or c.usd_per_m_output <= 0:
                continue
            rows.append(
                (
                    route.task,
                    c.model,
                    f"{c.rate:.0%}",
                    f"${c.usd_per_m_output:,.2f}",
                    f"{c.rate / c.usd_per_m_output:.3g}",
                )
            )
    if not rows:
        return None
    return Table(
        "Quality per dollar",
        ("task", "model", "pass rate", "USD / M output tokens", "pass rate per $/M"),
        tuple(rows),
        "Pass rate divided by the price of a million output tokens: higher is more right "
        "answers for the money.",
        (False, False, True, True, True),
    )


@dataclass(frozen=True, slots=True)
class _Point:
    model: str
    task: str
    size_b: float
    rate: float
    lo: float
    hi: float
    decode_tps: float | None


def quality_chart(inputs: ReportInputs) -> Iterator[Chart[Any] | LeftOut]:
    """Pass rate vs model size per task, beside decode speed vs size: the trade."""
    points: list[_Point] = []
    unsized: set[str] = set()
    speed: dict[str, float | None] = {}
    levels: dict[str, str] = {}
    for _key, summary in inputs.summaries:
        for g in summary.groups:
            # Groups come lightest level first: the speed at each model's lowest load
            # level, the one the size chart shows, so both charts agree and say which.
            if g.model not in speed:
                speed[g.model] = g.decode_tps.p50
                levels[g.model] = g.level
    for _key, table in _routings(inputs):
        for route in table.routes:
            for c in route.candidates:
                if c.quality.n == 0:
                    continue  # no answer of it was checked on this task
                if c.size_b is None:
                    unsized.add(c.model)
                    continue
                lo, hi = c.quality.rate_ci or (c.rate, c.rate)
                points.append(
                    _Point(c.model, route.task, c.size_b, c.rate, lo, hi, speed.get(c.model))
                )
    if unsized:
        yield LeftOut(f"quality vs size: no size for {', '.join(sorted(unsized))}")
    slow = sorted({p.model for p in points if p.decode_tps is None}, key=model_key)
    if slow:
        yield LeftOut(
            "quality vs size: left out of the speed panel (no measurable decode speed: "
            f"fewer than 2 tokens, or the stream was buffered: it came in a few reads): "
            f"{', '.join(slow)}"
        )
    if not points:
        if not unsized:
            return
        yield LeftOut("quality vs size: no checked model has a known size")
        return
    yield Chart(
        "quality_vs_size",
        "Answer quality and speed vs model size",
        "Left: pass rate of checked answers per task, with Wilson 95% intervals, against "
        "active parameters. Right: per-stream decode speed (median) at each model's "
        f"lowest load level{_levels_named(levels, points)}, as in the size chart. The "
        "routing table "
        "names each task's pick: the model that reaches your bar on enough answers and "
        "meets the SLOs.",
        tuple(points),
        _draw,
    )


def _levels_named(levels: dict[str, str], points: list[_Point]) -> str:
    """ " (c=1)": the levels the speed panel's points were taken at."""
    shown = sorted({levels[p.model] for p in points if p.model in levels}, key=natural_key)
    return f" ({', '.join(shown)})" if shown else ""


@house_style
def _draw(points: tuple[_Point, ...]) -> Figure:
    fig, (left, right) = new_figure(10, 4.5, ncols=2)
    tasks = sorted({p.task for p in points})
    for task in tasks:
        mine = sorted((p for p in points if p.task == task), key=lambda p: p.size_b)
        xs = [p.size_b for p in mine]
        ys = [p.rate * 100 for p in mine]
        err = [[(p.rate - p.lo) * 100 for p in mine], [(p.hi - p.rate) * 100 for p in mine]]
        left.errorbar(xs, ys, yerr=err, marker="o", capsize=3, label=task)
    left.set_xscale("log")
    plain_log_axes(left, y=False)
    left.set_ylim(0, 105)
    left.set_xlabel("active parameters (billions, log scale)")
    left.set_ylabel("pass rate (%)")
    left.set_title("Answer quality vs size")
    left.legend(loc="lower right", fontsize="small")
    by_model: dict[str, tuple[float, float]] = {}
    for p in points:
        if p.decode_tps is not None:
            by_model[p.model] = (p.size_b, p.decode_tps)
    if by_model:
        ordered = sorted(by_model.items(), key=lambda kv: kv[1][0])
        right.plot([v[0] for _m, v in ordered], [v[1] for _m, v in ordered], "o-")
        for model, (x, y) in ordered:
            right.annotate(
                model, (x, y), textcoords="offset points", xytext=(4, 4), fontsize="small"
            )
        right.set_xscale("log")
        right.set_yscale("log")
        plain_log_axes(right)
    right.set_xlabel("active parameters (billions, log scale)")
    right.set_ylabel("decode speed, median (tokens/s)")
    right.set_title("Speed vs size")
    return fig
