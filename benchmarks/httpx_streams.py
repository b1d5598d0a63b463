"""Benchmark (issue 26): requests lost at 1,000 streams per client, quiet or beside busy
processes.

One engine worker (the real ``run_worker``: preconnect, closed loop, loop-lag monitor),
N streams x 2 requests each against ``tokrate sim`` in its own process (one tier: fixed
TTFT 2 s, ITL 50 ms, 8 tokens, so all N streams are in flight together and the second
wave reuses, or not, the first wave's connections), with the simulator's truth log.
"lost" = requests the server never received (requests - truth-log lines); "new conn"
= records that opened a connection, per wave (the rest reused a kept-alive one);
"client CPU" = user + sys of this process over the run (the simulator is another
process).

    .venv/bin/python benchmarks/httpx_streams.py [--clients httpx,openai,fast]
        [--streams 1000] [--repeat 3] [--busy 0|2]

``--busy K`` starts K processes that spin on a core for the whole benchmark (the
issue's "two CPU-bound background processes"); run it under ``cpuslot --quiet`` so
nothing else of ours shares the machine.
"""

from __future__ import annotations

import argparse
import collections
import os
import resource
import tempfile
import time
from pathlib import Path
from typing import Any

from _background_load import busy_processes

from tokrate.inputs.prompt_base import Prompt
from tokrate.inputs.targets import Target
from tokrate.load.plan import build_plan
from tokrate.load.worker.engine import WorkerTask, run_worker
from tokrate.load.worker.events import LoopLag, RequestFinished
from tokrate.load.worker.settings import WorkerSettings
from tokrate.load.worker.stopping import Stop
from tokrate.sim.model import Tier
from tokrate.sim.server import SimConfig, simulator_process
from tokrate.spec.types import ClientSpec, EndpointSpec, LoadSpec, ModelSpec, PromptsSpec, RunSpec


def cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def one_run(kind: str, streams: int) -> dict[str, Any]:
    """One engine run of ``streams`` x 2 requests with client ``kind``."""
    tmp = Path(tempfile.mkdtemp(prefix="tokrate-bench-"))
    truth = tmp / "truth.jsonl"
    tier = Tier("wide", 1.0, 1.0, fixed_ttft_ms=2000.0, fixed_itl_ms=50.0, max_batch=4096)
    config = SimConfig(tiers=(tier,), time_scale=1.0, truth_log=str(truth))
    prompt = Prompt("p", "chat", ({"role": "user", "content": "hi"},), None, 8, 2, "bench")
    spec = RunSpec(
        load=LoadSpec(concurrency=(streams,), requests=2 * streams),
        prompts=PromptsSpec(max_tokens=8),
        client=ClientSpec(kind=kind),
    )
    events: list[Any] = []
    with simulator_process(config) as url:
        target = Target(EndpointSpec("sim", url), ModelSpec("sim", "wide"), simulated=True)
        scenario = build_plan(spec, 1, 1).scenarios[0]
        task = WorkerTask(
            "bench", "w0", scenario, WorkerSettings.from_spec(spec), (target,), (prompt,)
        )
        cpu0, wall0 = cpu_s(), time.monotonic()
        run_worker(task, events.append, Stop())
        cpu, wall = cpu_s() - cpu0, time.monotonic() - wall0
        time.sleep(0.5)  # the simulator writes a truth line per finished request
    records = [e.record for e in events if isinstance(e, RequestFinished)]
    lag = next(e for e in events if isinstance(e, LoopLag))
    classes = collections.Counter(r.error_class for r in records if r.status != "ok")
    new = collections.Counter(
        "w1" if r.request_index < streams else "w2" for r in records if (r.connect_s or 0) > 0
    )
    received = len(truth.read_bytes().splitlines())
    return {
        "kind": kind,
        "requests": 2 * streams,
        "ok": sum(r.status == "ok" for r in records),
        "lost": 2 * streams - received,
        "failed": ", ".join(f"{k} {v}" for k, v in sorted(classes.items(), key=str)) or "-",
        "new": f"{new['w1']} / {new['w2']}",
        "lag": f"{lag.p99_ms:.0f} / {lag.max_ms:.0f}",
        "cpu": cpu,
        "wall": wall,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--clients", default="httpx,openai,fast")
    ap.add_argument("--streams", type=int, default=1000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--busy", type=int, default=0, help="busy processes started for the run")
    args = ap.parse_args()
    rows = []
    with busy_processes(args.busy) as pids:
        if pids:
            print(f"busy processes: pids {', '.join(map(str, pids))}")
        for kind in args.clients.split(","):
            for _ in range(args.repeat):
                print(f"load average before {kind}: {os.getloadavg()[0]:.2f}", flush=True)
                rows.append(one_run(kind, args.streams))
    print(f"\n### {args.streams} streams x 2 requests, {args.busy} busy processes\n")
    print(
        "| client | ok / requests | lost (never reached the server) | failed |"
        " new conn wave 1 / 2 | loop lag p99 / max ms | client CPU s | wall s |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['kind']} | {r['ok']} / {r['requests']} | {r['lost']} | {r['failed']} |"
            f" {r['new']} | {r['lag']} | {r['cpu']:.1f} | {r['wall']:.1f} |"
        )


if __name__ == "__main__":
    main()
