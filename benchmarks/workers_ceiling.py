"""Ceiling: the highest sustained streamed tokens/s with ``--workers 1, 2, ...``.

Starts ``tokrate sim`` in its own process with a zero-delay tier (every token due at
once, 512 per response, ``ignore_eos``), then runs the real ``run_benchmark`` against
it once per worker count, closed loop at ``--concurrency`` streams for ``--seconds``,
and prints one row per worker count:

- tok/s: tokrate's own ``aggregate_output_tps`` from summary.json (output tokens of
  requests that finished in the window / window length);
- req/s, TTFT p50 and the number of loop-lag warnings the run printed;
- client CPU: user+sys of the driver and its worker processes (getrusage, self +
  reaped children) per 100,000 streamed tokens, and as a share of one core;
- sim CPU: the simulator process's user+sys over the run, as a share of one core
  (when it is near 100 % the server, not the client, is the ceiling).

    .venv/bin/python benchmarks/workers_ceiling.py [--workers 1,2] [--seconds 5] [--concurrency 64]

Not a test: the numbers depend on the machine (and on who else uses it).
"""

from __future__ import annotations

import argparse
import os
import platform
import resource
import tempfile
import time
from pathlib import Path
from typing import Any

from tokrate.sim.server import SimConfig, spawn_simulator

TIERS = """
[[tier]]
name = "zero"
params_b = 1
fixed_ttft_ms = 0
fixed_itl_ms = 0
"""


def _proc_cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _own_cpu_s() -> float:
    me = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def _spec(url: str, out: Path, workers: int, concurrency: int, seconds: float) -> Any:
    from tokrate.spec.types import (
        EndpointSpec,
        LoadSpec,
        ModelSpec,
        OutputSpec,
        PromptsSpec,
        RunSpec,
        SyntheticSpec,
    )

    return RunSpec(
        endpoints=(EndpointSpec("sim", url),),
        models=(ModelSpec("sim", "zero", params_b=1.0),),
        load=LoadSpec(
            concurrency=(concurrency,),
            requests=None,
            duration_s=seconds,
            workers=workers,
            ignore_eos=True,
        ),
        prompts=PromptsSpec(
            synthetic=SyntheticSpec(count=16, input_tokens=16, output_tokens=512),
            max_tokens=512,
        ),
        output=OutputSpec(dir=str(out), run_id=f"workers-{workers}", report=False),
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workers", default="1,2", help="comma-separated worker counts")
    ap.add_argument("--seconds", type=float, default=5.0, help="duration per run")
    ap.add_argument("--concurrency", type=int, default=64, help="streams (split over workers)")
    args = ap.parse_args()
    counts = [int(w) for w in args.workers.split(",") if w.strip()]

    from tokrate.load.run import run_benchmark

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        tiers = Path(tmp) / "tiers.toml"
        tiers.write_text(TIERS)
        with spawn_simulator(SimConfig(tiers_file=str(tiers))) as (url, sim_pid):
            for workers in counts:
                spec = _spec(url, Path(tmp), workers, args.concurrency, args.seconds)
                sim0, cpu0, t0 = _proc_cpu_s(sim_pid), _own_cpu_s(), time.perf_counter()
                result = run_benchmark(spec)
                wall = time.perf_counter() - t0
                cpu, sim_cpu = _own_cpu_s() - cpu0, _proc_cpu_s(sim_pid) - sim0
                assert result.summary is not None and result.summary.groups
                group = result.summary.groups[0]
                lag = sum("lag" in w.lower() for w in result.warnings)
                rows.append(
                    (
                        workers,
                        group.aggregate_output_tps or 0.0,
                        group.requests_per_s or 0.0,
                        group.ttft_s.p50,
                        cpu / max(group.output_tokens_total, 1) * 1e5,
                        cpu / wall,
                        sim_cpu / wall,
                        lag,
                        group.counts.error,
                    )
                )

    print(
        f"machine: {platform.node()}, {os.cpu_count()} cores, {platform.python_version()};"
        f" {args.concurrency} streams, {args.seconds:g} s per run, zero-delay sim, 512 tok/response"
    )
    print(
        f"{'workers':>7} {'tok/s':>10} {'req/s':>8} {'TTFT p50':>9} {'CPU s/100k tok':>15}"
        f" {'client CPU':>10} {'sim CPU':>8} {'lag warn':>8} {'errors':>6}"
    )
    for w, tps, rps, ttft, cpu_per, ccpu, scpu, lag, err in rows:
        ttft_ms = f"{ttft * 1e3:.1f}ms" if ttft is not None else "-"
        print(
            f"{w:>7} {tps:>10,.0f} {rps:>8,.1f} {ttft_ms:>9} {cpu_per:>15.2f}"
            f" {ccpu:>9.0%} {scpu:>7.0%} {lag:>8} {err:>6}"
        )
    print(
        "tok/s = summary.json aggregate_output_tps; CPU = user+sys / wall (1 core = 100%);"
        " sim CPU near 100% means the one-process simulator is the ceiling, not the client"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
