"""Benchmark (issue 18): kernel vs user-space receive stamps in the same run.

One event loop (uvloop), N aligned streams against ``tokrate sim`` in its own process
(fixed TTFT 200 ms / ITL 20 ms, 64 tokens, every stream started at once so tokens
arrive in bursts across all streams): alternate streams use a fast client with kernel
stamps (``kernel_stamps="on"``) and one with user stamps (``"off"``), so both see the
same loop. Lag = client stamp - the simulator's write time of the same token (truth
log, same CLOCK_MONOTONIC), ms. Then CPU per token (user + sys of this process over
the streaming, preconnected, start-up objects frozen out of the collector's sight as the
engine does) at 20 ms ITL for each mode alone, at 64 and 256 tokens per
request, and the marginal cost of one more token (the slope); "tokens per read" is
content chunks / distinct stamps (chunks of one read share its stamp), so 1.0 means
one token per read.

    python benchmarks/kernel_stamps.py [--streams 256,1000] [--cpu-streams 256] [--cpu-repeat 3]
        [--cpu-modes kernel,user]

``--cpu-repeat N`` runs each CPU measurement N times and keeps the least CPU per token
(what a run costs with the least disturbance from other processes on the machine).
``--streams ""`` leaves the lag table out; ``--cpu-modes kernel`` measures only the
kernel stamps' CPU (the default client's, issue 42's marginal figure). The tokrate
measured is the one imported: ``PYTHONPATH=WORKTREE`` measures another commit's
client with this script (its commit is printed).
"""

from __future__ import annotations

import argparse
import gc
import os
import resource
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

import anyio
import uvloop
from _client_common import Sim, lags_ms, request, stats

import tokrate
from tokrate.client.factory import open_client
from tokrate.load.worker.looplag import LagMonitor
from tokrate.spec.types import TimeoutsSpec

TIMEOUTS = TimeoutsSpec(connect_s=30, first_byte_s=120, idle_s=60, total_s=600)


def _cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


async def _mixed(base_url: str, streams: int, tokens: int, modes: tuple[str, ...]) -> Any:
    req = request(base_url, tokens)
    share = {m: (streams + len(modes) - 1 - i) // len(modes) for i, m in enumerate(modes)}
    clients = {
        m: open_client("fast", pool_size=max(1, n), timeouts=TIMEOUTS, kernel_stamps=m)
        for m, n in share.items()
    }
    for m, n in share.items():
        await clients[m].preconnect(f"{base_url}/models", n)
    out: dict[str, list[Any]] = {m: [] for m in modes}
    monitor = LagMonitor()

    async def one(mode: str) -> None:
        out[mode].append(await clients[mode].stream(req))

    # As the engine does before its window (tokrate.load.worker.engine.run_worker): collect once
    # and freeze what survives, so a collection during the streaming walks only what
    # the streaming makes (else a full one walks an earlier load's objects too).
    gc.collect()
    gc.freeze()
    cpu0 = _cpu()
    async with anyio.create_task_group() as outer:
        outer.start_soon(monitor.run)
        async with anyio.create_task_group() as tg:
            for i in range(streams):
                tg.start_soon(one, modes[i % len(modes)])
        outer.cancel_scope.cancel()
    cpu = _cpu() - cpu0
    for c in clients.values():
        await c.aclose()
    return out, cpu, monitor.summary()


def _stamps(results: list[Any]) -> Any:
    """What lags_ms reads of a load: (response id, chunk stamps) per ok request."""
    return SimpleNamespace(stamps=[(r.response_id or "", r.chunk_ns) for r in results if r.ok])


def accuracy(streams: int, tokens: int) -> None:
    sim = Sim(ttft_ms=200, itl_ms=20, tokens=tokens)
    try:
        out, _cpu_s, lag = uvloop.run(_mixed(sim.base_url, streams, tokens, ("on", "off")))
        truth = sim.truth()
    finally:
        sim.close()
    for mode, name in (("on", "kernel"), ("off", "user")):
        results = out[mode]
        ok = sum(r.ok for r in results)
        sources = sorted({r.stamp_source for r in results})
        first, last = lags_ms(_stamps(results), truth)
        print(
            f"| {streams} | {name} ({'/'.join(sources)}) | {ok}/{len(results)} | "
            f"{stats(first)} | {stats(last)} | {lag.p99_ms:.1f} / {lag.max_ms:.0f} |",
            flush=True,
        )


def _cpu_run(mode: str, streams: int, tokens: int) -> tuple[float, int, int, float]:
    """(CPU s, tokens, reads, loop lag p99 ms) of one 20 ms-ITL run in ``mode``."""
    sim = Sim(ttft_ms=50, itl_ms=20, tokens=tokens)
    try:
        out, cpu_s, lag = uvloop.run(_mixed(sim.base_url, streams, tokens, (mode,)))
    finally:
        sim.close()
    got = sum(len(r.chunk_ns) for r in out[mode])
    reads = sum(len(set(r.chunk_ns)) for r in out[mode])
    return cpu_s, got, reads, lag.p99_ms


def _least(mode: str, streams: int, tokens: int, repeat: int) -> tuple[float, int, int, float]:
    """The run with the least CPU per token of ``repeat`` (other processes on the
    machine only ever add to a run's CPU)."""
    runs = [_cpu_run(mode, streams, tokens) for _ in range(repeat)]
    return min(runs, key=lambda r: r[0] / max(1, r[1]))


def cpu_per_token(
    streams: int, tokens: int, repeat: int = 1, modes: tuple[str, ...] = ("kernel", "user")
) -> None:
    """Per mode: CPU per token at ``tokens`` and at 4x as many; "marginal" is the slope
    between the two (what one more token costs, per-request work excluded)."""
    for mode, name in (("on", "kernel"), ("off", "user")):
        if name not in modes:
            continue
        cpu1, got1, reads1, lag1 = _least(mode, streams, tokens, repeat)
        cpu2, got2, reads2, lag2 = _least(mode, streams, 4 * tokens, repeat)
        marginal = (cpu2 - cpu1) / max(1, got2 - got1) * 1e6
        print(
            f"| {name} | {streams} | 20 | {got1} / {got2} | "
            f"{got1 / max(1, reads1):.2f} / {got2 / max(1, reads2):.2f} | "
            f"{cpu1 / max(1, got1) * 1e6:.1f} / {cpu2 / max(1, got2) * 1e6:.1f} | "
            f"{marginal:.1f} | {lag1:.1f} / {lag2:.1f} |",
            flush=True,
        )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--streams", default="256,1000")
    ap.add_argument("--cpu-streams", type=int, default=256)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument(
        "--cpu-repeat",
        type=int,
        default=1,
        help="CPU runs per mode and size; the least CPU per token is kept",
    )
    ap.add_argument("--cpu-modes", default="kernel,user", help="kernel, user or both")
    a = ap.parse_args()
    # The commit of the tokrate measured: the one imported (PYTHONPATH may point at
    # another checkout, a worktree of the commit before a change).
    commit = subprocess.run(
        ["git", "-C", str(Path(tokrate.__file__).parent), "rev-parse", "--short", "HEAD"],
        capture_output=True,
        text=True,
    ).stdout.strip()
    print(
        f"commit {commit}, load average {os.getloadavg()[0]:.2f} at start,"
        f" {time.strftime('%Y-%m-%d %H:%M')}"
    )
    print()
    print(
        "| streams | stamps | ok | first-token lag ms mean/p50/p99 "
        "| last-token lag ms mean/p50/p99 | loop lag p99/max ms |"
    )
    print("|---|---|---|---|---|---|")
    for n in (int(s) for s in a.streams.split(",") if s.strip()):
        accuracy(n, a.tokens)
    print()
    print(
        "| stamps | streams | ITL ms | tokens | tokens per read | CPU µs / token "
        "| marginal µs / token | loop lag p99 ms |"
    )
    print("|---|---|---|---|---|---|---|---|")
    cpu_per_token(a.cpu_streams, a.tokens, a.cpu_repeat, tuple(a.cpu_modes.split(",")))
    print(f"\nload average {os.getloadavg()[0]:.2f} at end")


if __name__ == "__main__":
    main()
