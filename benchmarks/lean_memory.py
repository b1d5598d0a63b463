"""Benchmark (issue 18): peak RSS of the process that measures a ``tokrate run``.

``tokrate run`` (the CLI, in-process backend, fast client, report and terminal table
on) in its own process against ``tokrate sim`` in another (fixed TTFT 50 ms, ITL 20 ms,
64 tokens); its own peak RSS (``getrusage(RUSAGE_SELF)``: the child that builds
parquet, summary, report and the baseline check is not in it) and whether polars / numpy /
matplotlib were ever imported into it. "per stream" = (peak at N - peak at 1) / (N - 1).

    python benchmarks/lean_memory.py [--streams 1,256,1000] [--requests-per-stream 2]
                                     [--baseline]

``--baseline``: every run passes ``--baseline latest-good`` and each level runs twice
in one output folder, so the second run's row is a run whose comparison against the
first (in the child after the load, python -m tokrate.finish) is part of it.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile

from tokrate.sim.model import Tier
from tokrate.sim.server import SimConfig, spawn_simulator

_PROBE = """
import resource, sys
from tokrate.cli import main
code = main(sys.argv[1:])
heavy = [m for m in ("polars", "numpy", "matplotlib") if m in sys.modules]
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(f"PEAK {peak:.1f} HEAVY {','.join(heavy) or '-'}", file=sys.stderr)
raise SystemExit(code)
"""


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--streams", default="1,256,1000")
    ap.add_argument("--requests-per-stream", type=int, default=2)
    ap.add_argument("--baseline", action="store_true", help="add a --baseline run per level")
    a = ap.parse_args()
    tier = Tier(
        "fixed",
        7.0,
        7.0,
        fixed_ttft_ms=50,
        fixed_itl_ms=20,
        output_tokens_min=64,
        output_tokens_max=64,
    )
    print(f"load average {os.getloadavg()[0]:.2f} at start")
    print("| streams | requests | exit | peak RSS MB | per stream KiB | imported into it |")
    print("|---|---|---|---|---|---|")
    base_peak = None
    with spawn_simulator(SimConfig(tiers=(tier,))) as (url, _pid):
        for n in (int(s) for s in a.streams.split(",")):
            out = tempfile.mkdtemp(prefix="tokrate-lean-")
            requests = n * a.requests_per_stream
            for compared in (False, True) if a.baseline else (False,):
                extra = ["--baseline", "latest-good"] if a.baseline else []
                done = subprocess.run(
                    [
                        sys.executable,
                        "-c",
                        _PROBE,
                        "run",
                        "--base-url",
                        url,
                        "-m",
                        "fixed",
                        "--concurrency",
                        str(n),
                        "--requests",
                        str(requests),
                        "--max-tokens",
                        "64",
                        "--output-dir",
                        out,
                        "--model-check",
                        "off",
                        *extra,
                    ],
                    capture_output=True,
                    text=True,
                )
                line = next((x for x in done.stderr.splitlines() if x.startswith("PEAK")), "")
                parts = line.split()
                peak = float(parts[1]) if parts else float("nan")
                heavy = parts[3] if len(parts) > 3 else "?"
                if base_peak is None:
                    base_peak = peak
                per = (peak - base_peak) * 1024 / (n - 1) if n > 1 else float("nan")
                label = f"{n} (compared with --baseline)" if compared else str(n)
                print(
                    f"| {label} | {requests} | {done.returncode} | {peak:.1f} | {per:.1f} |"
                    f" {heavy} |",
                    flush=True,
                )
    print(f"load average {os.getloadavg()[0]:.2f} at end")


if __name__ == "__main__":
    main()
