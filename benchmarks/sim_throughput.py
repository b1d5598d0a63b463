"""Simulator throughput: can it feed a client faster than any client reads?

Starts ``tokrate sim`` in its own process (one event loop, one core) with two fixed-
timing tiers, drives it from this process with a minimal raw-socket HTTP/1.1 client
(asyncio + uvloop, keep-alive, counting SSE events without parsing JSON), and prints:

1. zero delay: streamed events/s with every token due at once (512 per response);
2. 5 ms ITL: separately written chunks/s across 256 streams (each write is one
   chunk as long as the server keeps up; the truth log says how many writes there
   were and how late each was against its due time);

plus the server's CPU seconds (user+sys from /proc) per million events.

    .venv/bin/python benchmarks/sim_throughput.py [--seconds 5] [--streams 256]

Not a test: numbers depend on the machine; see docs/simulator.md for recorded ones.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import statistics
import tempfile
import time
from pathlib import Path
from urllib.parse import urlparse

from tokrate.sim.server import SimConfig, spawn_simulator

TIERS = """
[[tier]]
name = "zero"
params_b = 1
fixed_ttft_ms = 0
fixed_itl_ms = 0
[[tier]]
name = "itl5"
params_b = 1
fixed_ttft_ms = 0
fixed_itl_ms = 5
"""


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / ticks  # utime + stime


class _Conn(asyncio.Protocol):
    """One keep-alive connection issuing the same streaming request back to back."""

    def __init__(
        self, request: bytes, stats: dict[str, int], stop_at: float, window: tuple[float, float]
    ) -> None:
        self.request, self.stats, self.stop_at, self.window = request, stats, stop_at, window
        self.tail = b""
        self.done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's is not a subclass
        transport.write(self.request)

    def data_received(self, data: bytes) -> None:
        st = self.stats
        st["reads"] += 1
        st["bytes"] += len(data)
        # content events only: "data: {" ... with "content" / "text"; cheap count
        n = data.count(b'"delta":{"content"')
        st["events"] += n
        now = time.perf_counter()
        if self.window[0] <= now < self.window[1]:
            st["window_events"] += n
        buf = self.tail + data
        if buf.endswith(b"0\r\n\r\n") and b"[DONE]" in buf[-64:]:
            st["responses"] += 1
            self.tail = b""
            assert self.transport is not None
            if time.perf_counter() < self.stop_at:
                self.transport.write(self.request)
            else:
                self.transport.close()
        else:
            self.tail = buf[-64:]

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.done.done():
            self.done.set_result(None)


async def _drive(
    url: str, model: str, streams: int, max_tokens: int, seconds: float
) -> dict[str, float]:
    u = urlparse(url)
    body = json.dumps(
        {
            "model": model,
            "messages": [{"role": "user", "content": "hi"}],
            "stream": True,
            "max_tokens": max_tokens,
            "ignore_eos": True,
        }
    ).encode()
    request = (
        f"POST /v1/chat/completions HTTP/1.1\r\nHost: {u.hostname}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode() + body
    stats = {"events": 0, "window_events": 0, "reads": 0, "bytes": 0, "responses": 0}
    loop = asyncio.get_running_loop()
    t0 = time.perf_counter()
    stop_at = t0 + seconds
    # steady state only: after every connection is up, before the first ones stop
    window = (t0 + 1.0, t0 + seconds - 0.25)
    conns = []
    for _ in range(streams):
        _, proto = await loop.create_connection(
            lambda: _Conn(request, stats, stop_at, window), u.hostname, u.port
        )
        conns.append(proto)
    await asyncio.gather(*(c.done for c in conns))
    elapsed = time.perf_counter() - t0
    return {
        **stats,
        "elapsed": elapsed,
        "window_s": window[1] - window[0],
        "window_start_ns": int(window[0] * 1e9),
        "window_end_ns": int(window[1] * 1e9),
    }


def _writes_from_truth(
    log: Path, model: str, itl_ns: int, window_ns: tuple[int, int]
) -> tuple[int, int, list[float]]:
    """(distinct writes, chunks) inside the window, and every chunk's lateness in ms.

    The truth log and this process share CLOCK_MONOTONIC, so the window applies as is.
    """
    writes = chunks = 0
    lateness_ms: list[float] = []
    for line in log.read_text().splitlines():
        row = json.loads(line)
        if row["model"] != model:
            continue
        ts = row["content_write_ns"]
        inside = [t for t in ts if window_ns[0] <= t < window_ns[1]]
        chunks += len(inside)
        writes += len(set(inside))
        for k, t in enumerate(ts):
            lateness_ms.append((t - (row["received_ns"] + k * itl_ns)) / 1e6)
    return writes, chunks, lateness_ms


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--streams", type=int, default=256)
    ap.add_argument("--zero-streams", type=int, default=32)
    args = ap.parse_args()
    try:
        import uvloop

        runner = uvloop.run
    except ImportError:  # pragma: no cover
        runner = asyncio.run

    with tempfile.TemporaryDirectory() as tmp:
        tiers = Path(tmp) / "tiers.toml"
        tiers.write_text(TIERS)
        rows = []
        for name, model, streams, max_tokens in (
            ("zero delay, 512 tok/response", "zero", args.zero_streams, 512),
            (f"5 ms ITL, {args.streams} streams", "itl5", args.streams, 100),
        ):
            log = Path(tmp) / f"truth-{model}.jsonl"
            config = SimConfig(tiers_file=str(tiers), truth_log=str(log))
            with spawn_simulator(config) as (url, pid):
                cpu0 = _cpu_s(pid)
                res = runner(_drive(url, model, streams, max_tokens, args.seconds))
                cpu = _cpu_s(pid) - cpu0
            window_ns = (int(res["window_start_ns"]), int(res["window_end_ns"]))
            itl_ns = 5_000_000 if model == "itl5" else 0
            writes, _chunks, late = _writes_from_truth(log, model, itl_ns, window_ns)
            el = res["elapsed"]
            rows.append(
                (
                    name,
                    res["window_events"] / res["window_s"],
                    writes / res["window_s"],
                    res["reads"] / el,
                    cpu / el,
                    cpu / max(res["events"], 1) * 1e6,
                    statistics.median(late) if late and model == "itl5" else float("nan"),
                    statistics.quantiles(late, n=100)[98]
                    if len(late) > 100 and model == "itl5"
                    else float("nan"),
                )
            )
    print(
        f"{'scenario':<30} {'events/s':>10} {'writes/s':>10} {'reads/s':>9} {'srv CPU':>8} "
        f"{'us CPU/ev':>9} {'ev/CPU-s':>10} {'late p50':>9} {'late p99':>9}"
    )

    def ms(value: float) -> str:
        return "–" if math.isnan(value) else f"{value:.2f}ms"

    for r in rows:
        per_core = r[1] / r[4] if r[4] > 0 else float("nan")
        print(
            f"{r[0]:<30} {r[1]:>10,.0f} {r[2]:>10,.0f} {r[3]:>9,.0f} {r[4]:>7.0%} "
            f"{r[5]:>9.2f} {per_core:>10,.0f} {ms(r[6]):>9} {ms(r[7]):>9}"
        )
    print(
        "events/s = content chunks the client received per second in the steady-state window; writes = distinct server write times"
        " (truth log); srv CPU = server user+sys / wall (one core = 100%); ev/CPU-s = what"
        " one fully used core would carry; late = write time - due time (5 ms ITL only)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
