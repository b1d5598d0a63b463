"""`tokrate history` over synthetic run folders: speed, segments, bands, marks, bad folders.

The folders are seeded lognormal records (tests/helpers/runfolders.py), so every planted
change, spread and configuration switch is known exactly.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import polars as pl
import pytest
from helpers.runfolders import make_records, summary_of, write_run

from tokrate.analysis.compare import compare_runs
from tokrate.analysis.history import load_history
from tokrate.analysis.noise import fit_thresholds
from tokrate.cli import main
from tokrate.errors import UsageError
from tokrate.finish.baseline import check_baseline
from tokrate.report.history_pages import build_history
from tokrate.runfolder.store import LATEST_GOOD
from tokrate.runfolder.summary import SUMMARY_SCHEMA_HISTORY
from tokrate.spec.thresholds import ThresholdSet


def _stamp(i: int) -> str:
    return f"2026-01-{1 + i // 24:02d}T{i % 24:02d}:00:00Z"


def _runs(root: Path, count: int, *, change_at: int | None = None, summary: bool = True) -> None:
    for i in range(count):
        rid = f"run-{i:03d}"
        slow = {"sim-70b": 1.3} if change_at is not None and i >= change_at else None
        recs = make_records(rid, seed=i, n=30, slow=slow)
        write_run(
            root,
            rid,
            recs,
            started_at=_stamp(i),
            summary=summary_of(rid, recs) if summary else None,
        )


@pytest.fixture(scope="module")
def two_hundred(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("history200")
    _runs(root, 200, change_at=150)
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
    # 30 requests are too few for a p95 (it needs 200): outside the band, not a verdict.
    assert verdicts["e2e_p95"] == "inconclusive"
    # The unchanged tier is not marked at the change, and noise is rarely marked at all.
    assert changes.filter(
        (pl.col("run_id") == "run-150") & (pl.col("model") == "sim-7b")
    ).is_empty()
    before = changes.filter((pl.col("run_id") < "run-150") & (pl.col("change") == "regressed"))
    assert before.height <= 2
    for name in ("history.html", "history.md", "history.csv", "charts/tpot_p50.png"):
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


def test_records_fallback_matches_summary(tmp_path: Path) -> None:
    with_summary, without = tmp_path / "a", tmp_path / "b"
    _runs(with_summary, 4)
    _runs(without, 4, summary=False)
    a = load_history(with_summary).points.sort("run_id", "model", "metric")
    b = load_history(without).points.sort("run_id", "model", "metric")
    assert a["value"].to_list() == pytest.approx(b["value"].to_list(), rel=1e-9)


def _config(prompts: str) -> dict[str, object]:
    return {"load": {"mode": "closed", "burstiness": 1.0}, "prompts": {"sets": [prompts]}}


def test_runs_compare_would_not_compare_start_a_new_segment(tmp_path: Path) -> None:
    """Six nights on the chat prompts, then six on the code prompts, then c=8 under the
    same scenario name: three segments, each starting with its reason, none with a band
    or a verdict against a run of another segment."""
    for i in range(14):
        prompts = "chat" if i < 6 else "code"
        scenarios = {"c=4": 8} if i >= 12 else {"c=4": 4}
        recs = make_records(f"r{i:02d}", seed=i, scenarios=scenarios)
        write_run(
            tmp_path,
            f"r{i:02d}",
            recs,
            started_at=_stamp(i),
            config=_config(prompts),
            scenarios=scenarios,
        )
    out, history = build_history(tmp_path)
    points = history.points.filter(pl.col("metric") == "tpot_p50")
    starts = points.filter(pl.col("segment_reason").is_not_null())
    assert {
        (r["run_id"], r["segment"], r["segment_reason"]) for r in starts.iter_rows(named=True)
    } == {
        ("r06", 1, "different prompts (config.prompts)"),
        ("r12", 2, "different load (scenario definition)"),
    }
    # The first run of a segment has no baseline, no band and no verdict; the others are
    # judged against a run of their own segment.
    firsts = points.filter(pl.col("run_id").is_in(["r00", "r06", "r12"]))
    assert firsts["band_low"].null_count() == firsts.height
    assert firsts["verdict"].null_count() == firsts.height
    for row in points.filter(pl.col("vs_run").is_not_null()).iter_rows(named=True):
        base = points.filter(pl.col("run_id") == row["vs_run"]).row(0, named=True)
        assert base["segment"] == row["segment"]
    md = (out / "history.md").read_text()
    assert "## Segments" in md and "different prompts (config.prompts)" in md
    assert "in 3 segments" in md


def test_bands_never_below_zero_and_marks_exactly_outside(tmp_path: Path) -> None:
    """A noisy history (each night 0.5x-2x the last, lognormal requests): every band
    is above zero, and a point is marked exactly when it lies outside its band."""
    import numpy as np

    rng = np.random.default_rng(5)
    for i in range(25):
        factor = float(np.exp(rng.normal(0.0, 0.5)))
        recs = make_records(
            f"r{i:02d}", seed=i, noise=0.6, slow={"sim-7b": factor, "sim-70b": 1.0 / factor}
        )
        write_run(tmp_path, f"r{i:02d}", recs, started_at=_stamp(i))
    history = load_history(tmp_path)
    banded = history.points.filter(pl.col("band_low").is_not_null())
    assert banded.height > 100
    assert (banded["band_low"] >= 0).all()
    assert (banded["band_low"] <= banded["baseline"]).all()
    assert (banded["baseline"] <= banded["band_high"]).all()
    # Latency and rate bands: the lower end stays above zero (log-space bands).
    latencies = banded.filter(pl.col("metric") != "error_rate")
    assert (latencies["band_low"] > 0).all()
    outside = (banded["value"] < banded["band_low"]) | (banded["value"] > banded["band_high"])
    assert (outside == banded["outside"]).all()
    assert (banded["change"].is_not_null() == banded["outside"]).all()
    assert history.changes.height == int(outside.sum()) > 0


def _nightly(root: Path, names: list[str], slow: dict[int, float]) -> None:
    """What `tokrate run --baseline latest-good` does each night, on stored runs."""
    for i, name in enumerate(names):
        factor = slow.get(i, 1.0)
        recs = make_records(name, seed=i, slow={"sim-70b": factor})
        run_dir = write_run(root, name, recs, started_at=_stamp(i))
        thresholds, noise = fit_thresholds(root, run_dir, ThresholdSet())
        check_baseline(run_dir, LATEST_GOOD, root, thresholds, noise=noise)


def test_marks_agree_with_what_the_nightly_compare_said(tmp_path: Path) -> None:
    """Twelve nights judged as the nightly recipe judges them (latest-good, thresholds
    fitted to the history), two of them slowed: history judges every night against the
    baseline its check recorded with the same fitted thresholds, so each row's verdict
    is the one in that night's comparison.json, and `tokrate compare` on the same pair
    says it again."""
    names = [f"n{i:02d}" for i in range(12)]
    _nightly(tmp_path, names, slow={7: 1.3, 8: 1.3})
    history = load_history(tmp_path)
    judged = 0
    for name in names[1:]:
        doc = json.loads((tmp_path / name / "comparison.json").read_text())
        recorded = {(r["model"], r["metric"]): r["verdict"] for r in doc["results"]}
        rows = history.points.filter(pl.col("run_id") == name)
        for row in rows.iter_rows(named=True):
            assert row["vs_run"] == doc["baseline"]["run_id"]
            assert row["verdict"] == recorded[(row["model"], row["metric"])], (name, row)
            judged += 1
    assert judged == 11 * 10
    marked = history.changes.filter(pl.col("change") == "regressed")
    assert set(marked["run_id"]) == {"n07", "n08"} and set(marked["model"]) == {"sim-70b"}
    # n08 was judged against n06 (n07 regressed, so latest-good stayed put).
    assert history.points.filter(pl.col("run_id") == "n08")["vs_run"].unique().to_list() == ["n06"]
    # tokrate compare on the same pair, with the history next to it, says the same.
    thresholds, noise = fit_thresholds(tmp_path, tmp_path / "n08", ThresholdSet())
    again = compare_runs(tmp_path / "n06", tmp_path / "n08", thresholds, noise=noise)
    regressed = {(r.model, r.metric) for r in again.results if r.verdict == "regressed"}
    assert regressed == {
        (m, metric)
        for m, metric in zip(
            marked.filter(pl.col("run_id") == "n08")["model"],
            marked.filter(pl.col("run_id") == "n08")["metric"],
            strict=True,
        )
    }


def test_history_md_is_plain_markdown(tmp_path: Path) -> None:
    recs = make_records("x", models=("a<b>&'c",), seed=1)
    write_run(tmp_path, "x", recs, summary=summary_of("x", recs))
    out, _ = build_history(tmp_path)
    md = (out / "history.md").read_text()
    for entity in ("&#", "&lt;", "&gt;", "&amp;", "&quot;"):
        assert entity not in md
    assert "a\\<b\\>\\&'c c=4" in md


def test_broken_and_newer_folders_are_skipped_with_a_warning(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _runs(tmp_path, 3)
    (tmp_path / "torn").mkdir()
    (tmp_path / "torn" / "run.json").write_text("{not json")
    recs = make_records("future", seed=9)
    write_run(tmp_path, "future", recs, layout_version=2, started_at=_stamp(5))
    newer = write_run(tmp_path, "newsummary", recs, started_at=_stamp(6))
    (newer / "summary.json").write_text(json.dumps({"schema_version": 99, "groups": []}))
    write_run(tmp_path, "killed", recs, status="running", started_at=_stamp(7))
    # A run's own confirmation re-measurement is part of it, never a run of its own.
    write_run(tmp_path / "run-000", "confirm", recs, started_at=_stamp(8))
    history = load_history(tmp_path)
    assert history.runs == 4  # three good runs + the one read from its records
    text = "\n".join(history.warnings)
    assert f"skipping {tmp_path / 'torn'}: run.json: unreadable" in text
    assert (
        f"skipping {tmp_path / 'future'}: run.json: layout_version 2 is not supported "
        "(known: [1]); upgrade tokrate"
    ) in text
    assert (
        f"{tmp_path / 'newsummary' / 'summary.json'}: schema_version 99 is not supported"
        f" (known: {sorted(SUMMARY_SCHEMA_HISTORY)}); upgrade tokrate; using records instead"
    ) in text
    assert f"skipping {tmp_path / 'killed'}: run status is 'running', not 'complete'" in text
    assert all("\n" not in w for w in history.warnings)
    assert main(["history", str(tmp_path), "-o", str(tmp_path / "out")]) == 0
    assert capsys.readouterr().err.count("tokrate: warning: ") == 4


def test_html_escapes_names(tmp_path: Path) -> None:
    recs = make_records("x", models=("<script>alert(1)</script>",), seed=1)
    write_run(tmp_path, "x", recs, summary=summary_of("x", recs))
    out, _ = build_history(tmp_path)
    html = (out / "history.html").read_text()
    assert "<script>" not in html and "&lt;script&gt;" in html


def test_bad_arguments() -> None:
    with pytest.raises(UsageError, match="no such directory"):
        load_history("/nonexistent/tokrate-history")
    with pytest.raises(UsageError, match="window"):
        load_history(".", window=1)
