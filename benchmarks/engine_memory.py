"""Peak client memory per in-flight stream (issue 6 "Load held"). Not a test.

Starts the simulator in a *separate process* (so its memory is not counted), then
runs one worker (tokrate.load.worker.engine.run_worker, the default fast client, uvloop) with N
concurrent streams that all stay in flight for ~2.5 s (fixed TTFT 2 s, 10 tokens at
50 ms), sampling this process's RSS every 20 ms. Prints a table: peak RSS above the
idle baseline, per stream, event-loop lag, and errors.

    .venv/bin/python benchmarks/engine_memory.py [N ...]      # default 100 1000 2000
"""

from __future__ import annotations

import sys
import threading
import time
from typing import Any

from tokrate.sim.model import Tier
from tokrate.sim.server import SimConfig, simulator_process


def _rss_kib() -> int:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def _run(url: str, streams: int) -> dict[str, Any]:
    from tokrate.inputs.prompt_base import Prompt
    from tokrate.inputs.targets import Target
    from tokrate.load.plan import build_plan
    from tokrate.load.worker.engine import WorkerTask, run_worker
    from tokrate.load.worker.events import LoopLag, RequestFinished
    from tokrate.load.worker.settings import WorkerSettings
    from tokrate.spec.types import EndpointSpec, LoadSpec, ModelSpec, PromptsSpec, RunSpec

    spec = RunSpec(
        load=LoadSpec(concurrency=(streams,), requests=streams),
        prompts=PromptsSpec(max_tokens=10),
    )
    prompt = Prompt("p", "chat", ({"role": "user", "content": "hi"},), None, 10, 2, "bench")
    target = Target(EndpointSpec("sim", url), ModelSpec("sim", "wide"), simulated=True)
    task = WorkerTask(
        "bench",
        "w0",
        build_plan(spec, 1, 1).scenarios[0],
        WorkerSettings.from_spec(spec),
        (target,),
        (prompt,),
    )
    events: list[Any] = []
    peak = [0]
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            peak[0] = max(peak[0], _rss_kib())
            time.sleep(0.02)

    base = _rss_kib()
    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    t = time.perf_counter()
    run_worker(task, events.append, threading.Event())
    wall = time.perf_counter() - t
    done.set()
    sampler.join()
    recs = [e.record for e in events if isinstance(e, RequestFinished)]
    lag = next(e for e in events if isinstance(e, LoopLag))
    return {
        "streams": streams,
        "base_mib": base / 1024,
        "peak_mib": peak[0] / 1024,
        "kib_per_stream": (peak[0] - base) / streams,
        "errors": sum(r.status != "ok" for r in recs),
        "lag_p99_ms": lag.p99_ms,
        "lag_max_ms": lag.max_ms,
        "wall_s": wall,
    }


def main(argv: list[str]) -> None:
    levels = [int(a) for a in argv] or [100, 1000, 2000]
    # Exact timing, no batch limit: every stream stays in flight ~2 s.
    tier = Tier("wide", 1.0, 1.0, fixed_ttft_ms=2000.0, fixed_itl_ms=50.0, max_batch=100000)
    with simulator_process(SimConfig(tiers=(tier,))) as url:
        _run(url, 10)  # warm imports and the loop once, outside the measurement
        print(
            "| streams | RSS base MiB | RSS peak MiB | KiB / in-flight stream | errors | lag p99 ms | lag max ms | wall s |"
        )
        print("|---:|---:|---:|---:|---:|---:|---:|---:|")
        for n in levels:
            r = _run(url, n)
            print(
                f"| {r['streams']} | {r['base_mib']:.1f} | {r['peak_mib']:.1f} |"
                f" {r['kib_per_stream']:.1f} | {r['errors']} | {r['lag_p99_ms']:.1f} |"
                f" {r['lag_max_ms']:.1f} | {r['wall_s']:.2f} |"
            )


if __name__ == "__main__":
    main(sys.argv[1:])
