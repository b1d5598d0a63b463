"""Shared pieces of the client benchmarks (run by hand; not tests).

The simulator always runs in a SEPARATE process (``tokrate.sim.server.spawn_simulator``) so client
and server never share an event loop; its truth log gives the server's write time of
every content chunk on the same CLOCK_MONOTONIC the client stamps with.
"""

from __future__ import annotations

import contextlib
import os
import resource
import statistics
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import orjson

from tokrate.client.factory import open_client
from tokrate.client.result import StreamResult
from tokrate.load.calibrate import sim_request
from tokrate.sim.model import Tier
from tokrate.sim.server import SimConfig, spawn_simulator
from tokrate.spec.types import TimeoutsSpec

KINDS = ("fast", "httpx", "openai", "naive")


class Sim:
    """``tokrate sim`` with one fixed-timing tier, in its own process (the library's
    :func:`tokrate.sim.server.spawn_simulator`), with a truth log."""

    def __init__(self, *, ttft_ms: float, itl_ms: float, tokens: int) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="tokrate-bench-"))
        self.truth_path = self.dir / "truth.jsonl"
        tier = Tier(
            "fixed",
            7.0,
            7.0,
            fixed_ttft_ms=ttft_ms,
            fixed_itl_ms=itl_ms,
            output_tokens_min=tokens,
            output_tokens_max=tokens,
        )
        self._stack = contextlib.ExitStack()
        config = SimConfig(tiers=(tier,), truth_log=str(self.truth_path))
        self.base_url, self.pid = self._stack.enter_context(spawn_simulator(config))

    def truth(self) -> dict[str, dict[str, Any]]:
        time.sleep(0.2)  # the sim flushes a line per finished request
        out = {}
        for line in self.truth_path.read_bytes().splitlines():
            obj = orjson.loads(line)
            out[obj["id"]] = obj
        return out

    def close(self) -> None:
        self._stack.close()


def request(base_url: str, tokens: int) -> Any:
    """The benchmarks' request: the calibration's, to the "fixed" tier."""
    return sim_request(base_url, tokens, model="fixed")


@dataclass
class LoadResult:
    kind: str
    streams: int
    wall_s: float
    cpu_s: float
    tokens: int
    errors: int
    peak_rss_mb: float
    rss_per_stream_kb: float
    #: (response_id, chunk stamps ns) per ok request
    stamps: list[tuple[str, Sequence[int]]]
    ttft_s: list[float]
    #: the engine's event-loop lag monitor over the run (tokrate.load.worker.looplag)
    lag_p99_ms: float = 0.0
    lag_max_ms: float = 0.0
    lag_warned: bool = False


def _rss_kb() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * (os.sysconf("SC_PAGE_SIZE") // 1024)


def _cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


async def _load(kind: str, base_url: str, streams: int, per_stream: int, tokens: int) -> LoadResult:
    req = request(base_url, tokens)
    t = TimeoutsSpec(connect_s=30, first_byte_s=120, idle_s=60, total_s=600)
    if kind == "naive":
        from naive_openai import naive_client, naive_stream

        client: Any = naive_client(base_url)
    else:
        client = open_client(kind, pool_size=streams, timeouts=t)
    results: list[Any] = []
    rss0 = _rss_kb()
    rss_max = rss0

    async def sampler() -> None:
        nonlocal rss_max
        while True:
            rss_max = max(rss_max, _rss_kb())
            await anyio.sleep(0.05)

    async def worker() -> None:
        for _ in range(per_stream):
            if kind == "naive":
                results.append(await naive_stream(client, "fixed", tokens))
            else:
                results.append(await client.stream(req))

    from tokrate.load.worker.looplag import LagMonitor

    monitor = LagMonitor()
    cpu0, wall0 = _cpu(), time.perf_counter()
    async with anyio.create_task_group() as outer:
        outer.start_soon(sampler)
        outer.start_soon(monitor.run)
        async with anyio.create_task_group() as tg:
            for _ in range(streams):
                tg.start_soon(worker)
        outer.cancel_scope.cancel()
    cpu, wall = _cpu() - cpu0, time.perf_counter() - wall0
    await client.aclose() if kind != "naive" else await client.close()
    stamps, ttft, tokens_total, errors = [], [], 0, 0
    for r in results:
        if isinstance(r, StreamResult):
            if r.error_class is not None:
                errors += 1
                continue
            stamps.append((r.response_id or "", r.chunk_ns))
            ttft.append((r.chunk_ns[0] - r.t0_ns) / 1e9)
            tokens_total += r.usage["completion_tokens"] if r.usage else len(r.chunk_ns)
        else:  # naive: a dict
            if r["error"]:
                errors += 1
                continue
            stamps.append((r["id"], r["chunk_ns"]))
            ttft.append((r["chunk_ns"][0] - r["t0_ns"]) / 1e9)
            tokens_total += len(r["chunk_ns"])
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    lag = monitor.summary()
    return LoadResult(
        kind,
        streams,
        wall,
        cpu,
        tokens_total,
        errors,
        peak,
        (rss_max - rss0) / streams,
        stamps,
        ttft,
        lag.p99_ms,
        lag.max_ms,
        lag.exceeded,
    )


def run_load(kind: str, base_url: str, streams: int, per_stream: int, tokens: int) -> LoadResult:
    """Closed loop: ``streams`` concurrent streams, each ``per_stream`` requests, on
    uvloop (what ``tokrate run`` uses)."""
    import uvloop

    return uvloop.run(_load(kind, base_url, streams, per_stream, tokens))


def lags_ms(load: LoadResult, truth: dict[str, dict[str, Any]]) -> tuple[list[float], list[float]]:
    """First- and last-token lag (client stamp - sim write) in ms per request."""
    first, last = [], []
    for rid, chunks in load.stamps:
        t = truth.get(rid)
        if t is None or not chunks or len(t["content_write_ns"]) != len(chunks):
            continue
        first.append((chunks[0] - t["content_write_ns"][0]) / 1e6)
        last.append((chunks[-1] - t["content_write_ns"][-1]) / 1e6)
    return first, last


def stats(xs: Sequence[float]) -> str:
    if not xs:
        return "n/a"
    s = sorted(xs)
    p99 = s[min(len(s) - 1, int(0.99 * len(s)))]
    return f"{statistics.fmean(s):.2f} / {statistics.median(s):.2f} / {p99:.2f}"
