"""The process that measures a run never imports the analysis stack (polars, numpy,
matplotlib): parquet, summary, report and the terminal table come from children
(tokrate.finalize), and the results are the same as before."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import orjson

from tokrate.sim import SimConfig, Tier, simulator_process
from tokrate.store import load_run

_PROBE = """
import sys
from tokrate.cli import main
code = main(sys.argv[1:])
heavy = sorted(m for m in ("polars", "numpy", "matplotlib") if m in sys.modules)
print("HEAVY=" + ",".join(heavy), file=sys.stderr)
raise SystemExit(code)
"""

TIER = Tier(
    name="fixed", params_b=7.0, active_params_b=7.0, fixed_ttft_ms=5.0, fixed_itl_ms=1.0,
    output_tokens_min=8, output_tokens_max=8,
)  # fmt: skip


def test_a_run_never_loads_polars_numpy_or_matplotlib(tmp_path: Path) -> None:
    with simulator_process(SimConfig(tiers=(TIER,), time_scale=1.0)) as base:
        done = subprocess.run(
            [sys.executable, "-c", _PROBE, "run", "--base-url", base, "-m", "fixed",
             "--concurrency", "4", "--requests", "8", "--output-dir", str(tmp_path),
             "--run-id", "lean", "--model-check", "off"],
            capture_output=True, text=True, timeout=300,
        )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "HEAVY=\n" in done.stderr, done.stderr
    run_dir = tmp_path / "lean"
    # Everything the children wrote is there, and the table was printed.
    assert (run_dir / "records.parquet").is_file() and (run_dir / "report.html").is_file()
    loaded = load_run(run_dir)
    assert loaded.info.status == "complete" and loaded.records.height == 8
    assert loaded.summary is not None and loaded.info.calibration is not None
    assert "fixed" in done.stdout and "TTFT" in done.stdout
    assert max(len(line) for line in done.stdout.splitlines()) <= 80
    assert orjson.loads((run_dir / "summary.json").read_bytes())["groups"]
