"""`--requests auto`: each level sends until every judged statistic has its samples
(LoadGen's minimum for a percentile: 130 ok requests for a p95), within
`load.max_requests`; run.json says per target and level why it stopped."""

from __future__ import annotations

import json
from pathlib import Path

from tokrate.cli import main


def _run(out: Path, run_id: str, *extra: str) -> int:
    return main(
        [
            "run",
            "-m",
            "sim-1b",
            "--concurrency",
            "4",
            "--requests",
            "auto",
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


def test_auto_sends_until_every_verdict_can_be_made(tmp_path: Path) -> None:
    assert _run(tmp_path, "first", "--baseline", "latest-good") == 0
    assert _run(tmp_path, "second", "--baseline", "latest-good") in (0, 1, 3)
    for name in ("first", "second"):
        info = json.loads((tmp_path / name / "run.json").read_text())
        (stop,) = info["sampling"]
        assert stop["reason"] == "judged" and stop["needed"] == 130
        # Stopped once judged, far below max_requests (1000): what was in flight and the
        # records on their way to the driver (a few dozen at 50x speed) come on top.
        assert 130 <= stop["ok"] <= stop["sent"] < 400
        assert info["config"]["load"]["requests"] == "auto"
    doc = json.loads((tmp_path / "second" / "comparison.json").read_text())
    assert not [r for r in doc["results"] if "too few" in (r["reason"] or "")], doc["results"]


def test_auto_stops_at_max_requests_and_says_so(tmp_path: Path) -> None:
    """A p99 threshold needs 662 ok requests; with max_requests = 40 the level stops
    there, and run.json says so."""
    config = tmp_path / "bench.toml"
    config.write_text('[load]\nmax_requests = 40\n\n[compare]\nthresholds = ["ttft_p99=+10%"]\n')
    assert _run(tmp_path, "capped", "-c", str(config)) == 0
    info = json.loads((tmp_path / "capped" / "run.json").read_text())
    (stop,) = info["sampling"]
    assert stop["reason"] == "max_requests" and stop["needed"] == 662
    assert stop["sent"] == 40
