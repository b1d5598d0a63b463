"""The event-loop lag monitor: histogram maths and a real blocked loop."""

from __future__ import annotations

import time

import anyio

from tokrate.load.looplag import (
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
