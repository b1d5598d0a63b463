"""Client TTFT against the server's own TTFT, with and without preconnect (issue 11).

Starts ``tokrate sim`` in its own process (one fixed-timing tier: TTFT 100 ms, ITL
20 ms, 8-24 tokens per answer) with a truth log, runs the real ``run_benchmark``
closed loop at each ``--streams`` level, and prints, over the measured requests, the
client's TTFT minus the server's (truth log: body received -> first content write,
same CLOCK_MONOTONIC), split into the part before the server had the request (send
path + the server's own queue) and after its first content write (delivery + the
client's stamp), plus how many requests opened a connection. ``--warmup`` seconds of
sends at the start are warm-up (the first round, sent all at once, is a queue at the
server, not client error).

    .venv/bin/python benchmarks/connect_ttft.py [--streams 32,256] [--rounds 4] [--warmup 0.2]

Not a test: the numbers depend on the machine (and on who else uses it).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def measure(streams: int, rounds: int, warmup_s: float, preconnect: bool) -> dict[str, float]:
    import orjson
    import polars as pl

    from tokrate.load.run import run_benchmark
    from tokrate.runfolder.loaded_run import load_run
    from tokrate.sim.model import Tier
    from tokrate.sim.server import SimConfig, simulator_process
    from tokrate.spec.types import (
        ClientSpec,
        EndpointSpec,
        LoadSpec,
        ModelSpec,
        OutputSpec,
        PromptsSpec,
        RunSpec,
        SyntheticSpec,
    )

    tier = Tier(
        "fixed",
        7.0,
        7.0,
        fixed_ttft_ms=100.0,
        fixed_itl_ms=20.0,
        output_tokens_min=8,
        output_tokens_max=24,
    )
    with tempfile.TemporaryDirectory(prefix="tokrate-connect-") as tmp:
        truth_path = Path(tmp) / "truth.jsonl"
        with simulator_process(SimConfig(tiers=(tier,), truth_log=str(truth_path))) as url:
            spec = RunSpec(
                endpoints=(EndpointSpec("sim", url),),
                models=(ModelSpec("sim", "fixed", params_b=7.0),),
                load=LoadSpec(
                    concurrency=(streams,), requests=streams * rounds, warmup_s=warmup_s, seed=1
                ),
                prompts=PromptsSpec(
                    synthetic=SyntheticSpec(count=16, input_tokens=16, output_tokens=24),
                    max_tokens=24,
                ),
                client=ClientSpec(preconnect=preconnect),
                output=OutputSpec(dir=tmp, run_id="x", report=False),
            )
            result = run_benchmark(spec)
        truth = {}
        for line in truth_path.read_bytes().splitlines():
            row = orjson.loads(line)
            truth[row["id"]] = row
        run = load_run(result.run_dir)
        rec = run.records.filter((pl.col("status") == "ok") & ~pl.col("warmup"))
        total, before, after = [], [], []
        for rid, t0, ttft_s in zip(rec["response_id"], rec["t0_ns"], rec["ttft_s"], strict=True):
            t = truth[rid]
            pre = (t["received_ns"] - t0) / 1e6
            post = (t0 + ttft_s * 1e9 - t["content_write_ns"][0]) / 1e6
            total.append(pre + post)
            before.append(pre)
            after.append(post)
        total.sort()
        p99 = total[min(len(total) - 1, int(0.99 * len(total)))]
        return {
            "n": len(total),
            "mean": statistics.fmean(total),
            "p50": statistics.median(total),
            "p99": p99,
            "before": statistics.fmean(before),
            "after": statistics.fmean(after),
            "opened": int((rec["connect_s"] > 0).sum()),
            "lag_p99": float(run.info.loop_lag.p99_ms or 0.0) if run.info.loop_lag else 0.0,
        }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--streams", default="32,256")
    ap.add_argument("--rounds", type=int, default=4, help="requests per stream")
    ap.add_argument("--warmup", type=float, default=0.2, help="warm-up seconds")
    a = ap.parse_args()
    print(f"load average: {os.getloadavg()[0]:.2f} (1 min) on {os.cpu_count()} CPUs")
    print(
        "| streams | preconnect | measured | TTFT error mean / p50 / p99 ms |"
        " before received / after write (mean ms) | opened a connection | loop lag p99 ms |"
    )
    print("|---|---|---|---|---|---|---|")
    for streams in (int(s) for s in a.streams.split(",")):
        for preconnect in (True, False):
            m = measure(streams, a.rounds, a.warmup, preconnect)
            print(
                f"| {streams} | {'on' if preconnect else 'off'} | {m['n']} |"
                f" {m['mean']:.2f} / {m['p50']:.2f} / {m['p99']:.2f} |"
                f" {m['before']:.2f} / {m['after']:.2f} | {m['opened']} | {m['lag_p99']:.1f} |",
                flush=True,
            )
    print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
