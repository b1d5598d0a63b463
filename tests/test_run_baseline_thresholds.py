"""`tokrate run --baseline ... --threshold ...` judges with the thresholds it was given."""

from __future__ import annotations

import json
from pathlib import Path

from tokrate.cli import main


def _run(out: Path, run_id: str, *extra: str) -> int:
    return main(
        [
            "run", "-m", "sim-1b", "--concurrency", "2", "--requests", "6",
            "--max-tokens", "8", "--time-scale", "20", "--output-dir", str(out),
            "--run-id", run_id, "--quiet", "--no-report", *extra,
        ]
    )  # fmt: skip


def test_thresholds_from_the_command_line_reach_the_comparison(tmp_path: Path) -> None:
    assert _run(tmp_path, "base") == 0
    code = _run(
        tmp_path,
        "tonight",
        "--baseline", str(tmp_path / "base"),
        "--threshold", "ttft_p95=+50%",
        "--threshold", "e2e_p95=off",
    )  # fmt: skip
    assert code in (0, 1)
    doc = json.loads((tmp_path / "tonight" / "comparison.json").read_text())
    limits = {t["metric"]: t["limit"] for t in doc["thresholds"]}
    assert limits["ttft_p95"] == 0.5
    assert "e2e_p95" not in limits
    assert "tpot_p50" in limits  # the other defaults stay
