"""`tokrate history` over 200 run folders: the pages, the charts, the filters and the
marked change (a slow test, so in tests/report/ beside the other drawn pages: tests/unit
holds none).

The folders are seeded lognormal records (tests/helpers/runfolders.py): from run 150 on,
sim-70b is exactly 1.3x slower, and every other change is noise.
"""

from __future__ import annotations

import time
from pathlib import Path

import polars as pl
import pytest
from helpers.runfolders import write_runs

from tokrate.cli import main
from tokrate.report.history_pages import build_history


@pytest.fixture(scope="module")
def two_hundred(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("history200")
    write_runs(root, 200, change_at=150)
    return root


@pytest.mark.slow  # two_hundred: 200 run folders, each summarized (20-35 s on 2 cores)
def test_two_hundred_runs_build_fast_and_mark_the_change(two_hundred: Path) -> None:
    started = time.perf_counter()
    out, history = build_history(two_hundred)
    elapsed = time.perf_counter() - started
    # Generous: ~2 s on the 2-core dev machine; the bound only catches a blow-up.
    assert elapsed < 60, elapsed
    assert history.runs == 200 and not history.warnings
    changes = history.changes
    hit = changes.filter((pl.col("run_id") == "run-150") & (pl.col("model") == "sim-70b"))
    verdicts = dict(zip(hit["metric"], hit["change"], strict=True))
    assert verdicts["tpot_p50"] == verdicts["decode_tps_p50"] == "regressed"
    # 30 requests are too few for a p95 (it needs 130): outside the band, not a verdict.
    assert verdicts["e2e_p95"] == "inconclusive"
    # The unchanged tier is not marked at the change, and noise is rarely marked at all.
    assert changes.filter(
        (pl.col("run_id") == "run-150") & (pl.col("model") == "sim-7b")
    ).is_empty()
    before = changes.filter((pl.col("run_id") < "run-150") & (pl.col("change") == "regressed"))
    assert before.height <= 2
    (bench,) = history.benchmarks
    chart = f"charts/{bench.fingerprint}/tpot_p50.png"
    for name in ("history.html", "history.md", "history.csv", chart):
        assert (out / name).stat().st_size > 0, name
    html = (out / "history.html").read_text()
    # Five metrics; the error rate is 0 in every run of every series: left out, said so.
    assert html.count("data:image/png;base64,") == 4
    assert "error rate over time: left out, 0.00% in every run of every series" in html
    assert "▼ run-150 (regressed)" in (out / "history.md").read_text()


@pytest.mark.slow  # two_hundred (above)
def test_filters_and_cli(
    two_hundred: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "h"
    code = main(
        ["history", str(two_hundred), "--model", "sim-70b", "--metric", "tpot_p50", "-o", str(out)]
    )
    assert code == 0
    line = capsys.readouterr().out
    assert line.startswith("history: 200 runs, ") and line.endswith("history.html\n")
    frame = pl.read_csv(out / "history.csv")
    assert set(frame["model"]) == {"sim-70b"} and set(frame["metric"]) == {"tpot_p50"}
    assert frame.height == 200
    assert {"segment", "segment_reason", "band_low", "band_high", "verdict", "outside"} <= set(
        frame.columns
    )
    assert main(["history", str(two_hundred), "--metric", "bogus"]) == 2
    assert "--metric 'bogus': unknown metric" in capsys.readouterr().err
