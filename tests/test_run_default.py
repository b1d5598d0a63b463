"""The embedded default: `tokrate run` with nothing else, at real time."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tokrate.cli import main
from tokrate.sim.model import default_tiers
from tokrate.store import load_run


def test_embedded_default_benchmarks_every_tier(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    t = time.monotonic()
    rc = main(["run", "--output-dir", str(tmp_path)])
    elapsed = time.monotonic() - t
    out, err = capsys.readouterr()
    assert rc == 0, err
    (run_dir,) = list(tmp_path.iterdir())
    run = load_run(run_dir)
    tiers = {tier.name for tier in default_tiers()}
    assert set(run.records["model"].unique().to_list()) == tiers
    assert set(run.records["scenario"].unique().to_list()) == {"c=1", "c=8"}
    assert run.run["status"] == "complete" and run.run["counts"]["error"] == 0
    assert run.run["config"]["simulator"]["time_scale"] == 1.0  # honest real time
    assert all(t["simulated"] for t in run.run["targets"])
    assert (run_dir / "report.html").exists()
    assert "sim-70b" in out and f"run complete: {run_dir}" in err.replace("\n", "")
    # The documented bound is 60 s on a 2-core machine; the run is mostly modelled
    # (real-time) decoding, so load on the machine barely moves it.
    assert elapsed < 60.0
