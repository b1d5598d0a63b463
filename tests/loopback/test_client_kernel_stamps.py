"""Kernel receive stamps (tokrate.client.kernel_stamps) on the real simulator, in its
own process, judged against its truth log (the server's write time of every content
chunk on the same CLOCK_MONOTONIC the client stamps with)."""

from __future__ import annotations

import asyncio
import socket
import statistics
import sys
from collections.abc import Iterator
from pathlib import Path
from time import perf_counter, perf_counter_ns, time_ns
from typing import Any

import orjson
import pytest
import uvloop
from helpers.requests import record, request

from tokrate.client.connection import Connection
from tokrate.client.factory import open_client
from tokrate.client.kernel_stamps import (
    STEP_BOUND_NS,
    ClockBridge,
    kernel_stamps_supported,
    open_kernel_connection,
)
from tokrate.client.result import StreamResult
from tokrate.sim.model import Tier
from tokrate.sim.server import SimConfig, simulator_process
from tokrate.spec.types import TimeoutsSpec

pytestmark = pytest.mark.skipif(
    kernel_stamps_supported() is not None, reason=str(kernel_stamps_supported())
)

#: ITL 30 ms: longer than the 20 ms the blocked-loop test holds the loop, so at most one
#: token of a stream waits in its socket buffer during a block (bytes read together
#: share the kernel stamp of the newest of them; see the module docstring).
TIER = Tier(
    name="fixed",
    params_b=7.0,
    active_params_b=7.0,
    fixed_ttft_ms=60.0,
    fixed_itl_ms=30.0,
    output_tokens_min=12,
    output_tokens_max=12,
)


@pytest.fixture
def sim(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    truth = tmp_path / "truth.jsonl"
    with simulator_process(SimConfig(tiers=(TIER,), time_scale=1.0, truth_log=str(truth))) as url:
        yield url, truth


def _truth(path: Path) -> dict[str, list[int]]:
    out = {}
    for line in path.read_bytes().splitlines():
        obj = orjson.loads(line)
        out[obj["id"]] = obj["content_write_ns"]
    return out


def _stream_all(
    base: str, streams: dict[str, int], *, block: bool = False
) -> dict[str, list[StreamResult]]:
    """``streams[mode]`` concurrent streams per kernel_stamps mode, all in one loop;
    ``block``: hold the loop with 20 ms of busy work every 50 ms meanwhile."""
    req = request(base, "fixed", ignore_eos=True, max_tokens=12)

    async def blocker() -> None:
        while True:
            await asyncio.sleep(0.03)
            end = perf_counter() + 0.02
            while perf_counter() < end:
                pass

    async def main() -> dict[str, list[StreamResult]]:
        clients = {
            m: open_client("fast", pool_size=n, timeouts=TimeoutsSpec(), kernel_stamps=m)
            for m, n in streams.items()
        }
        try:
            for m, n in streams.items():  # warm connections: no handshake in the timing
                await clients[m].preconnect(f"{base}/models", n)
            spin = asyncio.ensure_future(blocker()) if block else None
            per_mode = await asyncio.gather(
                *(
                    asyncio.gather(*(clients[m].stream(req) for _ in range(n)))
                    for m, n in streams.items()
                )
            )
            out = dict(zip(streams, per_mode, strict=True))
            if spin is not None:
                spin.cancel()
            return {m: list(v) for m, v in out.items()}
        finally:
            for c in clients.values():
                await c.aclose()

    return uvloop.run(main())


def _itl_errors_ms(results: list[StreamResult], truth: dict[str, list[int]]) -> list[float]:
    """|client gap - server write gap| in ms, every inter-token gap of every stream."""
    out = []
    for r in results:
        writes = truth[r.response_id or ""]
        assert r.ok and len(writes) == len(r.chunk_ns) == 12, r.error_message
        for i in range(1, 12):
            client_gap = r.chunk_ns[i] - r.chunk_ns[i - 1]
            server_gap = writes[i] - writes[i - 1]
            out.append(abs(client_gap - server_gap) / 1e6)
    return out


def _p99(xs: list[float]) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(0.99 * len(s)))]


def test_kernel_stamps_are_taken_and_recorded(sim: tuple[str, Path]) -> None:
    base, truth_path = sim
    results = _stream_all(base, {"auto": 2, "off": 2})
    truth = _truth(truth_path)
    for mode, want in (("auto", "kernel"), ("off", "user")):
        for r in results[mode]:
            assert r.stamp_source == want
            assert record(r).stamp_source == want
            # Same CLOCK_MONOTONIC on both sides: a receive can never precede the write.
            lags = [
                got - wrote
                for got, wrote in zip(r.chunk_ns, truth[r.response_id or ""], strict=True)
            ]
            assert min(lags) >= 0, (mode, min(lags))


def test_httpx_and_sdk_paths_say_user_stamps(sim: tuple[str, Path]) -> None:
    base, _ = sim
    req = request(base, "fixed", ignore_eos=True, max_tokens=12)

    async def main(kind: str) -> tuple[StreamResult, list[str]]:
        client = open_client(kind, pool_size=1, timeouts=TimeoutsSpec(), kernel_stamps="on")
        try:
            return await client.stream(req), list(client.notices)
        finally:
            await client.aclose()

    for kind in ("httpx", "openai"):
        res, notices = uvloop.run(main(kind))
        assert res.ok and res.stamp_source == "user"
        assert len(notices) == 1 and "user space" in notices[0], notices


def _idle_read_delays_ms(base: str, monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """Per read: user stamp (taken where data_received takes it) - kernel stamp."""
    delays: list[float] = []
    original = Connection.stamped_read

    def observed(self: Connection, data: bytes, now: int, kernel: bool) -> None:
        user = perf_counter_ns()
        if kernel:
            delays.append((user - now) / 1e6)
        original(self, data, now, kernel)

    with monkeypatch.context() as m:
        m.setattr(Connection, "stamped_read", observed)
        for _ in range(3):  # one stream at a time: nothing else for the loop to do
            results = _stream_all(base, {"on": 1})
            assert all(r.ok and r.stamp_source == "kernel" for r in results["on"])
    return delays


def _run_queue_wait_ms() -> float:
    """How long this thread has waited for a CPU, runnable but not running (ms): the
    kernel's own count (/proc/thread-self/schedstat, second field)."""
    return int(Path("/proc/thread-self/schedstat").read_text().split()[1]) / 1e6


def test_kernel_and_user_stamps_agree_on_an_idle_loop(
    sim: tuple[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """On an idle loop the user stamp follows the kernel's by the wake-up path only
    (median < 0.25 ms, p90 < 1 ms). On a shared machine the thread also waits for a CPU
    between the kernel's stamp and its own now and then (seen at 4 ms, at a load of 3
    the p90 reached 2 ms): that is the scheduler's delay, not the loop's, and the kernel
    counts it. So a run is judged by the bounds when its thread waited less than 1 ms
    for a CPU in all; otherwise every millisecond of delay past 0.25 ms must be covered
    by the time the thread waited (the physical bound), up to three runs."""
    base, _ = sim
    for _attempt in (1, 2, 3):
        waited = _run_queue_wait_ms()
        delays = _idle_read_delays_ms(base, monkeypatch)
        waited = _run_queue_wait_ms() - waited
        ordered = sorted(delays)
        if statistics.median(ordered) < 0.25 and ordered[int(0.9 * len(ordered))] < 1.0:
            break
    assert len(delays) >= 36
    assert min(delays) >= 0  # the kernel stamp never comes after the read
    if waited < 1.0:
        assert statistics.median(ordered) < 0.25, ordered[-5:]
        assert ordered[int(0.9 * len(ordered))] < 1.0, ordered[-5:]
        assert ordered[-1] < 1.0, ordered[-5:]
    else:
        excess = sum(max(0.0, d - 0.25) for d in delays)
        assert excess <= waited + 1.0, (excess, waited, ordered[-5:])


def _blocked_run(base: str, truth_path: Path) -> tuple[list[float], list[float]]:
    results = _stream_all(base, {"on": 4, "off": 4}, block=True)
    truth = _truth(truth_path)
    assert all(r.stamp_source == "kernel" for r in results["on"])
    return _itl_errors_ms(results["on"], truth), _itl_errors_ms(results["off"], truth)


def _blocked_claims_hold(kernel: list[float], user: list[float]) -> bool:
    return (
        _p99(kernel) <= 1.0
        and statistics.median(kernel) <= 0.2
        and _p99(user) > 5.0
        and sum(e > 1.0 for e in user) >= len(user) // 10
    )


def test_kernel_stamps_stay_exact_while_the_loop_is_blocked(sim: tuple[str, Path]) -> None:
    base, truth_path = sim
    # Outside load can spoil a run either way: the simulator waiting for a core writes
    # two tokens close together (they merge in the socket buffer and share the newer
    # one's stamp), or falls into step with the blocks so that no token lands inside
    # one. Up to three runs (as tests/loopback/test_run_connect.py does; the bounds stay).
    for _attempt in (1, 2, 3):
        kernel, user = _blocked_run(base, truth_path)
        if _blocked_claims_hold(kernel, user):
            break
    assert _p99(kernel) <= 1.0, sorted(kernel)[-5:]
    assert statistics.median(kernel) <= 0.2
    # The same blocks, the same loop: user stamps carry them (up to 20 ms per gap).
    assert _p99(user) > 5.0, sorted(user)[-5:]
    assert sum(e > 1.0 for e in user) >= len(user) // 10


def test_a_clock_step_is_noticed_once_and_stamps_stay_in_the_past() -> None:
    notices: list[str] = []
    bridge = ClockBridge(notices)
    good = bridge.offset_ns
    bridge.offset_ns += 50_000_000  # as if CLOCK_REALTIME had stepped back by 50 ms
    read = perf_counter_ns()
    stamp = bridge.to_perf_ns(time_ns(), read)
    assert stamp <= read  # never a stamp from the future
    assert abs(bridge.offset_ns - good) < STEP_BOUND_NS  # re-based
    assert len(notices) == 1 and "stepped by -50" in notices[0], notices
    bridge.offset_ns += 50_000_000
    bridge.to_perf_ns(time_ns(), perf_counter_ns())
    assert len(notices) == 1  # said once


def test_a_slewing_clock_over_a_quiet_gap_is_not_a_step() -> None:
    """A virtual machine's wall clock was seen gaining ~5 ms/s on the monotonic one for
    minutes: after 10 s without reads (between scenarios) the offset has moved 5 ms, a
    slew, not a step; 50 ms after one second is a step."""
    notices: list[str] = []
    bridge = ClockBridge(notices)
    bridge.sampled_ns -= 10_000_000_000
    bridge.offset_ns += 5_000_000
    bridge.resample()
    assert notices == []
    bridge.sampled_ns -= 1_000_000_000
    bridge.offset_ns += 50_000_000
    bridge.resample()
    assert len(notices) == 1 and "stepped by -50" in notices[0], notices


def test_a_backward_step_never_puts_a_stamp_before_its_request() -> None:
    """CLOCK_REALTIME stepped back by 50 ms since the last sample: the kernel's stamps
    convert to 50 ms earlier than they were. The bound is the connection's last write
    (no answer arrives before its request), found by re-sampling first."""
    notices: list[str] = []
    bridge = ClockBridge(notices)
    bridge.offset_ns -= 50_000_000
    written = perf_counter_ns()
    read = perf_counter_ns()
    stamp = bridge.to_perf_ns(time_ns(), read, written)
    assert written <= stamp <= read
    assert len(notices) == 1 and "stepped by +50" in notices[0], notices


class _SendStamps:
    """A StampedProtocol that keeps each send stamp it is given."""

    def __init__(self) -> None:
        self.sent: list[tuple[int, bool]] = []

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        pass

    def stamped_read(self, data: bytes, now_ns: int, kernel: bool) -> None:
        pass

    def stamped_send(self, sent_ns: int, kernel: bool) -> None:
        self.sent.append((sent_ns, kernel))

    def eof_received(self) -> bool | None:
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        pass


def test_a_backward_step_never_puts_a_send_stamp_before_its_write() -> None:
    """CLOCK_REALTIME stepped back by 162.6 ms since the last sample, just before a
    request is written: its kernel transmit stamp converts to 162.6 ms before the
    write, and no later read bounds a send. Bounded by the write it is re-based, so
    t0 stays between the write and the stamp's reading (issue 42: five requests of one
    wave were once 162.6 ms over the kernel paths' bound, all alike)."""

    async def main() -> tuple[int, int, list[tuple[int, bool]], list[str]]:
        # A listening socket the kernel completes the handshake for (its backlog): no
        # server code, nothing on the loop but the connection under test.
        server = socket.create_server(("127.0.0.1", 0))
        port = server.getsockname()[1]
        notices: list[str] = []
        bridge = ClockBridge(notices)
        protocol = _SendStamps()
        transport, _ = await open_kernel_connection(
            lambda: protocol, "127.0.0.1", port, bridge=bridge
        )
        try:
            bridge.offset_ns -= 162_600_000
            written = perf_counter_ns()
            transport.write(b"POST / HTTP/1.1\r\n\r\n")
            for _ in range(1000):  # loopback queues the stamp within the write itself
                if any(kernel for _ns, kernel in protocol.sent):
                    break
                transport.poll_sent()
                await asyncio.sleep(0)
            return written, perf_counter_ns(), protocol.sent, notices
        finally:
            transport.abort()
            await asyncio.sleep(0)  # the transport's close runs in a loop callback
            server.close()

    written, after, sent, notices = uvloop.run(main())
    kernel = [ns for ns, kernel in sent if kernel]
    if not kernel:
        pytest.skip("this kernel gave no software transmit stamp")
    assert written <= kernel[-1] <= after, (written - kernel[-1], after - kernel[-1])
    assert len(notices) == 1 and "stepped by +162" in notices[0], notices


@pytest.mark.parametrize("skew_s", [0.5, -0.5])
def test_a_wrong_wall_clock_keeps_every_record(
    sim: tuple[str, Path], monkeypatch: pytest.MonkeyPatch, skew_s: float
) -> None:
    """Python's wall clock read 0.5 s off the kernel's (as a clock step between two
    samples does, and as tests/cluster's skewed node showed: the worker died with
    'chunk_offsets_s must be non-negative' in an ExceptionGroup). Every re-sample gives
    the same wrong offset, so only the bounds hold the stamps: within [write, read],
    every record built, offsets from t0 non-negative and in order."""
    import tokrate.client.kernel_stamps as ks

    skew_ns = int(skew_s * 1e9)
    monkeypatch.setattr(ks, "time_ns", lambda: time_ns() + skew_ns)
    results = _stream_all(sim[0], {"on": 3})["on"]
    for r in results:
        assert r.ok and r.stamp_source == "kernel", r.error_message
        rec = record(r)
        assert rec.chunk_offsets_s is not None and len(rec.chunk_offsets_s) == 12
        assert rec.chunk_offsets_s[0] >= 0


def test_unsupported_platform_falls_back_with_one_notice(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "platform", "darwin")
    client: Any = open_client("fast", pool_size=1, timeouts=TimeoutsSpec(), kernel_stamps="auto")
    assert client.notices == [
        "kernel receive stamps need Linux (this is darwin): stamps are taken in user space"
        " (stamp_source 'user')"
    ]
