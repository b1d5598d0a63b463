"""Aggregate throughput against the server's own count (issue 11), by hand.

Starts ``tokrate sim`` in its own process with a zero-delay tier (every token due at
once, ``--tokens`` per response) and a truth log, runs the real ``run_benchmark``
against it (closed loop, ``--concurrency`` streams, ``--seconds`` per scenario, warm-up
optional), then compares tokrate's ``aggregate_output_tps`` with the server's count
over the same (measured, ok) requests: their output tokens / the server's span, from
the first request body received to the last final write (truth log ``received_ns`` ..
``done_ns``, CLOCK_MONOTONIC). Prints one row per repetition with the difference.

    .venv/bin/python benchmarks/window_agreement.py [--concurrency 64] [--seconds 4] [--reps 3]

Not a test: the numbers depend on the machine (and on who else uses it).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

TIERS = """include_defaults = false
[[tier]]
name = "zero"
params_b = 1
fixed_ttft_ms = 0
fixed_itl_ms = 0
output_tokens_min = {tokens}
output_tokens_max = {tokens}
"""


def measure(
    concurrency: int, seconds: float, tokens: int, warmup_s: float, client: str
) -> dict[str, Any]:
    import orjson

    from tokrate.load.run import run_benchmark
    from tokrate.runfolder.loaded_run import load_run
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

    with tempfile.TemporaryDirectory(prefix="tokrate-window-") as tmp:
        tiers = Path(tmp) / "tiers.toml"
        tiers.write_text(TIERS.format(tokens=tokens))
        truth_path = Path(tmp) / "truth.jsonl"
        config = SimConfig(tiers_file=str(tiers), truth_log=str(truth_path))
        with simulator_process(config) as url:
            spec = RunSpec(
                endpoints=(EndpointSpec("sim", url),),
                models=(ModelSpec("sim", "zero", params_b=1.0),),
                load=LoadSpec(
                    concurrency=(concurrency,),
                    requests=None,
                    duration_s=seconds,
                    warmup_s=warmup_s,
                    ignore_eos=True,
                ),
                prompts=PromptsSpec(
                    synthetic=SyntheticSpec(count=16, input_tokens=16, output_tokens=tokens),
                    max_tokens=tokens,
                ),
                client=ClientSpec(kind=client),  # type: ignore[arg-type]
                output=OutputSpec(dir=tmp, run_id="window", report=False),
            )
            result = run_benchmark(spec)
        truth = {}
        for line in truth_path.read_bytes().splitlines():
            row = orjson.loads(line)
            truth[row["id"]] = row
        run = load_run(result.run_dir)
        measured = run.records.filter((run.records["status"] == "ok") & ~run.records["warmup"])
        rows = [truth[rid] for rid in measured["response_id"].to_list() if rid in truth]
        span_s = (max(r["done_ns"] for r in rows) - min(r["received_ns"] for r in rows)) / 1e9
        server_tps = sum(r["output_tokens"] for r in rows) / span_s
        assert result.summary is not None
        (group,) = result.summary.groups
        return {
            "tokrate_tps": group.aggregate_output_tps,
            "window_s": group.window_s,
            "server_tps": server_tps,
            "server_span_s": span_s,
            "requests": len(rows),
            "lag_warned": run.info.loop_lag is not None and run.info.loop_lag.exceeded,
        }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--seconds", type=float, default=4.0)
    ap.add_argument("--tokens", type=int, default=512)
    ap.add_argument("--warmup", type=float, default=0.0, help="warm-up seconds")
    ap.add_argument("--client", default="fast")
    ap.add_argument("--reps", type=int, default=3)
    a = ap.parse_args()
    print(f"load average: {os.getloadavg()[0]:.2f} (1 min) on {os.cpu_count()} CPUs")
    print(
        "| rep | requests | tokrate tok/s | window s | server tok/s | server span s | difference |"
    )
    print("|---|---|---|---|---|---|---|")
    for rep in range(a.reps):
        m = measure(a.concurrency, a.seconds, a.tokens, a.warmup, a.client)
        diff = m["tokrate_tps"] / m["server_tps"] - 1.0
        print(
            f"| {rep + 1} | {m['requests']} | {m['tokrate_tps']:,.0f} | {m['window_s']:.3f} |"
            f" {m['server_tps']:,.0f} | {m['server_span_s']:.3f} | {diff:+.2%} |"
            f" {'yes' if m['lag_warned'] else 'no'} |",
            flush=True,
        )
    print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
