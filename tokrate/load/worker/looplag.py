"""Event-loop lag monitor: how late the measuring loop wakes up.

A client stamps a chunk when its event loop gets round to reading it; if the loop is
busy (too many streams for one core, a slow callback), every stamp is late by that
much. :class:`LagMonitor` sleeps :data:`SAMPLE_INTERVAL_S` (10 ms) in a loop and
records the overshoot of each wake-up, in a fixed histogram (0.1 ms bins up to 1 s),
so memory stays constant however long the run.

Threshold (documented in docs/running.md): the lag *exceeds* when the p99 overshoot is
above :data:`P99_THRESHOLD_MS` (5 ms) or the worst one above :data:`MAX_THRESHOLD_MS`
(50 ms); the p99 criterion needs at least :data:`MIN_P99_SAMPLES` samples (one
second of sampling). Then the run warns in the terminal and run.json's ``loop_lag.exceeded`` is
true: timings of that scenario may be late by up to that much.

When: the monitor also keeps the late stretches themselves (each wake-up at least
:data:`LATE_KEEP_MS` late, as its due and wake-up times on the ``perf_counter_ns``
clock every stamp uses; the last :data:`LATE_KEPT` of them), so :meth:`LagMonitor.lag_at`
says how far behind the loop was at a given stamp: the sender writes it into each
record (``loop_lag_ms``, at the first content read), and a stream bunched while the
loop was that late is the client's doing, not a proxy's (tokrate.analysis.buffering).
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass
from typing import Final

import anyio

__all__ = [
    "LATE_KEEP_MS",
    "LATE_KEPT",
    "LATE_SLACK_NS",
    "MAX_THRESHOLD_MS",
    "MIN_P99_SAMPLES",
    "P99_THRESHOLD_MS",
    "SAMPLE_INTERVAL_S",
    "LagMonitor",
    "LagSummary",
    "merge",
]

SAMPLE_INTERVAL_S: Final = 0.010
P99_THRESHOLD_MS: Final = 5.0
MAX_THRESHOLD_MS: Final = 50.0
#: Samples (1 s of sampling) needed before the p99 criterion applies.
MIN_P99_SAMPLES: Final = 100
#: A wake-up at least this late (ms) is kept with its times for :meth:`LagMonitor.lag_at`
#: (smaller lateness explains no bunching worth a verdict: a buffered stream's hold is
#: 50 ms or more, or the whole answer within a couple of reads).
LATE_KEEP_MS: Final = 2.0
#: How many late stretches are kept (a bounded deque: 16 bytes of times each and a
#: tuple; a run lagging on every wake-up keeps the last ~2 minutes of them).
LATE_KEPT: Final = 8192
#: A stamp this long after a late stretch's end still falls in it: the stream's read
#: and the monitor's wake-up end the same stretch in either order (ns).
LATE_SLACK_NS: Final = 5_000_000
_BIN_MS: Final = 0.1
_N_BINS: Final = 10_000  # 0.1 ms x 10,000 = 1 s; slower wake-ups land in the last bin


@dataclass(frozen=True, slots=True)
class LagSummary:
    """Overshoot statistics in milliseconds over ``samples`` wake-ups (0 samples: 0.0)."""

    max_ms: float
    p99_ms: float
    samples: int

    @property
    def exceeded(self) -> bool:
        # Below MIN_P99_SAMPLES the "p99" is just the worst wake-up or two (a scenario
        # shorter than a second), so only the max criterion applies there.
        p99_bad = self.samples >= MIN_P99_SAMPLES and self.p99_ms > P99_THRESHOLD_MS
        return p99_bad or self.max_ms > MAX_THRESHOLD_MS

    def message(self) -> str:
        """One-line warning that ends with what to do."""
        return (
            f"event-loop lag p99 {self.p99_ms:.1f} ms, max {self.max_ms:.1f} ms (threshold"
            f" p99 {P99_THRESHOLD_MS:g} ms / max {MAX_THRESHOLD_MS:g} ms): timestamps may be"
            " late by that much; lower the concurrency per process or use --workers N"
        )


class LagMonitor:
    """Samples loop lag while :meth:`run` runs (cancel it to stop)."""

    def __init__(self, interval_s: float = SAMPLE_INTERVAL_S) -> None:
        self.interval_s = interval_s
        self._bins = [0] * _N_BINS
        self._samples = 0
        self._max_ms = 0.0
        #: (due_ns, woke_ns) of each wake-up at least LATE_KEEP_MS late, oldest first.
        self._late: deque[tuple[int, int]] = deque(maxlen=LATE_KEPT)
        #: When the pending sleep is due (None while the monitor is not sleeping).
        self._due_ns: int | None = None

    def add(self, lag_ms: float) -> None:
        """Record one overshoot (ms, clamped at 0)."""
        lag_ms = max(0.0, lag_ms)
        self._samples += 1
        self._max_ms = max(self._max_ms, lag_ms)
        self._bins[min(_N_BINS - 1, int(lag_ms / _BIN_MS))] += 1

    def add_late(self, due_ns: int, woke_ns: int) -> None:
        """Record one wake-up (due and actual, ``perf_counter_ns``): its lateness, and
        its times when it was at least :data:`LATE_KEEP_MS` late."""
        lag_ms = (woke_ns - due_ns) / 1e6
        self.add(lag_ms)
        if lag_ms >= LATE_KEEP_MS:
            self._late.append((due_ns, woke_ns))

    async def run(self) -> None:
        interval_ns = int(self.interval_s * 1e9)
        try:
            while True:
                self._due_ns = time.perf_counter_ns() + interval_ns
                await anyio.sleep(self.interval_s)
                self.add_late(self._due_ns, time.perf_counter_ns())
        finally:
            self._due_ns = None

    def lag_at(self, stamp_ns: int, now_ns: int | None = None) -> float:
        """How far behind the loop was at ``stamp_ns`` (ms; 0.0 when it was on time):
        the lateness of the late stretch (a wake-up's due time to its actual wake-up)
        that holds the stamp, up to :data:`LATE_SLACK_NS` after its end; while the
        pending wake-up is overdue at ``now_ns`` (default: now), the stretch so far.
        A stamp older than the kept stretches reads 0.0."""
        now_ns = time.perf_counter_ns() if now_ns is None else now_ns
        worst = 0.0
        due = self._due_ns
        if due is not None and due <= stamp_ns and now_ns - due >= LATE_KEEP_MS * 1e6:
            worst = (now_ns - due) / 1e6
        for due_ns, woke_ns in reversed(self._late):
            if woke_ns + LATE_SLACK_NS < stamp_ns:
                break  # older stretches end earlier still
            if due_ns <= stamp_ns:
                worst = max(worst, (woke_ns - due_ns) / 1e6)
        return worst

    def summary(self) -> LagSummary:
        """p99 is the upper edge of the bin holding the 99th percentile sample."""
        if self._samples == 0:
            return LagSummary(0.0, 0.0, 0)
        rank = 0.99 * self._samples
        seen = 0
        p99 = self._max_ms
        for i, count in enumerate(self._bins):
            seen += count
            if seen >= rank:
                p99 = min(self._max_ms, (i + 1) * _BIN_MS)
                break
        return LagSummary(max_ms=self._max_ms, p99_ms=p99, samples=self._samples)


def merge(summaries: list[LagSummary]) -> LagSummary:
    """Combine per-worker summaries conservatively (worst p99, worst max)."""
    if not summaries:
        return LagSummary(0.0, 0.0, 0)
    return LagSummary(
        max_ms=max(s.max_ms for s in summaries),
        p99_ms=max(s.p99_ms for s in summaries),
        samples=sum(s.samples for s in summaries),
    )
