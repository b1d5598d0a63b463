"""Capacity in the report: the terminal table, the capacity-vs-model-size chart (with
capacity per dollar-hour where costs are known) and the "which tier serves N users at
my SLO cheapest" table, all from summary.json's ``capacity`` and run.json's targets.

Cost per hour of one replica of a target: ``gpu_hourly_usd x gpus`` when both are set,
else its token prices applied to the requests it served at its capacity (the summary
group of the last probe at that level: ``requests/s x 3600 x USD per request``, the
requests' own input and output tokens at their prices); unknown otherwise. Serving N users
(closed loop: N concurrent streams; open loop: N requests/s) takes ``ceil(N /
capacity)`` replicas; the cheapest tier is the one with the lowest replicas x cost.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from matplotlib.axes import Axes
from matplotlib.figure import Figure

from tokrate.report.figures import house_style, new_figure, plain_log_axes
from tokrate.report.labels import Label, label_panels
from tokrate.report.model import Chart, LeftOut, ReportInputs
from tokrate.report.styles import series_colors
from tokrate.report.tables import Table
from tokrate.report.terminal.run_tables import capacity_level
from tokrate.runfolder.capacity_result import CapacityResult, TargetCapacity
from tokrate.runfolder.run_info import RunInfo
from tokrate.runfolder.summary import Summary
from tokrate.textfmt import DASH

if TYPE_CHECKING:
    pass

__all__ = [
    "CapacityRow",
    "capacity_chart",
    "capacity_rows",
    "capacity_table",
    "capacity_charts",
    "capacity_tables",
    "cheapest_table",
    "with_stored",
]

#: The user counts the "which tier" table asks about (cut at 4x the largest capacity).
_USERS: Final = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000)


@dataclass(frozen=True, slots=True)
class CapacityRow:
    """One target's capacity with what the report needs around it."""

    series: str
    target: TargetCapacity
    size_b: float | None
    usd_per_hour: float | None
    cost_source: str | None
    #: "concurrency" or "rate_rps" (the search's level).
    unit: str = "concurrency"
    #: What the capacity means, e.g. "e2e ≤ 500 ms for 90% of requests".
    condition: str = ""

    @property
    def name(self) -> str:
        return self.target.model

    @property
    def per_usd_hour(self) -> float | None:
        c = self.target.capacity
        if c is None or not self.usd_per_hour:
            return None
        return c / self.usd_per_hour


def _usd_per_hour(
    run: RunInfo, summary: Summary, t: TargetCapacity
) -> tuple[float | None, str | None]:
    info = next((x for x in run.targets if x.key == t.key), None)
    if info is not None and info.gpu_hourly_usd is not None and info.gpus:
        return info.gpu_hourly_usd * info.gpus, "GPU-hour"
    at = [p for p in t.probes if p.level == t.capacity and p.verdict == "meets"]
    for probe in reversed(at):
        g = summary.group(t.endpoint, t.model, probe.scenario)
        per_1k = None if g is None or g.cost is None else g.cost.usd_per_1k_requests
        if (
            g is not None
            and g.cost is not None
            and g.cost.source == "price"
            and per_1k is not None
            and g.requests_per_s
        ):
            return g.requests_per_s * 3600 * per_1k / 1000, "tokens"
    return None, None


def capacity_rows(runs: Sequence[tuple[str, RunInfo, Summary]]) -> list[CapacityRow]:
    """Every target of every run that has a capacity search, in run order."""
    out = []
    for key, run, summary in runs:
        if summary.capacity is None:
            continue
        sizes = {x.key: x.size_b for x in run.targets}
        result = summary.capacity
        condition = _condition(result)
        for t in result.targets:
            usd, source = _usd_per_hour(run, summary, t)
            row = CapacityRow(key, t, sizes.get(t.key), usd, source, result.unit, condition)
            out.append(row)
    return out


def _condition(result: CapacityResult) -> str:
    """The SLOs and goodput a capacity is held to, for a chart that travels alone."""
    limits = [
        f"{key.removesuffix('_s').replace('_', ' ')} ≤ {value * 1000:.4g} ms"
        for key, value in result.slo.items()
        if value is not None
    ]
    return f"{', '.join(limits)} for {result.goodput:.0%} of requests"


def capacity_table(rows: Sequence[CapacityRow], multi: bool) -> Table:
    """Capacity per target with its probes summarised and its price."""
    header = (
        "target",
        "size",
        "capacity",
        "verdict",
        "limiting SLO",
        "probes",
        "$ / h",
        "capacity per $/h",
    )
    body = []
    for r in rows:
        t = r.target
        unit = "concurrency" if any(p.scenario.startswith("c=") for p in t.probes) else "rate"
        target = f"{r.series}: {t.label}" if multi else t.label
        body.append(
            (
                target,
                DASH if r.size_b is None else f"{r.size_b:g}B",
                capacity_level(t.capacity, unit),
                t.verdict,
                t.limiting_slo or DASH,
                str(len(t.probes)),
                DASH if r.usd_per_hour is None else f"${r.usd_per_hour:,.2f} ({r.cost_source})",
                DASH if r.per_usd_hour is None else f"{r.per_usd_hour:,.3g}",
            )
        )
    note = (
        "The highest level at which the Wilson interval of the SLO-met fraction lay at or "
        "above the goodput target; every probe is in capacity.json. $ / h: GPU-hour price × "
        "GPUs, else the token prices of the requests served per hour at capacity (their own "
        "input and output tokens)."
    )
    numeric = (False, True, True, False, False, True, True, True)
    return Table("Capacity", header, tuple(body), note=note, numeric=numeric)


def cheapest_table(rows: Sequence[CapacityRow]) -> Table | None:
    """Which tier serves N users at the SLO cheapest (replicas = ceil(N / capacity)); None
    when no tier met every SLO at any load probed (no number of replicas serves anyone at
    the SLO, and the capacity table already says so per tier)."""
    able = [r for r in rows if r.target.capacity]
    if not able:
        return None
    priced = [r for r in able if r.usd_per_hour is not None]
    top = max((r.target.capacity or 0.0 for r in able), default=0.0)
    body = []
    for n in (u for u in _USERS if u <= max(4 * top, 1)):
        pool = priced or able

        def cost(r: CapacityRow, n: int = n) -> float:
            replicas = math.ceil(n / (r.target.capacity or 1.0))
            return replicas * ((r.usd_per_hour or 0.0) if priced else 1.0)

        best = min(pool, key=cost)
        replicas = math.ceil(n / (best.target.capacity or 1.0))
        body.append(
            (
                str(n),
                best.target.label,
                str(replicas),
                DASH if best.usd_per_hour is None else f"${replicas * best.usd_per_hour:,.2f}",
            )
        )
    note = "Users: concurrent streams (closed loop) or requests/s (open loop) at every SLO. " + (
        "Cheapest by replicas × $ / h."
        if priced
        else "No costs known (set gpu_hourly_usd and gpus, or token prices, in [[model]]): "
        "the pick is the tier needing the fewest replicas."
    )
    return Table(
        "Which tier serves N users at the SLO cheapest",
        ("users", "tier", "replicas", "$ / h"),
        tuple(body),
        note=note,
        numeric=(True, False, True, True),
    )


@house_style
def capacity_chart(rows: Sequence[CapacityRow]) -> Figure:
    """Capacity against model size (log-log), and capacity per $/h when any is known."""
    points = [r for r in rows if r.size_b is not None and r.target.capacity]
    priced = [r for r in points if r.per_usd_hour is not None]
    fig, axes = new_figure(9.0 if priced else 5.5, 4.0, ncols=2 if priced else 1)
    colors = series_colors([r.name for r in points])
    per = "streams" if all(r.unit == "concurrency" for r in points) else "requests/s"
    unit = f"concurrent {per}" if per == "streams" else per
    panels: list[tuple[Any, str, Callable[[CapacityRow], float | None]]] = [
        (axes[0], f"capacity ({unit} at the SLO)", lambda r: r.target.capacity)
    ]
    if priced:
        panels.append((axes[1], f"capacity per $/h ({per})", lambda r: r.per_usd_hour))
    conditions = {r.condition for r in points}
    if len(conditions) == 1 and (only := conditions.pop()):
        fig.suptitle(only, fontsize=9)
    labelled: list[tuple[Axes, Sequence[Label], float]] = []
    for ax, label, value in panels:
        names: list[Label] = []
        for r in points:
            v = value(r)
            if v is None or r.size_b is None:
                continue
            lower = r.target.verdict in ("at_max", "client_bound", "budget")
            # Hollow: a capacity that did not meet again in its verification.
            face = "none" if r.target.verdict in ("unverified", "non_monotone") else colors[r.name]
            ax.plot(
                [r.size_b],
                [v],
                ls="none",
                marker="^" if lower else "o",
                markeredgecolor=colors[r.name],
                markerfacecolor=face,
            )
            names.append(Label(r.size_b, v, r.name, colors[r.name]))
        ax.set_xscale("log")
        ax.set_yscale("log")
        # Room around the points for their names.
        for get, set_ in ((ax.get_xlim, ax.set_xlim), (ax.get_ylim, ax.set_ylim)):
            lo, hi = get()
            set_(lo / 1.5, hi * 1.5)
        ax.set_xlabel("active parameters (billions)")
        ax.set_ylabel(label)
        plain_log_axes(ax)
        labelled.append((ax, names, 8.0))
    label_panels(fig, labelled)
    return fig


def with_stored(summary: Summary, stored: Summary | None) -> Summary:
    """A recomputed summary with the stored one's capacity search (records cannot
    recompute a search: capacity.json is its own measurement)."""
    if stored is None or stored.capacity is None:
        return summary
    return dataclasses.replace(summary, capacity=stored.capacity)


def capacity_charts(inputs: ReportInputs) -> Iterator[Chart[Any] | LeftOut]:
    """The capacity chart (capacity vs model size, and per dollar-hour), or a note; no
    entry at all for runs without a capacity search."""
    rows = tuple(_rows_of(inputs))
    if not rows:
        return
    if not any(r.size_b is not None and r.target.capacity for r in rows):
        yield LeftOut(
            "capacity vs model size: no target with a capacity has a known size"
            " (set params_b in [[model]])"
        )
        return
    priced = any(r.per_usd_hour is not None for r in rows)
    yield Chart(
        "capacity_vs_size",
        "Capacity vs model size",
        "The highest load per target at which every SLO held for the goodput fraction of "
        "requests (capacity search; triangles: a lower bound — at max_level, client-bound "
        "or out of budget; hollow: not met again in its verification, or met at twice it too)"
        + (", and that capacity per dollar-hour of serving." if priced else "."),
        rows,
        capacity_chart,
    )


def capacity_tables(inputs: ReportInputs) -> Iterator[Table]:
    """The capacity table and the "which tier serves N users" table, when any run
    searched for capacity."""
    rows = _rows_of(inputs)
    if rows:
        yield capacity_table(rows, inputs.multi)
        cheapest = cheapest_table(rows)
        if cheapest is not None:
            yield cheapest


def _rows_of(inputs: ReportInputs) -> list[CapacityRow]:
    return capacity_rows(
        [(k, r.info, s) for (k, r), (_, s) in zip(inputs.runs, inputs.summaries, strict=True)]
    )
