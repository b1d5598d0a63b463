"""One capacity probe judged as its records arrive: the SLO-met fraction of measured
requests, its Wilson interval, and whether that interval is decided against the goodput.

A request *meets* when it ended ok and every ``[slo]`` limit holds (the same rule as
summary.json's ``slo_met``: :func:`tokrate.analysis.metrics.slo_met_expr`, applied to the
probe's records in small batches by a child process, since that rule is polars
expressions and this process never imports polars:
:class:`~tokrate.finish.probe_judge_child.ProbeJudgeChild`); a failed request misses.
Warm-up records are recorded but not judged; with retries a request counts once, by
its last attempt.

Client bottleneck (documented in docs/running.md): the probe is ``client_bound`` when
the load made the measuring loop lag enough to matter: a worker's loop-lag p99 (over at
least :data:`~tokrate.load.worker.looplag.MIN_P99_SAMPLES` samples) above every one of
:data:`~tokrate.load.worker.looplag.P99_THRESHOLD_MS`, :data:`LOAD_LAG_FACTOR` x the *ambient* lag
(the p99 of the target's first, lightest probe: what a shared machine adds whatever
the load; without one, :data:`~tokrate.load.worker.looplag.MAX_THRESHOLD_MS`) and
:data:`SLO_LAG_FRACTION` of the tightest SLO limit (a lag far below the limits cannot
move a verdict) *and*, when the workers run in this process (the default backend),
the process was busy: its CPU time over the probe at least :data:`CLIENT_BUSY_FRACTION`
of the wall time (a lag while the client idles comes from other processes on a shared
machine, not from the load); or (open loop) when the p95 of the sends'
``send_delay_s`` exceeds :data:`SEND_DELAY_LIMIT_S`: then the load the server saw was
not the load asked for.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Final

from tokrate.finish.probe_judge_child import Judged
from tokrate.load.worker.events import Event, LoopLag, RequestFinished
from tokrate.load.worker.looplag import MAX_THRESHOLD_MS, MIN_P99_SAMPLES, P99_THRESHOLD_MS
from tokrate.load.worker.stopping import Stop
from tokrate.runfolder.capacity_result import CapacityProbe, ProbePhase
from tokrate.runfolder.proportions import wilson_interval
from tokrate.runfolder.records import RequestRecord
from tokrate.spec.types import CapacitySpec

__all__ = [
    "CLIENT_BUSY_FRACTION",
    "JUDGE_BATCH",
    "LOAD_LAG_FACTOR",
    "SEND_DELAY_LIMIT_S",
    "SLO_LAG_FRACTION",
    "ProbeJudge",
]

#: How many times the ambient loop lag a probe's lag must reach to blame the load.
LOAD_LAG_FACTOR: Final = 3.0
#: The fraction of the tightest SLO limit a loop lag must reach to blame the client.
SLO_LAG_FRACTION: Final = 0.5
#: CPU time / wall time of the measuring process from which it counts as saturated.
CLIENT_BUSY_FRACTION: Final = 0.8

#: p95 of open-loop send delays above which the client, not the server, set the pace.
SEND_DELAY_LIMIT_S: Final = 0.010
#: Records judged per batch (one message to the judging child): a probe is decided at
#: a multiple of this many measured requests (or where its scenario ran out).
JUDGE_BATCH: Final = 4


class ProbeJudge:
    """Collects one probe's records (the event sink wraps it) and sets ``stop`` the
    moment the probe is decided or its ``max_requests`` measured requests are in;
    ``judge`` gives the verdicts of a batch of records (the search's
    :meth:`ProbeJudgeChild.judge <tokrate.finish.probe_judge_child.ProbeJudgeChild.judge>`)."""

    def __init__(
        self,
        *,
        level: float,
        phase: ProbePhase,
        scenario: str,
        slo: Mapping[str, float | None],
        cap: CapacitySpec,
        max_requests: int,
        stop: Stop,
        run_stop: Stop,
        judge: Callable[[Sequence[RequestRecord]], list[Judged]],
        in_process: bool = True,
    ) -> None:
        self.level = level
        self.phase: ProbePhase = phase
        self.scenario = scenario
        self.slo = {k: float(v) for k, v in slo.items() if v is not None}
        self.cap = cap
        self.max_requests = max_requests
        self.stop = stop
        self.run_stop = run_stop
        self.judge = judge
        self.started = time.monotonic()
        self.started_cpu = time.process_time()
        #: Workers run in this process, so its CPU time is theirs.
        self.in_process = in_process
        self.pending: list[RequestRecord] = []
        #: Per measured request index: (met every SLO, ok, {slo key: value or None}).
        self.judged: dict[int, tuple[bool, bool, dict[str, float | None]]] = {}
        self.send_delays: list[float] = []
        self.lags: list[LoopLag] = []
        self.decided: str | None = None
        self.frozen: dict[int, tuple[bool, bool, dict[str, float | None]]] | None = None

    # --- the event hook ------------------------------------------------------------

    def on_event(self, event: Event) -> None:
        if self.run_stop.is_set() and not self.stop.is_set():
            self.stop.set()
        if self.run_stop.aborted and not self.stop.aborted:
            self.stop.abort()
        if isinstance(event, LoopLag):
            self.lags.append(event)
        elif isinstance(event, RequestFinished) and event.record.scenario == self.scenario:
            record = event.record
            if record.warmup or self.frozen is not None:
                return
            self.pending.append(record)
            if len(self.pending) >= JUDGE_BATCH or self._count() + len(self.pending) >= (
                self.max_requests
            ):
                self._judge_pending()

    def _count(self) -> int:
        return len(self.judged)

    def _judge_pending(self) -> None:
        pending, self.pending = self.pending, []
        for j in self.judge(pending):
            if j.judged:  # a request too short for a limit set neither meets nor misses
                self.judged[j.request_index] = (j.met, j.ok, j.values)
            if j.send_delay_s is not None:
                self.send_delays.append(j.send_delay_s)
        self._decide()

    def _decide(self) -> None:
        n = self._count()
        if n == 0 or self.frozen is not None:
            return
        verdict = self._interval_verdict(n)
        if verdict is None and n < self.max_requests:
            return
        self.decided = verdict or "undecided"
        self.frozen = dict(self.judged)
        self.stop.set()

    def _interval_verdict(self, n: int) -> str | None:
        met = sum(1 for m, _ok, _v in self.judged.values() if m)
        lo, hi = wilson_interval(met, n, self.cap.confidence)
        if hi < self.cap.goodput and n >= max(1, self.cap.min_requests // 2):
            # Certain already (half the minimum guards against a start-up transient).
            return "misses"
        if n >= self.cap.min_requests and lo >= self.cap.goodput:
            return "meets"
        return None

    # --- after the probe -------------------------------------------------------------

    def finish(self, interrupted: bool, ambient_lag_ms: float | None) -> CapacityProbe:
        """The probe's result (call after its scenario ended); ``ambient_lag_ms`` the
        target's first probe's loop-lag p99 (None: this is the first)."""
        if self.pending:
            self._judge_pending()
        judged = self.frozen if self.frozen is not None else self.judged
        n = len(judged)
        met = sum(1 for m, _ok, _v in judged.values() if m)
        ok = sum(1 for _m, o, _v in judged.values() if o)
        verdict = self.decided or ("interrupted" if interrupted else "undecided")
        if interrupted and self.decided is None:
            verdict = "interrupted"
        lag_p99 = max((lag.p99_ms for lag in self.lags), default=None)
        delay_p95 = _quantile(self.send_delays, 0.95)
        wall_s = time.monotonic() - self.started
        cpu = (time.process_time() - self.started_cpu) / wall_s if wall_s > 0 else None
        busy = cpu if self.in_process else None
        if verdict != "interrupted" and self._client_bound(delay_p95, ambient_lag_ms, busy):
            verdict = "client_bound"
        slo_met = {
            k: (
                sum(1 for _m, o, v in judged.values() if o and _holds(v[k], lim)) / n if n else None
            )
            for k, lim in self.slo.items()
        }
        limiting = min(slo_met, key=lambda k: slo_met[k] or 0.0) if slo_met else None
        values = [v[limiting] for _m, o, v in judged.values() if o and limiting] if limiting else []
        return CapacityProbe(
            level=self.level,
            phase=self.phase,
            scenario=self.scenario,
            requests=n,
            met=met,
            interval=wilson_interval(met, n, self.cap.confidence) if n else None,
            verdict=verdict,
            limiting_slo=limiting,
            slo_met=slo_met,
            percentiles={
                f"p{q}": _quantile([x for x in values if x is not None], q / 100)
                for q in (50, 90, 99)
            },
            errors=n - ok,
            duration_s=round(wall_s, 3),
            client_cpu_fraction=None if busy is None else round(busy, 3),
            loop_lag_p99_ms=None if lag_p99 is None else round(lag_p99, 3),
            send_delay_p95_s=delay_p95,
        )

    def _client_bound(
        self, delay_p95: float | None, ambient_lag_ms: float | None, busy: float | None
    ) -> bool:
        ambient = MAX_THRESHOLD_MS if ambient_lag_ms is None else LOAD_LAG_FACTOR * ambient_lag_ms
        tightest_ms = min(self.slo.values(), default=0.0) * 1e3
        limit = max(P99_THRESHOLD_MS, ambient, SLO_LAG_FRACTION * tightest_ms)
        lagged = any(lag.samples >= MIN_P99_SAMPLES and lag.p99_ms > limit for lag in self.lags)
        lagged = lagged and (busy is None or busy >= CLIENT_BUSY_FRACTION)
        return lagged or (delay_p95 is not None and delay_p95 > SEND_DELAY_LIMIT_S)


def _holds(value: float | None, limit: float) -> bool:
    return value is None or value <= limit


def _quantile(values: list[float], q: float) -> float | None:
    """Linear-interpolation quantile (numpy's and polars' "linear": position
    q x (n - 1) in the sorted values), rounded to 1 us; None for no values."""
    finite = sorted(v for v in values if not math.isnan(v))
    if not finite:
        return None
    position = q * (len(finite) - 1)
    below = math.floor(position)
    above = min(below + 1, len(finite) - 1)
    value = finite[below] + (finite[above] - finite[below]) * (position - below)
    return round(value, 6)
