"""Capacity search (``tokrate run --capacity``, ``[load] capacity``): per target, the
highest concurrency (closed loop) or rate (open loop) at which every ``[slo]`` holds
for at least ``goodput`` of the requests, with a confidence statement.

Search, per target in run.json order (one target at a time, so no target's load
shapes another's answer):

1. *Bracket*: probe ``start``, then double the level until a probe does not meet (or
   ``max_level`` meets: verdict ``at_max``).
2. *Bisect* between the highest meeting and the lowest non-meeting level until the
   bracket is ``resolution`` wide (relative; closed loop in whole streams, never finer
   than one). A level below ``start`` is searched the same way when ``start`` already
   misses.
3. *Verify* (``verify = true``): one more probe at the capacity and one at twice it; a
   capacity that misses its check is lowered (:func:`verify_capacity`).

Each probe is one scenario of the run (its records land in records.parquet and its
group in summary.json like any other), sent through the run's own backend and worker
machinery, at one level for one target, with an adaptive request count: a
:class:`~tokrate.load.capacity_probe.ProbeJudge` watches the records and stops the probe the
moment the Wilson interval of its SLO-met fraction is decided against the goodput, or
at ``max_requests`` (verdict ``undecided``; the search treats it as "not shown to
meet" and says so in its verdict). An undecided bound never makes a capacity look
higher than what was shown. A probe the client limited (``client_bound``) ends the
search: the capacity is then only a lower bound, and the verdict says so. The time
and request budgets bound each target's search (verdict ``budget``).

Clock: budgets use ``time.monotonic()``; levels are per target (as a sweep's).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final

from tokrate.finish.probe_judge_child import Judged, ProbeJudgeChild
from tokrate.inputs.targets import Target
from tokrate.load.capacity_probe import ProbeJudge
from tokrate.load.plan import ScenarioPlan, build_plan, derive_seed
from tokrate.load.worker.events import Emit, Event
from tokrate.load.worker.stopping import Stop
from tokrate.runfolder.capacity_result import (
    CapacityProbe,
    CapacityResult,
    ProbePhase,
    TargetCapacity,
)
from tokrate.runfolder.records import RequestRecord
from tokrate.runfolder.run_info import ScenarioInfo
from tokrate.spec.types import CapacitySpec, LoadMode, RunSpec
from tokrate.textfmt import fmt_pct_interval

__all__ = [
    "CapacityRun",
    "ProbeFn",
    "SearchOutcome",
    "measure_capacity",
    "search",
    "verify_capacity",
]

#: Probe verdicts that end a target's search at once.
_STOPPING: Final = ("client_bound", "interrupted")
#: Verification: how many times a capacity whose check did not meet is lowered.
_VERIFY_BACKOFFS: Final = 2
#: Open loop: halvings below ``start`` before the search gives up ("none").
_OPEN_HALVINGS: Final = 6

#: ``probe(level, phase)``: run one probe and judge it.
ProbeFn = Callable[[float, ProbePhase], CapacityProbe]
#: ``run_scenario(scenario, on_event, stop)``: the run machinery's one scenario.
RunScenario = Callable[[ScenarioPlan, Emit, Stop], None]


@dataclass(frozen=True, slots=True)
class SearchOutcome:
    """What :func:`search` found for one target (see capacityinfo for verdicts)."""

    capacity: float | None
    verdict: str
    bracket: tuple[float, float] | None
    limiting_slo: str | None
    probes: tuple[CapacityProbe, ...]
    #: What the verification changed (a lowered capacity), for the note.
    verified_note: str = ""


def _mid(lo: float, hi: float, closed: bool, cap: CapacitySpec) -> float | None:
    """The next level between a meeting ``lo`` (0: none yet) and a failing ``hi``;
    None when the bracket is narrow enough."""
    if closed:
        # Whole streams, to ``resolution`` of the level but never finer than one: a
        # capacity of 200 is not worth eight more probes to tell 231 from 232.
        if hi - lo <= max(1.0, cap.resolution * lo):
            return None
        return float((int(lo) + int(hi)) // 2)
    if lo == 0:
        return None if hi <= cap.start / 2**_OPEN_HALVINGS else float(f"{hi / 2:.4g}")
    if hi - lo <= cap.resolution * lo:
        return None
    return float(f"{(lo + hi) / 2:.4g}")


def search(
    probe: ProbeFn, cap: CapacitySpec, mode: LoadMode, budget_ok: Callable[[], bool]
) -> SearchOutcome:
    """Bracket by doubling, then bisect (module doc). ``budget_ok()`` is asked before
    every search probe; pure apart from ``probe``, so any oracle can drive it."""
    closed = mode == "closed"
    probes: list[CapacityProbe] = []
    lo, hi = 0.0, None
    hi_probe: CapacityProbe | None = None

    def outcome(verdict: str) -> SearchOutcome:
        bracket = None if hi is None else (lo, hi)
        limiting = hi_probe.limiting_slo if hi_probe is not None else None
        return SearchOutcome(lo or None, verdict, bracket, limiting, tuple(probes))

    def step(level: float, phase: ProbePhase) -> CapacityProbe | str:
        """One search probe, or the verdict that ends the search before or with it."""
        if not budget_ok():
            return "budget"
        p = probe(level, phase)
        probes.append(p)
        return p.verdict if p.verdict in _STOPPING else p

    level = float(int(cap.start)) if closed else cap.start
    while hi is None:
        p = step(level, "bracket")
        if isinstance(p, str):
            return outcome(p)
        if p.verdict != "meets":
            hi, hi_probe = level, p
        elif level >= cap.max_level:
            lo = level
            return outcome("at_max")
        else:
            lo, level = level, min(level * 2, cap.max_level)
    while (mid := _mid(lo, hi, closed, cap)) is not None:
        p = step(mid, "bisect")
        if isinstance(p, str):
            return outcome(p)
        if p.verdict == "meets":
            lo = mid
        else:
            hi, hi_probe = mid, p
    if lo == 0:
        return outcome("none")
    assert hi_probe is not None
    return outcome("undecided" if hi_probe.verdict == "undecided" else "found")


def verify_capacity(probe: ProbeFn, found: SearchOutcome, closed: bool) -> SearchOutcome:
    """Probes at the capacity and at twice it, appended to the outcome's probes.

    A capacity whose verification does not meet was an edge case of noise (the level
    met once, not twice): it drops to the next lower level the search saw meet and is
    verified again, at most :data:`_VERIFY_BACKOFFS` times; a capacity is then one that
    met every time it was probed. Still not met: verdict ``unverified``."""
    if found.capacity is None or found.verdict in _STOPPING:
        return found
    probes = list(found.probes)
    met = sorted({p.level for p in found.probes if p.verdict == "meets"}, reverse=True)
    level, bracket, lowered = found.capacity, found.bracket, []
    verdict = found.verdict
    for attempt in range(_VERIFY_BACKOFFS + 1):
        p = probe(float(int(level)) if closed else level, "verify")
        probes.append(p)
        if p.verdict == "interrupted":
            return dataclasses.replace(found, verdict="interrupted", probes=tuple(probes))
        if p.verdict == "meets":
            break
        lower = [m for m in met if m < level]
        if not lower or attempt == _VERIFY_BACKOFFS:
            verdict = "unverified"
            break
        lowered.append(level)
        bracket, level = (lower[0], level), lower[0]
    if verdict != "unverified":
        p = probe(float(int(level * 2)) if closed else level * 2, "verify")
        probes.append(p)
        if p.verdict == "interrupted":
            return dataclasses.replace(found, verdict="interrupted", probes=tuple(probes))
        if p.verdict == "meets":
            # Twice the capacity meets although a level between missed: the SLO-met
            # fraction does not fall steadily with load here, so no single level is
            # "the" capacity (e.g. a TPOT limit that depends on how joins line up).
            verdict = "non_monotone"
    note = ""
    if lowered:
        unit = "c" if closed else "rate"
        tried = ", ".join(f"{unit}={x:g}" for x in lowered)
        note = f"; verification did not meet at {tried}, so the capacity is {unit}={level:g}"
    if verdict == "unverified":
        note += "; the capacity's verification did not meet: not shown twice"
    elif verdict == "non_monotone":
        unit = "c" if closed else "rate"
        note += (
            f"; but {unit}={level * 2:g} met too: the SLOs do not fail steadily with load"
            " here, so this is no single threshold"
        )
    return dataclasses.replace(
        found,
        capacity=level,
        verdict=verdict,
        bracket=bracket,
        probes=tuple(probes),
        verified_note=note,
    )


def _note(o: SearchOutcome, unit: str) -> str:
    def v(x: float) -> str:
        return f"{unit}={x:g}"

    lo, hi = o.bracket if o.bracket is not None else (o.capacity or 0.0, None)
    base = {
        "found": f"meets at {v(lo)}, not at {v(hi or 0)}",
        "at_max": f"meets at the search's max_level {v(lo)}: the capacity is at least that",
        "none": f"not even {v(hi or 0)} meets the SLOs",
        "undecided": f"meets at {v(lo)}; {v(hi or 0)} stayed undecided within max_requests",
        "client_bound": "stopped: the measuring client became the bottleneck (loop lag or"
        " send delay); the capacity is only a lower bound; use --workers N",
        "budget": "stopped: the time or request budget ran out; the capacity is a lower bound",
        "interrupted": "stopped by a signal",
        "unverified": f"met at {v(lo)} in the search, not in its verification",
        "non_monotone": f"meets at {v(lo)}, not at {v(hi or 0)}",
    }[o.verdict]
    return base + o.verified_note


def _queue_hint(o: SearchOutcome, spec: RunSpec) -> str:
    """Why a search over decode-speed SLOs alone is often non-monotone."""
    if o.verdict != "non_monotone" or spec.slo.ttft_s is not None or spec.slo.e2e_s is not None:
        return ""
    return (
        "; with only TPOT/ITL limits, a server that queues past its batch keeps decode"
        " speed and moves the wait into TTFT: add a ttft_s or e2e_s limit"
    )


@dataclass(frozen=True, slots=True)
class CapacityRun:
    """A finished capacity search: the result (capacity.json, written through the
    store), the scenarios its probes ran (for run.json, in order) and whether a stop
    ended it."""

    result: CapacityResult
    scenarios: tuple[ScenarioInfo, ...]
    interrupted: bool


class _Prober:
    """Runs probes for one run: builds each probe's scenario and judges it."""

    def __init__(
        self,
        spec: RunSpec,
        n_prompts: int,
        names: Sequence[str],
        run_scenario: RunScenario,
        sink: Emit,
        stop: Stop,
        say: Callable[[str], None] | None,
        judge: Callable[[Sequence[RequestRecord]], list[Judged]],
    ) -> None:
        assert spec.load.capacity is not None
        self.spec = spec
        self.cap = spec.load.capacity
        self.mode: LoadMode = self.cap.mode or spec.load.mode
        self.n_prompts = n_prompts
        self.names = list(names)
        self.run_scenario = run_scenario
        self.sink = sink
        self.stop = stop
        self.say = say
        self.judge = judge
        self.scenarios: list[ScenarioInfo] = []
        #: Requests sent per target (warm-up included): its request budget's use.
        self.used: dict[int, int] = {}
        # "auto": a search has no plan up front, and opens one worker (selection).
        workers = spec.load.workers
        self.in_process = (workers == "auto" or workers <= 1) and spec.distributed.ray is None
        #: Per target: the loop-lag p99 of its first probe (capacity_probe module doc).
        self.ambient_lag_ms: dict[int, float] = {}

    def scenario(self, target: int, level: float) -> ScenarioPlan:
        closed = self.mode == "closed"
        cap = self.cap
        warmup = cap.warmup_requests
        if warmup is None:
            warmup = int(level) if closed else self.spec.load.warmup_requests
        left = max(1, cap.request_budget - self.used.get(target, 0))
        load = dataclasses.replace(
            self.spec.load,
            mode=self.mode,
            concurrency=(int(level),) if closed else (1,),
            rates=() if closed else (level,),
            requests=min(cap.max_requests, left),
            duration_s=None,
            warmup_requests=warmup,
            warmup_s=0.0 if closed else self.spec.load.warmup_s,
            targets="sequential",
            capacity=None,
        )
        plan = build_plan(
            dataclasses.replace(self.spec, load=load),
            self.n_prompts,
            len(self.names),
            target_names=self.names,
        )
        sc = plan.scenarios[target]
        name = sc.name
        taken = {s.name for s in self.scenarios}
        k = 2
        while name in taken:
            name, k = f"{sc.name} #{k}", k + 1
        self.scenarios.append(
            ScenarioInfo(name, sc.concurrency, sc.rate_rps, None if closed else sc.arrival)
        )
        return dataclasses.replace(sc, name=name, seed=derive_seed(self.spec.load.seed, name))

    def probe(self, target: int, level: float, phase: ProbePhase) -> CapacityProbe:
        sc = self.scenario(target, level)
        probe_stop = Stop()
        judge = ProbeJudge(
            level=level,
            phase=phase,
            scenario=sc.name,
            slo=self.spec.slo.latency_limits(),
            cap=self.cap,
            max_requests=sc.requests_per_target or self.cap.max_requests,
            stop=probe_stop,
            run_stop=self.stop,
            judge=self.judge,
            in_process=self.in_process,
        )

        def on_event(event: Event) -> None:
            self.sink(event)
            judge.on_event(event)

        if not self.stop.is_set():
            self.run_scenario(sc, on_event, probe_stop)
        result = judge.finish(self.stop.is_set(), self.ambient_lag_ms.get(target))
        if target not in self.ambient_lag_ms and result.loop_lag_p99_ms is not None:
            self.ambient_lag_ms[target] = result.loop_lag_p99_ms
        self.used[target] = self.used.get(target, 0) + result.requests + sc.warmup_requests
        self._print(result)
        return result

    def _print(self, p: CapacityProbe) -> None:
        if self.say is None:
            return
        lo, hi = p.interval or (0.0, 0.0)
        frac = p.met_fraction
        shown = "-" if frac is None else f"{frac:.0%} (95% CI {fmt_pct_interval(lo, hi)})"
        lag = "" if p.loop_lag_p99_ms is None else f", loop lag p99 {p.loop_lag_p99_ms:.1f} ms"
        self.say(
            f"capacity {p.phase} {p.scenario}: {p.requests} requests, SLOs met {shown}"
            f"{lag} -> {p.verdict}"
        )


def measure_capacity(
    spec: RunSpec,
    targets: Sequence[Target],
    names: Sequence[str],
    n_prompts: int,
    run_scenario: RunScenario,
    sink: Emit,
    stop: Stop,
    say: Callable[[str], None] | None = None,
) -> CapacityRun:
    """Search every target's capacity (module doc); ``names`` name the probes'
    scenarios ("c=8 [sim-7b]"), ``run_scenario`` runs one through the run's backend,
    ``sink`` receives every event (the run's collector), ``say`` each probe's verdict
    as one line (tokrate.load.live)."""
    limits = {k: v for k, v in spec.slo.latency_limits().items() if v is not None}
    with ProbeJudgeChild(limits) as child:  # one judging child for the whole search
        prober = _Prober(spec, n_prompts, names, run_scenario, sink, stop, say, child.judge)
        cap = prober.cap
        closed = prober.mode == "closed"
        out: list[TargetCapacity] = []
        for t, target in enumerate(targets):
            started = time.monotonic()

            def budget_ok(started: float = started, t: int = t) -> bool:
                # A probe needs room for its minimum, else it could only end undecided.
                left = cap.request_budget - prober.used.get(t, 0)
                return time.monotonic() - started < cap.time_budget_s and left >= cap.min_requests

            def probe(level: float, phase: ProbePhase, t: int = t) -> CapacityProbe:
                return prober.probe(t, level, phase)

            found = search(probe, cap, prober.mode, budget_ok)
            if cap.verify:
                found = verify_capacity(probe, found, closed)
            out.append(
                TargetCapacity(
                    endpoint=target.endpoint.name,
                    model=target.model.name,
                    capacity=found.capacity,
                    verdict=found.verdict,
                    limiting_slo=found.limiting_slo,
                    bracket=found.bracket,
                    probes=found.probes,
                    note=_note(found, "c" if closed else "rate") + _queue_hint(found, spec),
                    requests=sum(p.requests for p in found.probes),
                    duration_s=round(time.monotonic() - started, 3),
                )
            )
            if stop.is_set():
                break
    result = CapacityResult(
        mode=prober.mode,
        goodput=cap.goodput,
        confidence=cap.confidence,
        slo=spec.slo.latency_limits(),
        targets=tuple(out),
    )
    return CapacityRun(result, tuple(prober.scenarios), stop.is_set())
