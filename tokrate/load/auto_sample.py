"""``requests = "auto"`` (``--requests auto``): each level keeps sending until every
statistic the run will judge has enough samples, or its budget ends.

**What "enough" means** is, statistic by statistic, the rule its verdict uses, so a run
that stopped "judged" leaves no verdict undecided for want of samples. Counted per
target (endpoint x model) of the level, over its measured requests (warm-up left out), a
retried request once, by its last attempt:

- **the thresholds' statistics** (``[compare] thresholds`` over the defaults: ttft_p95,
  tpot_p50, e2e_p95, decode_tps_p50, error_rate, cache_hit_rate): compare's rule,
  :func:`tokrate.analysis.early_stopping.samples_needed`. A percentile needs MLPerf
  LoadGen's early-stopping minimum at 99% confidence (11 for a p50, 64 for a p90, 130
  for a p95, 662 for a p99), a mean or a rate compare's least sample count (10). The
  largest of these needs is counted in *ok* requests: latency percentiles are judged on
  the ok requests alone, so a failed request does not count toward it.
- **the tier pick's SLO-met share, per task** (tokrate.analysis.tier_pick): a share is
  decided against its 95% bar on at least :func:`~tokrate.analysis.tier_pick.min_requests`
  of the requests the SLOs judge (20: below that one request is more than the 5% allowed
  to miss), and a level where some task has fewer is judged on all its tasks pooled. So
  every task the level sent needs 20 requests the SLOs judge: ok or failed by the
  server, less those too short for a limit set to judge (a TPOT limit on a one-token
  answer, an ITL limit on a one-chunk answer of fewer than 4 tokens, which cannot be a
  buffered stream; docs/definitions.md "SLO met"); with no SLO set, every ok or failed
  request.
- **the pass rate of each checked task against its bar** (``[slo] min_pass_rate``, per
  task ``min_pass_rate_by_task``, else 90%; docs/quality.md): by the same rule,
  ``min_requests(bar)`` checked answers of that task (10 for 90%, 20 for 95%, 50 for
  98%). A checked answer is an ok answer of a prompt (or session turn) with an
  ``expect``; checks run after the load, so a check that raises (its own error, not a
  verdict) is not known here and can leave that task short.
- **compare's pass-rate row** (unless ``pass_rate=off``), where the level sent checked
  prompts: 10 checked answers per target and level.

These needs depend on counts only, never on the shares measured so far: the tier pick
calls a share "meets" or "misses" by its value once it has its requests (the Wilson
interval it prints is evidence, not the rule), so a share that sits at its bar is
decided like any other. A statistic whose samples cannot come (every answer of a task
too short for the TPOT limit, every checked answer failing) leaves the level sending
until its budget ends, and the stop says which.

A level stops when every one of its targets has every need met (:class:`AutoSample`
sets the level's own stop; requests in flight then finish in their grace period and are
kept).

**The budget**: ``load.max_requests`` measured requests per target and level (default
1000; the plan sends no more), and ``duration_s`` when set. run.json ``sampling``
records per target and level why it stopped: ``"judged"`` (every statistic had its
samples; ``limiting`` names the one whose samples came last), ``"max_requests"``,
``"duration"`` or ``"stopped"`` otherwise, with ``unmet``: each statistic still short,
as "what: have of the need". A target whose level ended on its budget with some
statistic short is also a warning of the run (:func:`budget_warnings`): its verdicts on
those statistics will say they had too few samples.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Final

from tokrate.analysis.buffering_rules import MIN_TOKENS
from tokrate.analysis.early_stopping import samples_needed
from tokrate.analysis.tier_pick import ATTAINMENT, min_requests, pass_bar
from tokrate.inputs.prompt_base import Prompt, check_entries
from tokrate.load.worker.events import Event, LoopLag, RequestFinished
from tokrate.load.worker.stopping import Stop
from tokrate.runfolder.records import RequestRecord
from tokrate.runfolder.run_info import SamplingStop, SloInfo
from tokrate.spec.thresholds import merge_thresholds, parse_threshold
from tokrate.spec.types import CLIENT_SIDE_CLASSES, RunSpec

__all__ = ["AUTO_LEAST", "AutoSample", "SampleNeeds", "budget_warnings", "judged_need"]

#: The fewest values compare judges a mean or a rate on (CompareSettings.min_samples).
AUTO_LEAST: Final = 10
#: Thresholds not counted in ok requests: capacity (a search, not a sweep) and the pass
#: rate (checked answers: :attr:`SampleNeeds.pass_rate_row`).
_NOT_OK_COUNTED: Final = frozenset({"capacity", "pass_rate"})


def judged_need(thresholds: Iterable[str]) -> tuple[int, str]:
    """The ok requests per target and level the thresholds' statistics need (module
    doc), and the statistic that needs the most."""
    metrics = [t.metric for t in merge_thresholds(parse_threshold(t) for t in thresholds)]
    needs = [(samples_needed(m, AUTO_LEAST), m) for m in metrics if m not in _NOT_OK_COUNTED]
    return max(needs, default=(AUTO_LEAST, "error_rate"))


def _pass_rate_judged(thresholds: Iterable[str]) -> bool:
    metrics = {t.metric for t in merge_thresholds(parse_threshold(t) for t in thresholds)}
    return "pass_rate" in metrics


@dataclass(frozen=True, slots=True)
class SampleNeeds:
    """What each target of a level must collect before the run can judge every
    statistic (module doc): ``ok`` ok requests (for ``ok_for``, the statistic needing
    the most), ``share`` requests the SLOs judge per task, each checked task's
    ``min_requests`` of its pass bar in checked answers, and ``pass_rate_row`` checked
    answers in all (0: compare judges no pass rate). ``slo`` holds the limits and the
    pass bars; ``checked`` the (prompt_id, turn) of every prompt with an expect."""

    ok: int
    ok_for: str
    slo: SloInfo = field(default_factory=SloInfo)
    checked: frozenset[tuple[str, int | None]] = frozenset()
    share: int = min_requests(ATTAINMENT)
    pass_rate_row: int = AUTO_LEAST

    @classmethod
    def of(cls, spec: RunSpec, prompts: Sequence[Prompt]) -> SampleNeeds:
        """The needs of a run of ``spec`` sending ``prompts``: its ``[compare]
        thresholds``, its SLOs and pass bars, its checked prompts."""
        thresholds = spec.compare.thresholds
        ok, ok_for = judged_need(thresholds)
        return cls(
            ok=ok,
            ok_for=ok_for,
            slo=SloInfo(**dataclasses.asdict(spec.slo)),
            checked=frozenset(c.key for c in check_entries(prompts)),
            pass_rate_row=AUTO_LEAST if _pass_rate_judged(thresholds) else 0,
        )

    def pass_need(self, task: str) -> tuple[int, float]:
        """Checked answers ``task``'s pass rate needs, and its bar."""
        bar, _ = pass_bar(self.slo, task)
        return min_requests(bar), bar

    def slo_judges(self, record: RequestRecord) -> bool:
        """Whether the SLOs judge ``record`` (counts in its task's SLO-met share): ok or
        failed by the server, and not too short for a limit set to judge. The summary's
        rule (tokrate.analysis.metrics.slo_judgement_exprs) counts a too-short request
        that another limit failed; this one never does, so it may ask for a request
        more than the summary would, never fewer."""
        if record.status == "error":
            return record.error_class not in CLIENT_SIDE_CLASSES
        if record.status != "ok":
            return False
        chunks = len(record.chunk_offsets_s)
        if chunks == 0 and record.ttft_s is None:
            return True  # an empty answer misses whatever the limits
        tokens = record.output_tokens or 0
        if self.slo.tpot_s is not None and tokens < 2:
            return False
        # One content chunk: a gap-less stream, unless it holds enough tokens to be a
        # buffered one (tokrate.analysis.buffering), whose ITL limit holds vacuously.
        return not (self.slo.itl_p99_s is not None and chunks < 2 and tokens < MIN_TOKENS)


@dataclass(slots=True)
class _Tally:
    """One target's counts at one level."""

    sent: int = 0
    ok: int = 0
    #: Per task: requests that reached the server (ok or failed), the SLOs judged,
    #: and checked answers.
    tasks: set[str] = field(default_factory=set)
    judged: dict[str, int] = field(default_factory=dict)
    checked: dict[str, int] = field(default_factory=dict)
    checked_tasks: set[str] = field(default_factory=set)
    #: What was short after the last record (None: nothing counted yet), and the
    #: statistic whose samples came last (set once nothing is short).
    unmet: tuple[str, ...] | None = None
    limiting: str = ""

    def count(self, record: RequestRecord, needs: SampleNeeds) -> None:
        self.sent += 1
        task = record.task
        if record.status == "cancelled" or record.error_class in CLIENT_SIDE_CLASSES:
            return  # never answered: the tier pick counts neither
        self.tasks.add(task)
        if record.status == "ok":
            self.ok += 1
        if needs.slo_judges(record):
            self.judged[task] = self.judged.get(task, 0) + 1
        if (record.prompt_id, record.turn) in needs.checked:
            self.checked_tasks.add(task)
            if record.status == "ok" and record.answer is not None:
                self.checked[task] = self.checked.get(task, 0) + 1

    def short(self, needs: SampleNeeds) -> list[tuple[str, str]]:
        """Each statistic still short of its samples: (its name, "have of need what")."""
        out = []
        if self.ok < needs.ok:
            out.append((needs.ok_for, f"{self.ok} of the {needs.ok} ok requests"))
        for task in sorted(self.tasks):
            have = self.judged.get(task, 0)
            if have < needs.share:
                name = f"SLO-met share of task {task}"
                out.append((name, f"{have} of the {needs.share} requests the SLOs judge"))
        for task in sorted(self.checked_tasks):
            have = self.checked.get(task, 0)
            need, bar = needs.pass_need(task)
            if have < need:
                name = f"pass rate of task {task} ({bar:.0%} bar)"
                out.append((name, f"{have} of the {need} checked answers"))
        total = sum(self.checked.values())
        if self.checked_tasks and total < needs.pass_rate_row:
            out.append(("pass_rate", f"{total} of the {needs.pass_rate_row} checked answers"))
        return out

    def update(self, needs: SampleNeeds) -> bool:
        """Refresh what is short after a record; True when nothing is."""
        short = self.short(needs)
        if not short and self.unmet != ():
            # The statistics short before this record: the first of them came last.
            self.limiting = self.unmet[0] if self.unmet else needs.ok_for
        self.unmet = tuple(name for name, _ in short)
        return not short


class AutoSample:
    """Watches one level's records and sets its ``stop`` once each of its ``targets``
    (how many targets the level holds) has every need of ``needs`` met; follows the
    run's stop (``run_stop``) both ways: a stop of the run stops the level."""

    def __init__(
        self, scenario: str, targets: int, needs: SampleNeeds, stop: Stop, run_stop: Stop
    ) -> None:
        self.scenario = scenario
        self.targets = targets
        self.needs = needs
        self.stop = stop
        self.run_stop = run_stop
        self.tallies: dict[tuple[str, str], _Tally] = {}
        self.judged = False

    def on_event(self, event: Event) -> None:
        if self.run_stop.is_set() and not self.stop.is_set():
            self.stop.set()
        if self.run_stop.aborted and not self.stop.aborted:
            self.stop.abort()
        if isinstance(event, LoopLag) or not isinstance(event, RequestFinished):
            return
        record = event.record
        if record.scenario != self.scenario or record.warmup or event.retry_in_s is not None:
            return  # a retried attempt: the request counts once, by its last attempt
        tally = self.tallies.setdefault((record.endpoint, record.model), _Tally())
        tally.count(record, self.needs)
        tally.update(self.needs)
        if self.judged:
            return
        done = sum(1 for t in self.tallies.values() if t.unmet == ())
        if done >= self.targets:
            self.judged = True
            self.stop.set()

    def outcome(self, max_requests: int, duration_bound: bool) -> list[SamplingStop]:
        """Why the level stopped, per target it measured (module doc)."""
        out = []
        for (endpoint, model), tally in sorted(self.tallies.items()):
            short = tally.short(self.needs)
            if not short or self.judged:
                # judged: nothing short, or the level stopped once nothing was (a
                # request still in flight then may have brought a task of its own).
                reason = "judged"
            elif self.run_stop.is_set():
                reason = "stopped"
            elif tally.sent >= max_requests or not duration_bound:
                reason = "max_requests"
            else:
                reason = "duration"
            out.append(
                SamplingStop(
                    self.scenario,
                    endpoint,
                    model,
                    tally.sent,
                    tally.ok,
                    self.needs.ok,
                    reason,
                    limiting=tally.limiting if reason == "judged" else "",
                    unmet=tuple(f"{name}: {have}" for name, have in short),
                )
            )
        return out


def budget_warnings(stops: Iterable[SamplingStop]) -> list[str]:
    """One line per target and level that ended on ``max_requests`` or ``duration_s``
    with some statistic still short of its samples (a stop by signal or stopping rule
    is said by the run already)."""
    out = []
    for stop in stops:
        if stop.reason not in ("max_requests", "duration") or not stop.unmet:
            continue
        budget = "load.max_requests" if stop.reason == "max_requests" else "load.duration_s"
        out.append(
            f"{stop.model} ({stop.endpoint}) at {stop.scenario}: --requests auto reached "
            f"{budget} after {stop.sent} requests with too few samples for "
            f"{'; '.join(stop.unmet)}; those verdicts will say so. Raise {budget} to judge them"
        )
    return out
