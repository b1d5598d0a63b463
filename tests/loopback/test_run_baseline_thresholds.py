"""`tokrate run --baseline ... --threshold ...` judges with the thresholds it was given."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from tokrate.cli import main


def _run(out: Path, run_id: str, *extra: str) -> int:
    return main(
        [
            "run",
            "-m",
            "sim-1b",
            "--concurrency",
            "2",
            "--requests",
            "12",
            "--max-tokens",
            "8",
            "--time-scale",
            "20",
            "--output-dir",
            str(out),
            "--run-id",
            run_id,
            "--quiet",
            "--no-report",
            *extra,
        ]
    )


def test_thresholds_from_the_command_line_reach_the_comparison(tmp_path: Path) -> None:
    assert _run(tmp_path, "base") == 0
    code = _run(
        tmp_path,
        "tonight",
        "--baseline",
        str(tmp_path / "base"),
        "--threshold",
        "ttft_p95=+50%",
        "--threshold",
        "e2e_p95=off",
    )
    assert code in (0, 1, 3)  # 12 requests: too few for most statistics (inconclusive)
    doc = json.loads((tmp_path / "tonight" / "comparison.json").read_text())
    limits = {t["metric"]: t["limit"] for t in doc["thresholds"]}
    assert limits["ttft_p95"] == 0.5
    assert "e2e_p95" not in limits
    assert "tpot_p50" in limits  # the other defaults stay


def test_run_with_baseline_prints_the_verdicts_and_a_one_line_result(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    def run(run_id: str, *extra: str) -> int:
        return main(
            [
                "run",
                "-m",
                "sim-1b",
                "--concurrency",
                "2",
                "--requests",
                "12",
                "--max-tokens",
                "8",
                "--time-scale",
                "20",
                "--output-dir",
                str(tmp_path),
                "--run-id",
                run_id,
                "--no-report",
                *extra,
            ]
        )

    assert run("first", "--baseline", "latest-good") == 0
    out, err = capsys.readouterr()
    assert "baseline latest-good: no baseline run yet; this run becomes latest-good" in err
    assert "tokrate compare" not in out
    code = run("second", "--baseline", "latest-good")
    out, err = capsys.readouterr()
    assert code in (0, 1, 3)  # 12 requests: too few for most statistics (inconclusive)
    # The same table as `tokrate compare`, after the summary, on stdout.
    assert "tokrate compare: " in out and "vs baseline first" in out
    assert "verdict" in out and "ttft_p95" in out
    (result,) = [ln for ln in err.splitlines() if ln.startswith("baseline ")]
    assert result.startswith("baseline first: ")
    assert ("REGRESSION" in result) == (code == 1)
    assert "regressed" in result and "unchanged" in result
    # --quiet: the verdict line, one line per regressed or inconclusive metric and where
    # comparison.md is; --junit and --metrics-file for CI.
    junit, prom = tmp_path / "gate.xml", tmp_path / "tokrate.prom"
    code = run(
        "third",
        "--baseline",
        "latest-good",
        "--quiet",
        "--junit",
        str(junit),
        "--metrics-file",
        str(prom),
    )
    out, err = capsys.readouterr()
    assert out == ""
    lines = err.splitlines()
    assert lines[-1] == f"comparison: {tmp_path / 'third' / 'comparison.md'}"
    # 12 requests: the p95 rows are too few to judge, and each says so on its line.
    inconclusive = [ln for ln in lines if ln.startswith("inconclusive: ")]
    assert any("ttft_p95" in ln and "too few" in ln for ln in inconclusive), lines
    assert code == 3 or any(ln.startswith("regressed: ") for ln in lines)
    suite = ET.parse(junit).getroot().find("testsuite")
    assert suite is not None and int(suite.get("skipped", "0")) == len(inconclusive)
    assert "tokrate_ttft_seconds{" in prom.read_text()
