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
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Final

import anyio

__all__ = [
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

    def add(self, lag_ms: float) -> None:
        """Record one overshoot (ms, clamped at 0)."""
        lag_ms = max(0.0, lag_ms)
        self._samples += 1
        self._max_ms = max(self._max_ms, lag_ms)
        self._bins[min(_N_BINS - 1, int(lag_ms / _BIN_MS))] += 1

    async def run(self) -> None:
        interval_ns = int(self.interval_s * 1e9)
        while True:
            before = time.perf_counter_ns()
            await anyio.sleep(self.interval_s)
            self.add((time.perf_counter_ns() - before - interval_ns) / 1e6)

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
