"""The event-loop lag monitor: histogram maths and a real blocked loop."""

from __future__ import annotations

import time

import anyio

from tokrate.load.worker.looplag import (
    LATE_SLACK_NS,
    MAX_THRESHOLD_MS,
    P99_THRESHOLD_MS,
    LagMonitor,
    LagSummary,
    merge,
)


def test_summary_percentile_and_threshold() -> None:
    mon = LagMonitor()
    for _ in range(990):
        mon.add(0.25)
    for _ in range(10):
        mon.add(30.0)
    s = mon.summary()
    assert s.samples == 1000 and s.max_ms == 30.0
    assert s.p99_ms <= 0.3 + 1e-9  # the 99th percentile sits in the 0.2-0.3 ms bin
    assert not s.exceeded
    mon.add(MAX_THRESHOLD_MS + 1)
    assert mon.summary().exceeded
    assert LagSummary(1.0, P99_THRESHOLD_MS + 0.1, 100).exceeded
    assert not LagSummary(1.0, P99_THRESHOLD_MS + 0.1, 99).exceeded  # too few for a p99
    assert "--workers" in LagSummary(1.0, 9.0, 10).message()


def test_empty_and_merge() -> None:
    assert LagMonitor().summary() == LagSummary(0.0, 0.0, 0)
    merged = merge([LagSummary(3.0, 1.0, 5), LagSummary(1.0, 2.0, 7)])
    assert merged == LagSummary(3.0, 2.0, 12)


def test_detects_a_blocked_loop() -> None:
    mon = LagMonitor()

    async def main() -> None:
        async with anyio.create_task_group() as tg:
            tg.start_soon(mon.run)
            await anyio.sleep(0.05)
            time.sleep(0.12)  # noqa: ASYNC251 -- the point: a callback hogging the loop 120 ms
            await anyio.sleep(0.05)
            tg.cancel_scope.cancel()

    anyio.run(main)
    s = mon.summary()
    assert s.max_ms >= 100.0 and s.exceeded


def test_lag_at_finds_the_late_stretch_that_holds_a_stamp() -> None:
    """A wake-up due at 100 ms that came at 300 ms: a stamp inside that stretch (or
    just after it: the read and the wake-up end it in either order) reads 200 ms; one
    before it, or well after it, reads 0.0; while the pending wake-up is overdue, a
    stamp since its due time reads the lateness so far."""
    ms = 1_000_000
    mon = LagMonitor()
    mon.add_late(100 * ms, 300 * ms)
    mon.add_late(310 * ms, 311 * ms)  # on time within LATE_KEEP_MS: not kept
    assert mon.lag_at(150 * ms, now_ns=400 * ms) == 200.0
    assert mon.lag_at(300 * ms + LATE_SLACK_NS, now_ns=400 * ms) == 200.0
    assert mon.lag_at(90 * ms, now_ns=400 * ms) == 0.0
    assert mon.lag_at(320 * ms, now_ns=400 * ms) == 0.0
    mon._due_ns = 500 * ms  # the monitor asleep, due at 500 ms
    assert mon.lag_at(520 * ms, now_ns=560 * ms) == 60.0
    assert mon.lag_at(490 * ms, now_ns=560 * ms) == 0.0
    assert mon.summary().max_ms == 200.0  # the kept stretches count in the summary too


def test_lag_at_sees_a_really_blocked_loop() -> None:
    """A callback hogs the loop 120 ms: a stamp taken inside the hog reads the block
    (the monitor's wake-up was due at most 10 ms after the hog began and came after it
    ended: at least 110 ms late), and a stamp after the hog never reads the hog's
    lateness. A busy machine may make later wake-ups late too (5.5 ms, 0.5 ms before
    the end, at load 4 on 2 cores), so the later stamp is judged against the stretches
    the monitor itself kept, not against 0.0."""
    mon = LagMonitor()
    inside: list[int] = []

    async def main() -> None:
        async with anyio.create_task_group() as tg:
            tg.start_soon(mon.run)
            await anyio.sleep(0.05)
            time.sleep(0.06)  # noqa: ASYNC251 -- the client's loop busy, on purpose
            inside.append(time.perf_counter_ns())
            time.sleep(0.06)  # noqa: ASYNC251
            await anyio.sleep(0.05)
            tg.cancel_scope.cancel()

    anyio.run(main)
    hog = mon.lag_at(inside[0])
    assert hog >= 110.0
    after = time.perf_counter_ns()
    holding = [
        (woke - due) / 1e6 for due, woke in mon._late if due <= after <= woke + LATE_SLACK_NS
    ]
    assert hog not in holding  # the hog ended more than LATE_SLACK_NS before `after`
    assert mon.lag_at(after) == max(holding, default=0.0)
