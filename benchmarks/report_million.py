"""Build the full report from 1,000,000 synthetic request records; print time and RSS.

    python benchmarks/report_million.py [--records N] [--tokens T] [--keep DIR]

The run folder (records.parquet + run.json; default tiers, a 1/4/16 concurrency sweep,
2% errors, every record with its T chunk offsets) is generated in a separate process
first, so the numbers below are those of ``tokrate.report.build.build_report`` alone in a
fresh process: reading parquet, metrics.summarize, chart data, six charts as PNG and
SVG, report.html and summary.md. Target (issue 4): <= 10 s and <= 2 GB peak RSS.
Not a test: it prints a table.
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# The synthetic run writer is test data (tests/helpers/synthetic.py), not library code.
_GENERATE = """
import sys
from pathlib import Path
sys.path.insert(0, sys.argv[4])
from helpers.synthetic import default_synthetic_tiers, synthetic_run
n, tokens, path = int(sys.argv[1]), int(sys.argv[2]), Path(sys.argv[3])
tiers = default_synthetic_tiers()
levels = (1, 4, 16)
per = -(-n // (len(tiers) * len(levels)))
synthetic_run(path, run_id="million", tiers=tiers, concurrency=levels,
              requests_per_level=per, output_tokens=tokens, error_rate=0.02,
              slo={"ttft_s": 0.5, "tpot_s": 0.05})
"""


_TESTS = str(Path(__file__).resolve().parent.parent / "tests")


def _rss_mb() -> float:
    # ru_maxrss is KiB on Linux.
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--tokens", type=int, default=32, help="chunk offsets per record")
    parser.add_argument("--keep", type=Path, default=None, help="reuse/keep the run folder here")
    parser.add_argument("--build-only", type=Path, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.tokens < 2:
        parser.error("--tokens must be >= 2 (TPOT needs two tokens)")

    if args.build_only is not None:
        return _build(args.build_only)

    with tempfile.TemporaryDirectory() as tmp:
        run = args.keep or Path(tmp) / "million"
        if not (run / "records.parquet").exists():
            t0 = time.perf_counter()
            subprocess.run(
                [
                    sys.executable,
                    "-c",
                    _GENERATE,
                    str(args.records),
                    str(args.tokens),
                    str(run),
                    _TESTS,
                ],
                check=True,
            )
            print(f"generated {args.records:,} records in {time.perf_counter() - t0:.1f} s")
        # A fresh process, so peak RSS is the report's alone.
        return subprocess.run(
            [sys.executable, __file__, "--build-only", str(run)], check=False
        ).returncode


def _build(run: Path) -> int:
    import polars as pl

    from tokrate.report.build import build_report

    rows = pl.scan_parquet(run / "records.parquet").select(pl.len()).collect().item()
    cpu0 = time.process_time()
    t0 = time.perf_counter()
    out = build_report([run], run / "report")
    wall = time.perf_counter() - t0
    cpu = time.process_time() - cpu0
    peak = _rss_mb()
    size_kb = (out / "report.html").stat().st_size / 1024
    print()
    load1 = os.getloadavg()[0]
    print(
        "| records | chunk offsets/record | build_report wall (s) | CPU (s, all threads) "
        "| peak RSS (MB) | report.html (KB) | load avg (1 min) |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|")
    print(
        f"| {rows:,} | {_tokens(run)} | {wall:.2f} | {cpu:.2f} | {peak:,.0f} "
        f"| {size_kb:,.0f} | {load1:.1f} |"
    )
    ok = wall <= 10.0 and peak <= 2048
    print(f"\ntarget <= 10 s and <= 2048 MB: {'met' if ok else 'NOT met'}")
    return 0


def _tokens(run: Path) -> int:
    import polars as pl

    first = pl.scan_parquet(run / "records.parquet").select("chunk_offsets_s").head(1).collect()
    value = first.item(0, 0)
    return 0 if value is None else len(value)


if __name__ == "__main__":
    raise SystemExit(main())
