"""The routing table: per task, the smallest model that clears the quality bar and the
latency SLOs (docs/quality.md).

Pure Python over a :class:`~tokrate.runfolder.summary.Summary` and the run's
:class:`~tokrate.runfolder.run_info.RunInfo` (no polars), so the measuring process can
read and print it. For every task with checked answers and every load level, each
target is a candidate with its pass rate (Wilson 95% interval), its SLO-met fraction,
size and cost. A candidate *clears* when its pass rate is at least the bar (``[slo]
min_pass_rate``, per task ``[slo.min_pass_rate_by_task]``; :data:`DEFAULT_BAR` when
neither is set) and, with SLOs set, at least :data:`ATTAINMENT` of its requests met
every SLO. The route is the smallest clearing target (active parameters; unknown sizes
last, then cost, then name); the cheapest clearing target is named beside it. Where
none clears, every candidate says by how much it misses. ``confident`` says whether the
interval's lower end clears the bar too (else more prompts would be needed to be sure).

The sentence a reader quotes is the tier pick's (analysis.tier_pick holds each pick to
the same pass-rate bar; report.tier_text says it): this module keeps the data, so
the two never disagree in words.

routing.json (layout 1) is :meth:`RoutingTable.to_dict`: ``routes`` maps each task to
``{"endpoint", "model"}`` (null: no model clears) at the highest load level measured,
the level a gateway must plan for; ``levels`` holds every level's full evidence.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Final

from tokrate.runfolder.quality import Quality
from tokrate.runfolder.run_info import RunInfo
from tokrate.runfolder.summary import Group, Summary

__all__ = [
    "ATTAINMENT",
    "DEFAULT_BAR",
    "ROUTING_LAYOUT",
    "Candidate",
    "LevelRoutes",
    "Route",
    "RoutingTable",
    "routing_table",
]

ROUTING_LAYOUT: Final = 1
#: The pass rate a task must reach when the config sets no bar.
DEFAULT_BAR: Final = 0.9
#: Share of requests that must meet every SLO (the report's tier pick uses the same).
ATTAINMENT: Final = 0.95


@dataclass(frozen=True, slots=True)
class Candidate:
    """One target on one task at one load level."""

    endpoint: str
    model: str
    size_b: float | None
    quality: Quality
    slo_met_fraction: float | None
    usd_per_m_output: float | None
    bar: float

    @property
    def rate(self) -> float:
        return self.quality.rate or 0.0

    @property
    def meets_quality(self) -> bool:
        return self.quality.n > 0 and self.rate >= self.bar

    @property
    def meets_slo(self) -> bool:
        return self.slo_met_fraction is None or self.slo_met_fraction >= ATTAINMENT

    @property
    def clears(self) -> bool:
        return self.meets_quality and self.meets_slo

    @property
    def confident(self) -> bool:
        ci = self.quality.rate_ci
        return ci is not None and ci[0] >= self.bar

    def misses(self) -> list[str]:
        """What keeps it from clearing, in words with numbers ([] when it clears)."""
        out = []
        if not self.meets_quality:
            gap = (self.bar - self.rate) * 100
            out.append(f"pass rate {self.rate:.1%} < {self.bar:.0%} (by {gap:.1f} points)")
        if not self.meets_slo and self.slo_met_fraction is not None:
            out.append(f"SLO met {self.slo_met_fraction:.0%} < {ATTAINMENT:.0%}")
        return out

    def to_dict(self) -> dict[str, Any]:
        return {
            "endpoint": self.endpoint,
            "model": self.model,
            "size_b": self.size_b,
            **self.quality.to_dict(),
            "slo_met_fraction": self.slo_met_fraction,
            "usd_per_m_output": self.usd_per_m_output,
            "clears": self.clears,
            "confident": self.confident,
            "misses": self.misses(),
        }


def _order(c: Candidate) -> tuple[float, float, str, str]:
    size = c.size_b if c.size_b is not None else math.inf
    cost = c.usd_per_m_output if c.usd_per_m_output is not None else math.inf
    return (size, cost, c.model, c.endpoint)


@dataclass(frozen=True, slots=True)
class Route:
    """One task at one level: the candidates (smallest first) and the pick."""

    task: str
    bar: float
    candidates: tuple[Candidate, ...]

    @property
    def smallest(self) -> Candidate | None:
        return next((c for c in self.candidates if c.clears), None)

    @property
    def cheapest(self) -> Candidate | None:
        priced = [c for c in self.candidates if c.clears and c.usd_per_m_output is not None]
        return min(priced, key=lambda c: (c.usd_per_m_output, _order(c))) if priced else None

    def to_dict(self) -> dict[str, Any]:
        def name(c: Candidate | None) -> dict[str, str] | None:
            return None if c is None else {"endpoint": c.endpoint, "model": c.model}

        return {
            "task": self.task,
            "bar": self.bar,
            "smallest": name(self.smallest),
            "cheapest": name(self.cheapest),
            "candidates": [c.to_dict() for c in self.candidates],
        }


@dataclass(frozen=True, slots=True)
class LevelRoutes:
    scenario: str
    level: str
    load: float | None
    routes: tuple[Route, ...]


@dataclass(frozen=True, slots=True)
class RoutingTable:
    """Every level's routes; ``routes`` are the highest level's (module docstring)."""

    run_id: str | None
    bar: float
    bar_by_task: tuple[tuple[str, float], ...]
    bar_source: str
    slo_set: bool
    levels: tuple[LevelRoutes, ...]

    @property
    def routes(self) -> tuple[Route, ...]:
        return self.levels[-1].routes if self.levels else ()

    def to_dict(self) -> dict[str, Any]:
        top = self.levels[-1] if self.levels else None
        return {
            "layout": ROUTING_LAYOUT,
            "run_id": self.run_id,
            "bar": {
                "default": self.bar,
                "by_task": dict(self.bar_by_task),
                "source": self.bar_source,
            },
            "slo_attainment": ATTAINMENT if self.slo_set else None,
            "level": None if top is None else top.level,
            "routes": {
                r.task: None
                if r.smallest is None
                else {"endpoint": r.smallest.endpoint, "model": r.smallest.model}
                for r in self.routes
            },
            "levels": [
                {
                    "scenario": lv.scenario,
                    "level": lv.level,
                    "tasks": [r.to_dict() for r in lv.routes],
                }
                for lv in self.levels
            ],
        }


def _candidates(groups: Iterable[Group], info: RunInfo, bar_of: Any) -> dict[str, list[Candidate]]:
    by_task: dict[str, list[Candidate]] = {}
    for g in groups:
        target = info.target(g.endpoint, g.model)
        size = None if target is None else target.active_params_b
        cost = None if g.cost is None else g.cost.usd_per_m_output
        for t in g.by_task:
            if t.quality is None or t.quality.n == 0:
                continue
            by_task.setdefault(t.task, []).append(
                Candidate(
                    g.endpoint, g.model, size, t.quality, t.slo_met_fraction, cost, bar_of(t.task)
                )
            )
    return by_task


def routing_table(summary: Summary, info: RunInfo) -> RoutingTable | None:
    """The routing table of a run, or None when no answer was checked."""
    slo = info.slo
    by_task = tuple(slo.min_pass_rate_by_task)
    if slo.min_pass_rate is not None:
        bar, source = slo.min_pass_rate, "config"
    else:
        bar, source = DEFAULT_BAR, "default" if not by_task else "config (per task)"

    def bar_of(task: str) -> float:
        return dict(by_task).get(task, bar)

    scenarios: dict[str, list[Group]] = {}
    for g in summary.groups:
        scenarios.setdefault(g.scenario, []).append(g)
    levels = []
    for name, groups in scenarios.items():
        found = _candidates(groups, info, bar_of)
        if not found:
            continue
        routes = tuple(
            Route(task, bar_of(task), tuple(sorted(cands, key=_order)))
            for task, cands in sorted(found.items())
        )
        first = groups[0]
        levels.append(LevelRoutes(name, first.level, first.load_value, routes))
    if not levels:
        return None
    levels.sort(key=lambda lv: lv.load if lv.load is not None else -math.inf)
    return RoutingTable(summary.run_id, bar, by_task, source, slo.any_set, tuple(levels))
