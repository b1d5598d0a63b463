"""Benchmark (issue 42): is the event loop's dispatch what a token costs at 256 streams?

The fast client registers each kernel-stamped socket with the loop (``add_reader``), so
uvloop wakes per ``epoll_wait`` and dispatches one Python callback per ready socket.
This script measures the marginal CPU per token (as ``kernel_stamps.py --cpu-modes
kernel`` does: the slope between 64 and 256 tokens per request, 256 aligned streams,
TTFT 50 ms, ITL 20 ms, one token per read) with that dispatch replaced, in the same
process, the modes alternated and their order rotated every round on the same two
simulators (one per token count), so the machine's drift falls on every mode alike:

- ``loop``: the client as it is (one loop reader per socket);
- ``hub``: one ``select.epoll`` set holding the client's sockets, only its fd registered
  with the loop; when it is readable, every ready socket's read callback is called
  directly, and the set is asked again (``poll(0)``) while anything is ready, up to a
  1 ms budget: a burst across many sockets is read in one loop turn instead of one
  uvloop dispatch per socket and one loop iteration per ``epoll_wait``;
- ``hub+hold``: the same, and after a turn that read at least 8 sockets the hub leaves
  the loop for ``--hold-ms`` (a timer), so the next turn finds more sockets ready: far
  fewer wake-ups (sleeps) of the process, each read up to that much later (harmless to
  kernel stamps while the hold is shorter than the ITL).

Printed per run: marginal CPU µs per token (and its user / sys parts: the interpreter,
uvloop and libc / the kernel: syscalls, the ACKs and their loopback delivery), CPU µs
per token at 64 / 256 tokens, the
process's voluntary context switches per token at 256 (each one a sleep in
``epoll_wait``: the wake-ups), sockets read per hub turn; then each mode's mean.
The hub lives in this script only (it was tried for issue 42 and not kept: see
benchmarks/README.md); the sockets are moved into it after the connections are
opened and handed back to the loop before they are closed.

    python benchmarks/loop_wakeups.py [--rounds 6] [--modes loop,hub,hub+hold] [--hold-ms 5]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import resource
import select
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

import anyio
import uvloop
from _client_common import Sim, request

from tokrate.client.factory import open_client
from tokrate.client.kernel_stamps import KernelTransport
from tokrate.spec.types import TimeoutsSpec

TIMEOUTS = TimeoutsSpec(connect_s=30, first_byte_s=120, idle_s=60, total_s=600)
STREAMS = 256
#: How long one hub turn may read before the loop gets a turn (ns).
DRAIN_BUDGET_NS = 1_000_000
#: A turn that read at least this many sockets starts a hold (``hub+hold``).
HOLD_AFTER_READS = 8


class Hub:
    """The client's sockets in one epoll set, read in one loop turn (module docstring)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, hold_s: float | None) -> None:
        self.loop = loop
        self.hold_s = hold_s
        self.epoll = select.epoll()
        self.readers: dict[int, Callable[[], None]] = {}
        self.transports: dict[int, KernelTransport] = {}
        self.held: asyncio.TimerHandle | None = None
        self.turns = 0
        self.reads = 0
        loop.add_reader(self.epoll.fileno(), self.drain)

    def take(self, transport: KernelTransport) -> None:
        fd = transport.get_extra_info("socket").fileno()
        self.loop.remove_reader(fd)
        self.epoll.register(fd, select.EPOLLIN)
        self.readers[fd] = transport._on_readable
        self.transports[fd] = transport

    def give_back(self) -> None:
        """Every socket back to the loop (its transport's close removes it there)."""
        if self.held is not None:
            self.held.cancel()
        else:
            self.loop.remove_reader(self.epoll.fileno())
        for fd, transport in self.transports.items():
            if transport.is_closing():
                continue  # closed during the load (not expected against the simulator)
            self.epoll.unregister(fd)
            self.loop.add_reader(fd, transport._on_readable)
        self.readers.clear()
        self.transports.clear()
        self.epoll.close()

    def drain(self) -> None:
        poll = self.epoll.poll
        readers = self.readers
        deadline = time.perf_counter_ns() + DRAIN_BUDGET_NS
        self.turns += 1
        reads = 0
        events = poll(0, 256)
        while events:
            reads += len(events)
            for fd, _mask in events:
                callback = readers.get(fd)
                if callback is not None:
                    callback()
            if time.perf_counter_ns() >= deadline:
                break
            events = poll(0, 256)
        self.reads += reads
        if self.hold_s is not None and reads >= HOLD_AFTER_READS:
            self.loop.remove_reader(self.epoll.fileno())
            self.held = self.loop.call_later(self.hold_s, self.resume)

    def resume(self) -> None:
        self.held = None
        self.loop.add_reader(self.epoll.fileno(), self.drain)
        self.drain()


def _cpu() -> tuple[float, float]:
    """(user, sys) CPU seconds of this process."""
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime, ru.ru_stime


async def _load(base_url: str, tokens: int, mode: str, hold_s: float) -> dict[str, Any]:
    """One load of STREAMS aligned streams in ``mode``: CPU s, tokens, sleeps, hub turns."""
    req = request(base_url, tokens)
    client: Any = open_client("fast", pool_size=STREAMS, timeouts=TIMEOUTS, kernel_stamps="on")
    await client.preconnect(f"{base_url}/models", STREAMS)
    hub = None
    if mode != "loop":
        hub = Hub(asyncio.get_running_loop(), hold_s if mode == "hub+hold" else None)
        for conns in client._open.values():  # the pool's connections, all idle now
            for conn in conns:
                hub.take(conn.transport)
    results: list[Any] = []

    async def one() -> None:
        results.append(await client.stream(req))

    gc.collect()
    gc.freeze()  # as the engine does before its window (kernel_stamps.py)
    sleeps0 = resource.getrusage(resource.RUSAGE_SELF).ru_nvcsw
    cpu0 = _cpu()
    async with anyio.create_task_group() as tg:
        for _ in range(STREAMS):
            tg.start_soon(one)
    cpu1 = _cpu()
    sleeps = resource.getrusage(resource.RUSAGE_SELF).ru_nvcsw - sleeps0
    if hub is not None:
        hub.give_back()
    await client.aclose()
    got = sum(len(r.chunk_ns) for r in results if r.ok)
    return {
        "cpu_s": cpu1[0] - cpu0[0] + cpu1[1] - cpu0[1],
        "sys_s": cpu1[1] - cpu0[1],
        "tokens": got,
        "ok": sum(r.ok for r in results),
        "sleeps": sleeps,
        "reads": sum(len(set(r.chunk_ns)) for r in results),
        "per_turn": hub.reads / max(1, hub.turns) if hub is not None else None,
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--modes", default="loop,hub,hub+hold")
    ap.add_argument("--hold-ms", type=float, default=5.0)
    a = ap.parse_args()
    modes = a.modes.split(",")
    unknown = set(modes) - {"loop", "hub", "hub+hold"}
    if unknown:
        ap.error(f"--modes: unknown {', '.join(sorted(unknown))} (loop, hub, hub+hold)")
    print(f"load average {os.getloadavg()[0]:.2f} at start, {time.strftime('%Y-%m-%d %H:%M')}")
    print()
    print(
        "| round | mode | marginal µs / token | of it user / sys | CPU µs / token (64 / 256) "
        "| sleeps per token | sockets per hub turn | tokens per read | ok |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    sims = {t: Sim(ttft_ms=50, itl_ms=20, tokens=t) for t in (64, 256)}
    marginals: dict[str, list[float]] = {m: [] for m in modes}
    try:
        for r in range(a.rounds):
            for mode in modes[r % len(modes) :] + modes[: r % len(modes)]:
                small, large = (
                    uvloop.run(_load(sims[t].base_url, t, mode, a.hold_ms / 1e3)) for t in (64, 256)
                )
                marginal = (
                    (large["cpu_s"] - small["cpu_s"])
                    / max(1, large["tokens"] - small["tokens"])
                    * 1e6
                )
                marginal_sys = (
                    (large["sys_s"] - small["sys_s"])
                    / max(1, large["tokens"] - small["tokens"])
                    * 1e6
                )
                marginals[mode].append(marginal)
                per_turn = "-" if large["per_turn"] is None else f"{large['per_turn']:.1f}"
                print(
                    f"| {r + 1} | {mode} | {marginal:.1f} "
                    f"| {marginal - marginal_sys:.1f} / {marginal_sys:.1f} "
                    f"| {small['cpu_s'] / small['tokens'] * 1e6:.1f} / "
                    f"{large['cpu_s'] / large['tokens'] * 1e6:.1f} "
                    f"| {large['sleeps'] / large['tokens']:.3f} | {per_turn} "
                    f"| {large['tokens'] / max(1, large['reads']):.2f} "
                    f"| {small['ok'] + large['ok']}/{2 * STREAMS} |",
                    flush=True,
                )
    finally:
        for sim in sims.values():
            sim.close()
    print()
    for mode, values in marginals.items():
        runs = ", ".join(f"{v:.1f}" for v in values)
        print(f"{mode}: mean marginal {sum(values) / len(values):.2f} µs / token ({runs})")
    print(f"\nload average {os.getloadavg()[0]:.2f} at end")


if __name__ == "__main__":
    main()
