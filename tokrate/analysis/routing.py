"""The routing table: per task, the model the tier pick chose, with the evidence of
every candidate (docs/quality.md).

The routes are the tier decision's (:func:`tokrate.analysis.tier_pick.decide_tiers`
on the one run, its pass-rate bar included), read from its per-task cells: a task's
route is the pick of that task's cell, so routing.json, the terminal's verdict and the
report's verdict name the same model for every task, or none. A model *meets* when
its pass rate on the task reaches the bar (``[slo] min_pass_rate``, per task
``[slo.min_pass_rate_by_task]``, :data:`DEFAULT_BAR` when neither is set) on at least
``ceil(1 / (1 - bar))`` checked answers (10 for 90%), and at least :data:`ATTAINMENT`
of its requests met every SLO (answered without error, with no SLOs set) on at least
20 requests: the task's own, or at a level with fewer per task, the model's requests
of all tasks together (``latency_pooled``). The pick among the models that meet is
the tier pick's (``rule``): the cheapest by cost per 1,000 of the task's requests,
else the smallest where every size is known, else the highest goodput. A task the decision
cannot settle gets no route and says why (:data:`Why`): too few checked answers (with
the fewest any model had and the number needed), no model reaching the bar, too few
requests, or no model meeting both bars; each candidate says what it missed by how
much.

Pure Python over a :class:`~tokrate.runfolder.summary.Summary` and the run's
:class:`~tokrate.runfolder.run_info.RunInfo` (no polars), so the measuring process can
read it. routing.json is :func:`routing_file` of the table (its format:
:mod:`tokrate.runfolder.routing`): ``routes`` maps each checked task to the model picked
at the heaviest load level measured (the level the verdict judges and a gateway must
plan for) or null, ``unrouted`` says why for each null, ``levels`` holds every level's
evidence.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal

from tokrate.analysis.tier_pick import (
    ATTAINMENT,
    DEFAULT_PASS_BAR,
    PASS_RATE,
    SLOS,
    Cell,
    Judgement,
    TierDecision,
    TierRun,
    decide_tiers,
    min_requests,
)
from tokrate.analysis.tier_pick import Candidate as TierCandidate
from tokrate.runfolder.quality import Quality
from tokrate.runfolder.routing import (
    ROUTING_LAYOUT,
    BarJudgement,
    CandidateEvidence,
    LevelEvidence,
    ModelRef,
    PassBar,
    RouteEvidence,
    RoutingFile,
    Unrouted,
)
from tokrate.runfolder.run_info import RunInfo
from tokrate.runfolder.summary import Cost, Summary, TaskGroup
from tokrate.textfmt import fmt_ms, fmt_pct_interval

__all__ = [
    "DEFAULT_BAR",
    "Candidate",
    "LevelRoutes",
    "Route",
    "RoutingTable",
    "Why",
    "routing_file",
    "routing_from_decision",
    "routing_table",
]

#: The pass rate a task must reach when the config sets no bar.
DEFAULT_BAR: Final = DEFAULT_PASS_BAR

#: Why a task has no route: every model had too few checked answers to judge the bar;
#: every model's pass rate is below it; every model had too few requests to judge;
#: or each model missed the pass-rate bar or the SLOs (some one, some the other).
Why = Literal["too_few_answers", "below_bar", "too_few_requests", "no_model_meets"]


def _pct(value: float) -> str:
    return f"{value * 100:.0f}%"


def _ci(j: Judgement) -> str:
    if j.interval is None:
        return "no interval"
    lo, hi = j.interval
    return f"95% CI {fmt_pct_interval(lo, hi)}"


@dataclass(frozen=True, slots=True)
class Candidate:
    """One model on one task at one level, as the tier decision judged it.

    ``pass_rate`` is its judgement against the task's bar (None: no answer of this
    model on this task was checked), ``slo`` its judgement against the SLOs (the
    level's requests of all tasks where ``slo.pooled``). ``quality`` is the task's
    summary ``quality`` (its mean score and check errors beside n and passed)."""

    endpoint: str
    model: str
    size_b: float | None
    #: What the task's requests cost (None: no price).
    cost: Cost | None
    verdict: str
    quality: Quality
    pass_rate: Judgement | None
    slo: Judgement | None
    failed: int
    bar: float
    #: Whether the run set any SLO (without, the SLO bar is "answered without error").
    slo_set: bool = True
    size_source: str | None = None
    goodput_rps: float | None = None
    decode_tps: float | None = None

    @property
    def usd_per_1k_requests(self) -> float | None:
        return None if self.cost is None else self.cost.usd_per_1k_requests

    @property
    def rate(self) -> float:
        return self.quality.rate or 0.0

    @property
    def meets(self) -> bool:
        return self.verdict == "meets"

    @property
    def confident(self) -> bool:
        """Whether the interval's lower end clears the bar too (else more prompts
        would be needed to be sure of it)."""
        ci = self.quality.rate_ci
        return ci is not None and ci[0] >= self.bar

    def misses(self) -> list[str]:
        """What keeps it from being picked, with numbers ([] when it meets)."""
        out = []
        j = self.pass_rate
        if j is None:
            out.append("no checked answers")
        elif j.verdict == "misses":
            gap = (j.target - self.rate) * 100
            out.append(f"pass rate {self.rate:.1%} < {j.target:.0%} (by {gap:.1f} points)")
        elif j.verdict == "undecided":
            out.append(f"pass rate undecided ({j.reason})")
        s = self.slo
        if s is not None and s.verdict in ("misses", "undecided"):
            pooled = ", requests of all tasks" if s.pooled else ""
            if s.verdict == "undecided":
                out.append(f"{s.bar} undecided ({s.reason}{pooled})")
            else:
                fraction = s.fraction or 0.0
                over = ", ".join(
                    f"{f.what} {fmt_ms(f.value)} > {fmt_ms(f.limit)}" for f in s.shortfalls
                )
                what = f"{s.bar} met" if self.slo_set else "answered"
                out.append(
                    f"{what} {s.met}/{s.n} ({fraction:.0%}{pooled}) < {s.target:.0%}"
                    + (f": {over}" if over else "")
                )
        if self.failed and s is not None and s.verdict == "misses" and not s.shortfalls:
            out.append(f"{self.failed} failed")
        return out


@dataclass(frozen=True, slots=True)
class Route:
    """One task at one level: its candidates (smallest first) and the decision's pick
    (None: ``why`` and ``reason`` say why)."""

    task: str
    bar: float
    candidates: tuple[Candidate, ...]
    pick: Candidate | None
    rule: str
    latency_pooled: bool

    @property
    def needed(self) -> int:
        """The fewest checked answers on which the bar can be decided."""
        return min_requests(self.bar)

    @property
    def smallest(self) -> Candidate | None:
        """The smallest model that meets, only where every candidate's size is known
        (None otherwise: no model is "smaller" than one of unknown size)."""
        if not self.candidates or any(c.size_b is None for c in self.candidates):
            return None
        meeting = [c for c in self.candidates if c.meets]
        return min(meeting, key=lambda c: c.size_b or 0.0) if meeting else None

    @property
    def cheapest(self) -> Candidate | None:
        """The model that meets with the lowest cost per 1,000 of the task's requests
        (None: none that meets has a price)."""
        priced = [c for c in self.candidates if c.meets and c.usd_per_1k_requests is not None]
        return min(priced, key=lambda c: c.usd_per_1k_requests or 0.0) if priced else None

    @property
    def fewest_answers(self) -> int:
        """The fewest checked answers any candidate had on this task."""
        return min((c.quality.n for c in self.candidates), default=0)

    @property
    def why(self) -> Why | None:
        """Why the task has no route (None: it has one)."""
        if self.pick is not None:
            return None
        rates = [c.pass_rate for c in self.candidates]
        if rates and all(j is not None and j.verdict == "undecided" for j in rates):
            return "too_few_answers"
        if all(c.verdict == "undecided" for c in self.candidates):
            return "too_few_requests"
        if rates and all(j is not None and j.verdict == "misses" for j in rates):
            return "below_bar"
        return "no_model_meets"

    @property
    def reason(self) -> str | None:
        """The why in words, with numbers (None: the task has a route)."""
        why = self.why
        if why is None:
            return None
        if why == "too_few_answers":
            return (
                f"too few checked answers to decide: as few as {self.fewest_answers} per "
                f"model, and a {self.bar:.0%} pass-rate bar needs at least {self.needed}"
            )
        if why == "below_bar":
            best = max(self.candidates, key=lambda c: (c.rate, -self.candidates.index(c)))
            j = best.pass_rate
            ci = "" if j is None else f" ({_ci(j)})"
            return (
                f"no model reaches the {self.bar:.0%} pass-rate bar: the best, "
                f"{best.model}, passes {best.quality.passed}/{best.quality.n} = "
                f"{_pct(best.rate)}{ci}"
            )
        misses = "; ".join(f"{c.model}: {', '.join(c.misses())}" for c in self.candidates)
        if why == "too_few_requests":
            return f"too few requests to decide: {misses}"
        return f"no model meets both the pass-rate bar and the SLOs: {misses}"


@dataclass(frozen=True, slots=True)
class LevelRoutes:
    level: str
    load: float | None
    routes: tuple[Route, ...]


@dataclass(frozen=True, slots=True)
class RoutingTable:
    """Every level's routes, lightest first; ``routes`` are the heaviest level's."""

    run_id: str | None
    bar: float
    bar_by_task: tuple[tuple[str, float], ...]
    bar_source: str
    slo_set: bool
    levels: tuple[LevelRoutes, ...]

    @property
    def level(self) -> str | None:
        return self.levels[-1].level if self.levels else None

    @property
    def routes(self) -> tuple[Route, ...]:
        return self.levels[-1].routes if self.levels else ()


def _candidate(
    c: TierCandidate, task: TaskGroup | None, bar: float, size: float | None, slo_set: bool
) -> Candidate:
    quality = task.quality if task is not None and task.quality is not None else Quality(0, 0)
    return Candidate(
        endpoint=c.endpoint,
        model=c.model,
        size_b=size,
        cost=c.cost,
        verdict=c.verdict,
        quality=quality,
        pass_rate=c.pass_rate,
        slo=c.judgement(SLOS),
        failed=c.failed,
        bar=bar,
        slo_set=slo_set,
        size_source=c.size_source,
        goodput_rps=c.goodput_rps,
        decode_tps=c.decode_tps,
    )


def _route(cell: Cell, summary: Summary, info: RunInfo) -> Route | None:
    """The route of a one-task cell whose answers were checked (else None)."""
    if len(cell.tasks) != 1 or not any(c.pass_rate is not None for c in cell.candidates):
        return None
    (task,) = cell.tasks
    bar = info.slo.pass_bar(task)
    bar = DEFAULT_BAR if bar is None else bar
    parts = {
        (g.endpoint, g.model): t
        for g in summary.groups
        if g.level == cell.level
        for t in g.by_task
        if t.task == task
    }
    sizes = {t.key: t.size_b for t in info.targets}
    candidates = tuple(
        _candidate(
            c,
            parts.get((c.endpoint, c.model)),
            bar,
            sizes.get((c.endpoint, c.model)),
            info.slo.any_set,
        )
        for c in cell.candidates
    )
    pick = None
    if cell.pick is not None:
        pick = next(
            c for c in candidates if (c.endpoint, c.model) == (cell.pick.endpoint, cell.pick.model)
        )
    pooled = any(c.slo is not None and c.slo.pooled for c in candidates)
    return Route(task, bar, candidates, pick, cell.rule, pooled)


def routing_from_decision(
    decision: TierDecision, summary: Summary, info: RunInfo
) -> RoutingTable | None:
    """The routing table of ``decision`` over the one run of ``summary`` and ``info``,
    or None when no answer was checked."""
    levels: dict[str, LevelRoutes] = {}
    for cell in decision.task_cells:
        route = _route(cell, summary, info)
        if route is None:
            continue
        lv = levels.setdefault(cell.level, LevelRoutes(cell.level, cell.load, ()))
        levels[cell.level] = LevelRoutes(lv.level, lv.load, (*lv.routes, route))
    if not levels:
        return None
    slo = info.slo
    by_task = tuple(slo.min_pass_rate_by_task)
    if slo.min_pass_rate is not None:
        bar, source = slo.min_pass_rate, "config"
    else:
        bar, source = DEFAULT_BAR, "default" if not by_task else "config (per task)"
    # The decision's levels are in load order already; a level's tasks in its order.
    ordered = tuple(levels[lv] for lv in decision.levels if lv in levels)
    return RoutingTable(summary.run_id, bar, by_task, source, slo.any_set, ordered)


def routing_table(summary: Summary, info: RunInfo) -> RoutingTable | None:
    """The routing table of a run (the tier decision over it alone), or None when no
    answer was checked."""
    decision = decide_tiers([TierRun(summary.run_id or "run", summary, info)])
    if PASS_RATE not in decision.bars:
        return None
    return routing_from_decision(decision, summary, info)


def _judged(j: Judgement | None) -> BarJudgement | None:
    if j is None:
        return None
    return BarJudgement(
        j.verdict,
        j.met,
        j.n,
        j.target,
        min_requests(j.target),
        j.interval,
        j.pooled,
        j.reason or None,
    )


def _ref(c: Candidate | None) -> ModelRef | None:
    return None if c is None else ModelRef(c.endpoint, c.model)


def _evidence(c: Candidate) -> CandidateEvidence:
    return CandidateEvidence(
        endpoint=c.endpoint,
        model=c.model,
        size_b=c.size_b,
        size_source=c.size_source,
        cost=c.cost,
        goodput_rps=c.goodput_rps,
        decode_tps_p50=c.decode_tps,
        verdict=c.verdict,
        quality=c.quality,
        confident=c.confident,
        pass_rate=_judged(c.pass_rate),
        slo=_judged(c.slo),
        misses=tuple(c.misses()),
    )


def _route_evidence(r: Route) -> RouteEvidence:
    return RouteEvidence(
        task=r.task,
        bar=r.bar,
        answers_needed=r.needed,
        route=_ref(r.pick),
        rule=r.rule,
        why=r.why,
        reason=r.reason,
        smallest=_ref(r.smallest),
        cheapest=_ref(r.cheapest),
        latency_pooled=r.latency_pooled,
        candidates=tuple(_evidence(c) for c in r.candidates),
    )


def _unrouted(r: Route) -> Unrouted:
    assert r.why is not None and r.reason is not None
    if r.why == "too_few_answers":
        return Unrouted(r.why, r.reason, r.fewest_answers, r.needed)
    return Unrouted(r.why, r.reason)


def routing_file(table: RoutingTable) -> RoutingFile:
    """routing.json's document of ``table`` (tokrate.runfolder.routing)."""
    return RoutingFile(
        layout=ROUTING_LAYOUT,
        run_id=table.run_id,
        bar=PassBar(table.bar, table.bar_by_task, table.bar_source),
        slo_attainment=ATTAINMENT,
        slo_set=table.slo_set,
        level=table.level,
        routes=tuple((r.task, _ref(r.pick)) for r in table.routes),
        unrouted=tuple((r.task, _unrouted(r)) for r in table.routes if r.pick is None),
        levels=tuple(
            LevelEvidence(lv.level, lv.load, tuple(_route_evidence(r) for r in lv.routes))
            for lv in table.levels
        ),
    )
