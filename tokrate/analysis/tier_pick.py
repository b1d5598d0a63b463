"""The tier pick: for each task and load level, which model to choose, and the
evidence behind every answer.

A model *meets a bar* when at least ``attainment`` (95%) of its requests met it —
the bar of the SLOs being "every SLO set held for the request" (failed requests count
as misses). The fraction is shown with its n and a Wilson 95% interval. A fraction of
n requests moves in steps of 1/n, so below ``ceil(1 / (1 - attainment))`` requests
(20 for 95%) a single request decides the answer: such a cell is *undecided* for that
model, and a level where any task has that few requests is judged on all its tasks
pooled (the level's whole group, said so).

Among the models that meet every bar the pick is (``Cell.rule``):

- "cheapest": the one with the lowest cost per 1,000 requests *on the requests the run
  sent* (summary ``cost``, tokrate.analysis.cost: token prices on the run's own token
  mix, or GPU-hours at the measured throughput), among those with a cost; models
  that meet without one are named, never ranked as free or dear;
- else "smallest": the fewest active parameters, only where every model compared has
  a known size (config, server, simulator, or inferred from its name and said so);
- else "goodput": the highest goodput at the level (requests/s that met every SLO;
  with no SLO set, answered requests/s), and where two are within
  :data:`GOODPUT_TIE` of each other, the faster decode per stream (median).

A model's name never decides: ties fall to measured figures. Cells of one level with
the same ranking collapse into one row, their requests summed and their costs pooled
(tokrate.analysis.cost_pool), but never cells of checked tasks: each checked task is
judged against its own pass-rate bar, in a sentence of its own.

Bars are pluggable (:class:`Bar`): :class:`SloBar` always, and :class:`PassRateBar`
(answers judged right, docs/quality.md) wherever a run checked answers: a pick must
meet both. routing.json is written from this decision's per-task cells
(``task_cells``; analysis.routing), so the two never name two different answers.
The pass rate is judged per task at the cell's level against ``[slo] min_pass_rate``
(per task ``[slo.min_pass_rate_by_task]``, else :data:`DEFAULT_PASS_BAR`), by the same
rule as the SLOs (met fraction >= bar on at least ``min_requests(bar)`` answers, 10
for 90%). Where a level's SLOs are pooled across tasks, its checked tasks still get
their own cells: the SLO judgement pooled (marked ``pooled``, never summed again), the
pass rate that task's own. A task without checked answers has a pass-rate judgement
"unjudged", which decides nothing (today's pick stands there). Pure Python over
summaries and run.json (no polars, no numpy), so the measuring process can decide and
print the verdict itself.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Final, Literal, Protocol

from tokrate.analysis.cost_pool import pool_costs
from tokrate.analysis.ordering import level_key, model_key
from tokrate.runfolder.proportions import wilson_interval
from tokrate.runfolder.run_info import RunInfo, SloInfo
from tokrate.runfolder.summary import Cost, Distribution, Group, SloCounts, Summary, TaskGroup
from tokrate.spec.metric_table import metric_label

__all__ = [
    "ATTAINMENT",
    "GOODPUT_TIE",
    "Bar",
    "Candidate",
    "Cell",
    "Evidence",
    "Judgement",
    "PASS_RATE",
    "SLOS",
    "PassRateBar",
    "Rule",
    "Shortfall",
    "SloBar",
    "TierDecision",
    "TierRun",
    "decide_tiers",
    "judge_fraction",
    "min_requests",
    "pass_bar",
    "rank_key",
]

#: The share of requests that must meet a bar for a model to meet it.
ATTAINMENT: Final = 0.95
#: Confidence of the interval shown with every met fraction.
CONFIDENCE: Final = 0.95
#: The pass rate a task must reach when the config sets none (the routing table's).
DEFAULT_PASS_BAR: Final = 0.9
#: The pass-rate bar's name (a column of the evidence table, a part of the verdict).
PASS_RATE: Final = metric_label("pass_rate")
#: The SLO bar's name.
SLOS: Final = "SLOs"

#: Goodputs this close (relative) are a tie: one window's goodput moves by more than
#: that between runs, so the faster decode per stream decides instead.
GOODPUT_TIE: Final = 0.05

#: How a cell's pick was chosen among the models that meet (module doc).
Rule = Literal["cheapest", "smallest", "goodput", "none"]

#: "unjudged": the bar does not apply to these requests (a task without checked
#: answers); it decides nothing either way.
Verdict = Literal["meets", "misses", "undecided", "unjudged"]


def min_requests(attainment: float) -> int:
    """The fewest requests on which a bar of ``attainment`` can be decided: below it
    one request is more than the share allowed to miss (20 for 95%, 10 for 90%). A bar
    of 100% is decided by any number (one miss fails it)."""
    if attainment >= 1.0:
        return 1
    return math.ceil(round(1.0 / (1.0 - attainment), 9))


def pass_bar(slo: SloInfo, task: str) -> tuple[float, bool]:
    """The pass rate ``task`` must reach, and whether the config set it (False: the
    default :data:`DEFAULT_PASS_BAR`)."""
    bar = slo.pass_bar(task)
    return (DEFAULT_PASS_BAR, False) if bar is None else (bar, True)


@dataclass(frozen=True, slots=True)
class Shortfall:
    """A limit a model's requests overran: ``what`` (e.g. "TTFT p95") measured
    ``value`` against ``limit`` (seconds)."""

    what: str
    value: float
    limit: float

    @property
    def ratio(self) -> float:
        """How many times the limit the value is (1.64: 64% over)."""
        return self.value / self.limit if self.limit > 0 else math.inf


@dataclass(frozen=True, slots=True)
class Judgement:
    """One bar applied to one candidate's requests: ``met`` of ``n`` requests met it.

    ``interval`` is the Wilson 95% interval of met / n (None when n is 0). ``verdict``
    is "meets" (met / n >= target on at least ``min_requests(target)`` requests),
    "misses", or "undecided" (too few requests; ``reason`` says how few).
    ``shortfalls`` say by how much a missed bar's limits were overrun, where the
    summary can tell (a p95 over its limit). ``pooled``: judged on all tasks of the
    level together although the cell is one task's (its counts are the level's, so
    merging cells keeps them instead of summing).
    """

    bar: str
    met: int
    n: int
    target: float
    verdict: Verdict
    interval: tuple[float, float] | None = None
    shortfalls: tuple[Shortfall, ...] = ()
    reason: str = ""
    pooled: bool = False
    #: SLOs only: requests too short for a limit set to judge (a one-token answer
    #: against a TPOT limit), left out of ``n``; and judged requests whose TPOT came
    #: from 2-4 output tokens (summary ``slo``).
    unjudged: int = 0
    short: int = 0

    @property
    def fraction(self) -> float | None:
        return self.met / self.n if self.n else None


@dataclass(frozen=True, slots=True)
class Evidence:
    """What a bar judges: one summary group of a run (a target at a level) and, when
    the cell is one task, that task's part of it (None: all its tasks, pooled).
    ``latency_pooled``: the cell is one task's, but its latency is judged on the whole
    group (too few requests per task; the task's answers are still its own)."""

    run: RunInfo
    group: Group
    task: TaskGroup | None = None
    latency_pooled: bool = False

    @property
    def latency_part(self) -> Group | TaskGroup:
        """The requests the SLOs are judged on."""
        return self.group if self.task is None or self.latency_pooled else self.task

    @property
    def counts_n(self) -> int:
        """Requests judged: ok + failed (cancelled ones were never answered)."""
        counts = self.latency_part.counts
        return counts.ok + counts.error

    @property
    def slo_counts(self) -> SloCounts | None:
        """How the SLOs judged the latency part (None: no SLO set, or an old summary)."""
        return self.latency_part.slo

    @property
    def ok(self) -> int:
        return self.latency_part.counts.ok

    @property
    def failed(self) -> int:
        return self.latency_part.counts.error


class Bar(Protocol):
    """A criterion a model must meet on at least ``attainment`` of its requests."""

    @property
    def name(self) -> str: ...

    @property
    def attainment(self) -> float: ...

    def judge(self, evidence: Evidence) -> Judgement: ...


@dataclass(frozen=True, slots=True)
class SloBar:
    """The SLOs of the run: a request meets them when it is ok and every limit set
    holds (summary.json ``slo_met_fraction``). Without SLOs every request that was
    answered passes."""

    attainment: float = ATTAINMENT
    name: str = SLOS

    def judge(self, evidence: Evidence) -> Judgement:
        part = evidence.latency_part
        counts = evidence.slo_counts
        unjudged = short = 0
        if counts is not None:
            # Too-short requests neither meet nor miss: out of n (docs/definitions.md).
            met, n = counts.met, counts.judged
            unjudged, short = counts.unjudged, counts.short_answers
        else:
            n = evidence.counts_n
            fraction = part.slo_met_fraction
            met = evidence.ok if fraction is None else round(fraction * n)
        judgement = judge_fraction(
            self.name,
            met,
            n,
            self.attainment,
            shortfalls=lambda: _slo_shortfalls(evidence),
        )
        if judgement.verdict == "undecided" and unjudged:
            judgement = replace(
                judgement,
                reason=f"{judgement.reason}; {unjudged} more too short to judge",
            )
        return replace(judgement, pooled=evidence.latency_pooled, unjudged=unjudged, short=short)


@dataclass(frozen=True, slots=True)
class PassRateBar:
    """Answer quality: a task's checked answers (summary ``quality``) must pass at
    the task's bar (:func:`pass_bar`). ``attainment`` is the default bar; it never
    sets how requests are pooled (the SLOs' does)."""

    attainment: float = DEFAULT_PASS_BAR
    name: str = PASS_RATE

    def judge(self, evidence: Evidence) -> Judgement:
        task = evidence.task
        if task is None:
            # A cell of several tasks pooled: only built where no task was checked.
            return Judgement(self.name, 0, 0, self.attainment, "unjudged", reason="pooled")
        bar, _ = pass_bar(evidence.run.slo, task.task)
        quality = task.quality
        if quality is None or quality.n == 0:
            return Judgement(self.name, 0, 0, bar, "unjudged", reason="no checked answers")
        judgement = judge_fraction(self.name, quality.passed, quality.n, bar)
        if judgement.verdict == "undecided":
            needed = min_requests(bar)
            reason = f"{quality.n} checked answers: a {bar:.0%} bar needs at least {needed}"
            judgement = replace(judgement, reason=reason)
        return judgement


def checked(runs: Sequence[TierRun]) -> bool:
    """Whether any run checked answers (then the pick must clear the pass-rate bar)."""
    return any(
        t.quality is not None and t.quality.n > 0
        for r in runs
        for g in r.summary.groups
        for t in g.by_task
    )


def judge_fraction(
    bar: str,
    met: int,
    n: int,
    target: float,
    *,
    shortfalls: Callable[[], Iterable[Shortfall]] | None = None,
) -> Judgement:
    """The judgement of ``met`` of ``n`` requests against ``target`` (any bar's rule)."""
    if n == 0:
        return Judgement(bar, 0, 0, target, "undecided", reason="no requests")
    interval = wilson_interval(met, n, CONFIDENCE)
    needed = min_requests(target)
    if n < needed:
        reason = f"{n} requests: a {target:.0%} bar needs at least {needed}"
        return Judgement(bar, met, n, target, "undecided", interval, reason=reason)
    if met / n >= target - 1e-12:
        return Judgement(bar, met, n, target, "meets", interval)
    over = shortfalls() if shortfalls is not None else ()
    return Judgement(bar, met, n, target, "misses", interval, tuple(over))


#: The SLO limits and the statistic that says by how much each was overrun: above
#: the p95, more than 5% of requests missed that limit alone.
_SLO_STATS: Final = tuple(
    (column, f"{metric_label(column)} p95", column, "p95")
    for column in ("ttft_s", "tpot_s", "e2e_s")
)


def _slo_shortfalls(evidence: Evidence) -> list[Shortfall]:
    slo = evidence.run.slo
    part = evidence.latency_part
    out: list[Shortfall] = []
    for limit_key, what, metric, stat in _SLO_STATS:
        limit = getattr(slo, limit_key)
        dist: Distribution = getattr(part, metric)
        value = getattr(dist, stat)
        if limit is not None and value is not None and value > limit:
            out.append(Shortfall(what, value, limit))
    # The ITL limit is on each request's own p99; the summary keeps the p99 over all
    # gaps of the group, the closest figure it has (said so in the name).
    itl = evidence.group.itl_s.p99
    if slo.itl_p99_s is not None and itl is not None and itl > slo.itl_p99_s:
        out.append(Shortfall("ITL p99 (all gaps)", itl, slo.itl_p99_s))
    return out


@dataclass(frozen=True, slots=True)
class Candidate:
    """One model (target) judged in one cell, with the measured figures a pick is
    ranked by: its ``cost`` (the cell's task's, else the level's; None: unpriced),
    ``goodput_rps`` at the level (None: not known), ``requests_per_s`` and its median
    ``decode_tps`` per stream (the cell's task's where judged per task)."""

    run_key: str
    endpoint: str
    model: str
    #: How tables name it: the model, with its endpoint or run where that is ambiguous.
    label: str
    size_b: float | None
    #: Where ``size_b`` came from (run.json ``size_source``: config, server, name,
    #: simulator; None: unknown). "name" is an inference, said so wherever it ranks.
    size_source: str | None
    cost: Cost | None
    failed: int
    judgements: tuple[Judgement, ...]
    goodput_rps: float | None = None
    requests_per_s: float | None = None
    decode_tps: float | None = None

    @property
    def verdict(self) -> Verdict:
        """ "misses" when any bar is missed, else "undecided" when any bar could not be
        decided, else "meets"."""
        verdicts = {j.verdict for j in self.judgements}
        if "misses" in verdicts:
            return "misses"
        return "undecided" if "undecided" in verdicts else "meets"

    @property
    def usd_per_1k(self) -> float | None:
        """USD per 1,000 of its requests (None: no price, or no priced request)."""
        return None if self.cost is None else self.cost.usd_per_1k_requests

    @property
    def priced(self) -> bool:
        return self.usd_per_1k is not None

    @property
    def cost_source(self) -> str | None:
        return None if self.cost is None else self.cost.source

    @property
    def throughput(self) -> float | None:
        """What the "goodput" rule ranks: goodput where SLOs are set, else the
        requests/s answered (every answered request passes without SLOs)."""
        return self.goodput_rps if self.goodput_rps is not None else self.requests_per_s

    def judgement(self, bar: str) -> Judgement | None:
        return next((j for j in self.judgements if j.bar == bar), None)

    @property
    def pass_rate(self) -> Judgement | None:
        """Its pass-rate judgement where its answers were checked, else None."""
        j = self.judgement(PASS_RATE)
        return None if j is None or j.verdict == "unjudged" else j


@dataclass(frozen=True, slots=True)
class Cell:
    """The answer for some tasks at one load level.

    ``pooled`` says the level was judged on all its tasks together because some
    model had fewer than ``min_requests`` requests of some task (``fewest``: the
    fewest any had; with checked answers, a pooled level keeps one cell per answer,
    its SLO judgements pooled and its pass rates per task); a cell of several
    tasks that is not pooled is several per-task cells with the same answer,
    their requests summed. ``ranked`` are the models that meet in the order of the
    module's rule (``rule``), ``pick`` the first of them and ``runner_up`` the next
    (for "Nx cheaper than"), None when there is none. ``goodput_tie``: under the
    "goodput" rule, the runner-up's goodput was within :data:`GOODPUT_TIE` of the
    pick's, so decode speed decided.
    """

    level: str
    load: float | None
    tasks: tuple[str, ...]
    candidates: tuple[Candidate, ...]
    pooled: bool = False
    fewest: int | None = None
    pick: Candidate | None = None
    rule: Rule = "none"
    runner_up: Candidate | None = None
    ranked: tuple[Candidate, ...] = ()
    goodput_tie: bool = False

    @property
    def meeting(self) -> tuple[Candidate, ...]:
        return tuple(c for c in self.candidates if c.verdict == "meets")

    @property
    def not_meeting(self) -> tuple[Candidate, ...]:
        return tuple(c for c in self.candidates if c.verdict != "meets")

    @property
    def unpriced_meeting(self) -> tuple[Candidate, ...]:
        return tuple(c for c in self.meeting if not c.priced)

    @property
    def checked(self) -> bool:
        """Some candidate's answers on the cell's task were checked."""
        return any(c.pass_rate is not None for c in self.candidates)

    def answer(self) -> tuple[object, ...]:
        """What the cell decided, for collapsing cells that decided alike: the rule,
        the ranking and every verdict."""
        return (
            self.rule,
            tuple(c.label for c in self.ranked),
            tuple((c.label, c.verdict) for c in self.candidates),
        )


@dataclass(frozen=True, slots=True)
class TierRun:
    """One run of the decision: its key (label, else id), summary and run.json."""

    key: str
    summary: Summary
    info: RunInfo


@dataclass(frozen=True, slots=True)
class TierDecision:
    """Every cell of the tier pick, levels in load order, and what they were judged by.

    ``slo`` is the first run's SLOs (what a verdict quotes), ``slo_set`` whether any
    run set one. ``cells`` are collapsed: one per distinct answer per level.
    ``pass_bar_default``: some checked task was judged by the default pass bar (no
    ``[slo] min_pass_rate`` for it).
    """

    slo: SloInfo
    slo_set: bool
    attainment: float
    bars: tuple[str, ...]
    cells: tuple[Cell, ...] = field(default=())
    pass_bar_default: bool = False
    #: The cells before equal answers were merged: one per task (a level judged on
    #: all its tasks pooled without checked answers: that one cell). routing.json is
    #: written from these, so its route per task is the pick of the task's cell.
    task_cells: tuple[Cell, ...] = field(default=())

    @property
    def levels(self) -> tuple[str, ...]:
        """The load levels, lightest first."""
        return tuple(dict.fromkeys(c.level for c in self.cells))

    def cells_at(self, level: str) -> tuple[Cell, ...]:
        return tuple(c for c in self.cells if c.level == level)

    @property
    def min_requests(self) -> int:
        return min_requests(self.attainment)

    @property
    def checked(self) -> bool:
        """Whether the pick was held to a pass-rate bar (some answers were checked)."""
        return PASS_RATE in self.bars

    def pooled_at(self, level: str) -> int | None:
        """The fewest requests of a task at ``level`` where its SLOs were pooled."""
        fewest = [c.fewest for c in self.cells_at(level) if c.pooled and c.fewest is not None]
        return min(fewest) if fewest else None


def decide_tiers(runs: Sequence[TierRun], bars: Sequence[Bar] | None = None) -> TierDecision:
    """The tier pick over ``runs`` (one, or several side by side), judged by ``bars``
    (default: the SLOs at 95%, and the pass rate where some run checked answers)."""
    if bars:
        use: tuple[Bar, ...] = tuple(bars)
    else:
        use = (SloBar(), PassRateBar()) if checked(runs) else (SloBar(),)
    attainment = max(b.attainment for b in use)
    needed = min_requests(attainment)
    levels: dict[str, float | None] = {}
    per_level: dict[str, list[tuple[TierRun, Group]]] = {}
    for run in runs:
        for g in run.summary.groups:
            levels.setdefault(g.level, g.load_value)
            per_level.setdefault(g.level, []).append((run, g))
    cells: list[Cell] = []
    task_cells: list[Cell] = []
    for level in sorted(levels, key=lambda lv: level_key(lv, levels[lv])):
        merged, each = _level_cells(level, levels[level], per_level[level], runs, use, needed)
        cells += merged
        task_cells += each
    first = runs[0].info.slo if runs else SloInfo()
    default_bar = any(
        not pass_bar(r.info.slo, t.task)[1]
        for r in runs
        for g in r.summary.groups
        for t in g.by_task
        if t.quality is not None and t.quality.n > 0
    )
    return TierDecision(
        slo=first,
        slo_set=any(r.info.slo.any_set for r in runs),
        attainment=attainment,
        bars=tuple(b.name for b in use),
        cells=tuple(cells),
        pass_bar_default=default_bar and any(b.name == PASS_RATE for b in use),
        task_cells=tuple(task_cells),
    )


def _level_cells(
    level: str,
    load: float | None,
    entries: Sequence[tuple[TierRun, Group]],
    runs: Sequence[TierRun],
    bars: Sequence[Bar],
    needed: int,
) -> tuple[list[Cell], list[Cell]]:
    """The level's cells, equal answers merged, and the same before merging."""
    tasks = sorted({t.task for _, g in entries for t in g.by_task}, key=model_key)
    sizes = [t.counts.ok + t.counts.error for _, g in entries for t in g.by_task]
    fewest = min(sizes, default=0)
    pooled = len(tasks) > 1 and fewest < needed
    quality = any(b.name == PASS_RATE for b in bars) and any(
        t.quality is not None and t.quality.n > 0 for _, g in entries for t in g.by_task
    )
    if pooled and quality:
        # Too few requests per task to judge latency alone, but answers are judged
        # per task: every task its own cell, its latency the level's pooled groups.
        per_task_pooled = [
            replace(
                _decided(
                    level,
                    load,
                    (task,),
                    [
                        _candidate(run, g, t, runs, bars, latency_pooled=True)
                        for run, g in entries
                        for t in g.by_task
                        if t.task == task
                    ],
                ),
                pooled=True,
                fewest=fewest,
            )
            for task in tasks
        ]
        merged = [replace(c, pooled=True, fewest=fewest) for c in _collapse(per_task_pooled)]
        return merged, per_task_pooled
    if not tasks or pooled:
        # No task named, or some task too small to judge alone: the level's whole groups.
        candidates = [_candidate(run, g, None, runs, bars) for run, g in entries]
        cell = _decided(level, load, tuple(tasks) or ("all",), candidates)
        cell = replace(cell, pooled=pooled, fewest=fewest if pooled else None)
        return [cell], [cell]
    per_task = [
        _decided(
            level,
            load,
            (task,),
            [
                _candidate(run, g, t, runs, bars)
                for run, g in entries
                for t in g.by_task
                if t.task == task
            ],
        )
        for task in tasks
    ]
    return _collapse(per_task), per_task


def _label(run: TierRun, g: Group, runs: Sequence[TierRun]) -> str:
    endpoints = {x.endpoint for x in run.summary.groups}
    if len(runs) > 1:
        where = f"{run.key}/{g.endpoint}" if len(endpoints) > 1 else run.key
        return f"{g.model} ({where})"
    return f"{g.endpoint}/{g.model}" if len(endpoints) > 1 else g.model


def _candidate(
    run: TierRun,
    g: Group,
    task: TaskGroup | None,
    runs: Sequence[TierRun],
    bars: Sequence[Bar],
    *,
    latency_pooled: bool = False,
) -> Candidate:
    evidence = Evidence(run.info, g, task, latency_pooled)
    target = next((t for t in run.info.targets if t.key == (g.endpoint, g.model)), None)
    # The task's own cost where the cell is one task's (its token mix is its own).
    cost = g.cost if task is None else task.cost
    speed = evidence.latency_part.decode_tps.p50
    return Candidate(
        run_key=run.key,
        endpoint=g.endpoint,
        model=g.model,
        label=_label(run, g, runs),
        size_b=None if target is None else target.size_b,
        size_source=None if target is None else target.size_source,
        cost=cost,
        failed=evidence.failed,
        judgements=tuple(b.judge(evidence) for b in bars),
        goodput_rps=g.goodput_rps,
        requests_per_s=g.requests_per_s,
        decode_tps=speed,
    )


def _sized(c: Candidate) -> bool:
    return c.size_b is not None and math.isfinite(c.size_b) and c.size_b > 0


def _faster_key(c: Candidate) -> tuple[float, float]:
    """Higher throughput (goodput, else requests/s) first, then faster decode."""
    return (-(c.throughput or 0.0), -(c.decode_tps or 0.0))


def rank_key(rule: Rule, c: Candidate) -> tuple[float, ...]:
    """The order ``rule`` puts candidates in (lower first). Ties fall to measured
    figures (throughput, decode speed), never to the name."""
    if rule == "cheapest":
        return (c.usd_per_1k if c.usd_per_1k is not None else math.inf, *_faster_key(c))
    if rule == "smallest":
        return (c.size_b if c.size_b is not None else math.inf, *_faster_key(c))
    return _faster_key(c)


def _by_goodput(meeting: Sequence[Candidate]) -> tuple[tuple[Candidate, ...], bool]:
    """``meeting`` by throughput, the first two swapped where they are within
    :data:`GOODPUT_TIE` and the second decodes faster; and whether that tie arose."""
    ordered = sorted(meeting, key=_faster_key)
    if len(ordered) < 2:
        return tuple(ordered), False
    first, second = ordered[0], ordered[1]
    top, next_ = first.throughput, second.throughput
    if top is None or next_ is None or top <= 0 or (top - next_) / top > GOODPUT_TIE:
        return tuple(ordered), False
    if (second.decode_tps or 0.0) > (first.decode_tps or 0.0):
        ordered[0], ordered[1] = second, first
    return tuple(ordered), True


def _decided(
    level: str, load: float | None, tasks: tuple[str, ...], candidates: Sequence[Candidate]
) -> Cell:
    # Listed smallest first where sizes are known; a name only orders the listing.
    ordered = tuple(sorted(candidates, key=lambda c: (model_key(c.model, c.size_b), c.label)))
    cell = Cell(level, load, tasks, ordered)
    meeting = [c for c in ordered if c.verdict == "meets"]
    if not meeting:
        return cell
    tie = False
    if any(c.priced for c in meeting):
        rule: Rule = "cheapest"
        ranked = tuple(sorted((c for c in meeting if c.priced), key=lambda c: rank_key(rule, c)))
    elif all(_sized(c) for c in ordered):
        rule = "smallest"
        ranked = tuple(sorted(meeting, key=lambda c: rank_key(rule, c)))
    else:
        rule = "goodput"
        ranked, tie = _by_goodput(meeting)
    runner = ranked[1] if len(ranked) > 1 else None
    return replace(
        cell, pick=ranked[0], rule=rule, runner_up=runner, ranked=ranked, goodput_tie=tie
    )


def _collapse(cells: Sequence[Cell]) -> list[Cell]:
    """Per-task cells of one level with the same answer merged (tasks joined, each
    candidate's requests summed, its costs pooled), in the order of their first task.
    A checked task's cell is never merged: its pass rate is judged against its own
    bar, and the sentence quotes that task's own rate."""
    groups: dict[tuple[object, ...], list[Cell]] = {}
    for i, cell in enumerate(cells):
        key = ("checked", i) if cell.checked else cell.answer()
        groups.setdefault(key, []).append(cell)
    out = []
    for same in groups.values():
        if len(same) == 1:
            out.append(same[0])
            continue
        merged = [_merge([c.candidates[i] for c in same]) for i in range(len(same[0].candidates))]
        tasks = tuple(t for c in same for t in c.tasks)
        first = same[0]
        by_label = {c.label: c for c in merged}
        # The parts ranked alike (their answer() is equal): keep that ranking.
        ranked = tuple(by_label[c.label] for c in first.ranked)
        out.append(
            replace(
                first,
                tasks=tasks,
                candidates=tuple(by_label[c.label] for c in first.candidates),
                pick=ranked[0] if ranked else None,
                runner_up=ranked[1] if len(ranked) > 1 else None,
                ranked=ranked,
            )
        )
    return out


def _merge(parts: Sequence[Candidate]) -> Candidate:
    """One candidate's judgements over several tasks: requests summed, judged again
    (each part had the same verdict, so the sum has it too), shortfalls the worst;
    its costs pooled and its decode speed the slowest part's (a conservative figure:
    the ranking came from the parts)."""
    first = parts[0]
    judgements = []
    for i, j in enumerate(first.judgements):
        if j.pooled:
            # The level's pooled judgement, the same in every part: counted once.
            judgements.append(j)
            continue
        met = sum(p.judgements[i].met for p in parts)
        n = sum(p.judgements[i].n for p in parts)
        worst: dict[str, Shortfall] = {}
        for p in parts:
            for s in p.judgements[i].shortfalls:
                if s.what not in worst or s.ratio > worst[s.what].ratio:
                    worst[s.what] = s
        interval = wilson_interval(met, n, CONFIDENCE) if n else None
        reasons = sorted({p.judgements[i].reason for p in parts if p.judgements[i].reason})
        # Each part had the same verdict, but a per-task bar may differ: keep the
        # strictest one shown.
        target = max(p.judgements[i].target for p in parts)
        judgements.append(
            Judgement(
                j.bar,
                met,
                n,
                target,
                j.verdict,
                interval,
                tuple(worst.values()),
                "; ".join(reasons),
                unjudged=sum(p.judgements[i].unjudged for p in parts),
                short=sum(p.judgements[i].short for p in parts),
            )
        )
    speeds = [p.decode_tps for p in parts if p.decode_tps is not None]
    return replace(
        first,
        failed=sum(p.failed for p in parts),
        judgements=tuple(judgements),
        cost=pool_costs([p.cost for p in parts]),
        decode_tps=min(speeds) if speeds else None,
    )
