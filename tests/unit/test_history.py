"""`tokrate history` over synthetic run folders: benchmarks, bands, marks, bad folders (the
200-folder history: tests/report/test_history_scale.py).

The folders are seeded lognormal records (tests/helpers/runfolders.py), so every planted
change, spread and configuration switch is known exactly.
"""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest
from helpers.runfolders import (
    make_records,
    night_stamp,
    summaries_of,
    summary_of,
    write_run,
    write_runs,
)

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


def test_summaries_of_many_runs_are_each_runs_own() -> None:
    """The fixtures' batched summary.json (one summarize call for many runs) is, run by
    run, the one summarize gives each run alone."""
    runs = {
        f"r{i}": make_records(f"r{i}", seed=i, n=30, error_every={"sim-70b": 7}) for i in range(3)
    }
    batched = summaries_of(runs)
    assert list(batched) == list(runs)
    for rid, recs in runs.items():
        assert batched[rid] == summary_of(rid, recs), rid


def test_records_fallback_matches_summary(tmp_path: Path) -> None:
    with_summary, without = tmp_path / "a", tmp_path / "b"
    write_runs(with_summary, 4)
    write_runs(without, 4, summary=False)
    a = load_history(with_summary).points.sort("run_id", "model", "metric")
    b = load_history(without).points.sort("run_id", "model", "metric")
    assert a["value"].to_list() == pytest.approx(b["value"].to_list(), rel=1e-9)


def _config(prompts: str) -> dict[str, object]:
    return {"load": {"mode": "closed", "burstiness": 1.0}, "prompts": {"sets": [prompts]}}


def test_each_benchmark_is_a_history_of_its_own(tmp_path: Path) -> None:
    """Six nights on the chat prompts, then six on the code prompts, then c=8 under the
    same scenario name, and one unrelated run in between: four benchmarks by
    fingerprint, each starting with how it differs, none judged against a run of
    another; the unrelated run changes nothing for the nights around it, and is left
    out of the pages (one run: no trend) with why."""
    for i in range(14):
        prompts = "chat" if i < 6 else "code"
        scenarios = {"c=4": 8} if i >= 12 else {"c=4": 4}
        recs = make_records(f"r{i:02d}", seed=i, scenarios=scenarios)
        write_run(
            tmp_path,
            f"r{i:02d}",
            recs,
            started_at=night_stamp(i),
            config=_config(prompts),
            scenarios=scenarios,
        )
    other = make_records("other", seed=99, models=("sim-1b",))
    write_run(tmp_path, "other", other, started_at="2026-01-01T03:30:00Z")
    out, history = build_history(tmp_path)
    points = history.points.filter(pl.col("metric") == "tpot_p50")
    starts = points.filter(pl.col("segment_reason").is_not_null())
    assert {
        (r["run_id"], r["segment"], r["segment_reason"]) for r in starts.iter_rows(named=True)
    } == {
        ("other", 1, "another benchmark: different targets"),
        ("r06", 2, "another benchmark: different prompts"),
        ("r12", 3, "another benchmark: different levels"),
    }
    # The first run of a benchmark has no reference, no band and no verdict; the others
    # are judged against runs of their own benchmark.
    firsts = points.filter(pl.col("run_id").is_in(["r00", "r06", "r12", "other"]))
    assert firsts["band_low"].null_count() == firsts.height
    assert firsts["verdict"].null_count() == firsts.height
    for row in points.filter(pl.col("vs_run").is_not_null()).iter_rows(named=True):
        base = points.filter(pl.col("run_id") == row["vs_run"]).row(0, named=True)
        assert base["segment"] == row["segment"]
    # r04 is judged against r00..r03 as if "other" had never run.
    r04 = points.filter(pl.col("run_id") == "r04").row(0, named=True)
    assert (r04["vs_run"], r04["reference_nights"]) == ("r03", 4)
    assert [b.drawn for b in history.benchmarks] == [True, False, True, True]
    assert history.left_out == (
        (
            "other",
            f"the only run of its benchmark ({history.benchmarks[1].fingerprint}:"
            " sim/sim-1b at c=4; prompts: set chat): no trend to draw",
        ),
    )
    md = (out / "history.md").read_text()
    assert "## Runs left out" in md and "no trend to draw" in md
    assert md.count("## benchmark ") == 3
    html = (out / "history.html").read_text()
    # error_rate is 0 in every run: no chart, a note per benchmark instead.
    assert html.count("data:image/png;base64,") == 3 * 4
    assert md.count("error rate over time: left out") == 3


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
        write_run(tmp_path, f"r{i:02d}", recs, started_at=night_stamp(i))
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
    """What `tokrate run --baseline latest-good` does each night, on stored runs: each
    night is written with its summary.json, as a finished run is, then checked.
    (Without one, every check re-summarised every earlier night from its records.)"""
    runs = {
        name: make_records(name, seed=i, slow={"sim-70b": slow.get(i, 1.0)})
        for i, name in enumerate(names)
    }
    summaries = summaries_of(runs)
    for i, (name, recs) in enumerate(runs.items()):
        run_dir = write_run(root, name, recs, started_at=night_stamp(i), summary=summaries[name])
        check_baseline(run_dir, LATEST_GOOD, root)


def test_marks_agree_with_what_the_nightly_compare_said(tmp_path: Path) -> None:
    """Twelve nights judged as the nightly recipe judges them (latest-good: the recent
    good nights, thresholds fitted to the history), two of them slowed: history judges
    every night against the same reference with the same fitted thresholds, so each
    row's verdict is the one in that night's comparison.json, and `tokrate compare`
    against the same reference's newest night, where that is the whole reference,
    says it again."""
    names = [f"n{i:02d}" for i in range(12)]
    _nightly(tmp_path, names, slow={7: 1.3, 8: 1.3})
    history = load_history(tmp_path)
    judged = 0
    for name in names[1:]:
        doc = json.loads((tmp_path / name / "comparison.json").read_text())
        recorded = {(r["model"], r["metric"]): r["verdict"] for r in doc["results"]}
        assert doc["reference"]["runs"][-1] == doc["baseline"]["run_id"]
        rows = history.points.filter(pl.col("run_id") == name)
        for row in rows.iter_rows(named=True):
            assert row["vs_run"] in doc["reference"]["runs"]
            assert row["verdict"] == recorded[(row["model"], row["metric"])], (name, row)
            judged += 1
    assert judged == 11 * 10
    marked = history.changes.filter(pl.col("change") == "regressed")
    assert set(marked["run_id"]) == {"n07", "n08"} and set(marked["model"]) == {"sim-70b"}
    # n08 was judged against the good nights before n07 (n07 regressed: no reference),
    # and says the change has lasted since n07, with the command that accepts it.
    n08 = history.points.filter((pl.col("run_id") == "n08") & (pl.col("model") == "sim-70b"))
    assert n08["vs_run"].unique().to_list() == ["n06"]
    assert n08["reference_nights"].unique().to_list() == [7]
    doc = json.loads((tmp_path / "n08" / "comparison.json").read_text())
    assert any(
        w.startswith("regressed since n07") and w.endswith(f"tokrate accept {tmp_path / 'n07'}")
        for w in doc["warnings"]
    ), doc["warnings"]
    # n09 is back to normal: judged against sim-70b's good nights (n07 and n08 left out)
    # and sim-7b's (which include them: they flagged only sim-70b).
    n09 = json.loads((tmp_path / "n09" / "comparison.json").read_text())
    assert n09["verdict"] == "ok" and n09["reference"]["runs"][-2:] == ["n07", "n08"]
    rows = history.points.filter(pl.col("run_id") == "n09")
    assert set(rows.filter(pl.col("model") == "sim-70b")["vs_run"]) == {"n06"}
    assert set(rows.filter(pl.col("model") == "sim-7b")["vs_run"]) == {"n08"}
    # tokrate compare of one night against one other, with the history next to it,
    # judges by the same fitted thresholds.
    fit = fit_thresholds(tmp_path, tmp_path / "n01", ThresholdSet())
    again = compare_runs(
        tmp_path / "n00",
        tmp_path / "n01",
        fit.thresholds,
        noise=fit.source,
        series_noise=fit.series,
    )
    first = json.loads((tmp_path / "n01" / "comparison.json").read_text())
    assert {(r.model, r.metric): r.verdict for r in again.results} == {
        (r["model"], r["metric"]): r["verdict"] for r in first["results"]
    }


def test_history_md_is_plain_markdown(tmp_path: Path) -> None:
    recs = make_records("x", models=("a<b>&'c",), seed=1)
    write_run(tmp_path, "x", recs, summary=summary_of("x", recs))
    out, _ = build_history(tmp_path)
    md = (out / "history.md").read_text()
    for entity in ("&#", "&lt;", "&gt;", "&amp;", "&quot;"):
        assert entity not in md
    # One run: no trend, listed among the runs left out, its name escaped.
    assert "sim/a\\<b\\>\\&'c at c=4" in md


def test_broken_and_newer_folders_are_skipped_with_a_warning(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_runs(tmp_path, 3)
    (tmp_path / "torn").mkdir()
    (tmp_path / "torn" / "run.json").write_text("{not json")
    recs = make_records("future", seed=9)
    write_run(tmp_path, "future", recs, layout_version=2, started_at=night_stamp(5))
    newer = write_run(tmp_path, "newsummary", recs, started_at=night_stamp(6))
    (newer / "summary.json").write_text(json.dumps({"schema_version": 99, "groups": []}))
    write_run(tmp_path, "killed", recs, status="running", started_at=night_stamp(7))
    # A run's own confirmation re-measurement is part of it, never a run of its own.
    write_run(tmp_path / "run-000", "confirm", recs, started_at=night_stamp(8))
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


def test_a_lasting_change_stays_flagged_until_accepted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A slowdown that lasts fails night after night (a regressed night is no
    reference); `tokrate accept` of the night it started makes it the new normal, and
    the next night of the same level passes against the accepted nights."""
    codes = []
    nights = {
        f"n{i:02d}": make_records(f"n{i:02d}", seed=i, slow={"sim-70b": 1.3 if i >= 7 else 1.0})
        for i in range(10)
    }
    # Each night with its summary.json, as a finished run has one.
    summaries = summaries_of(nights)
    for i, (name, recs) in enumerate(nights.items()):
        # The nights after the acceptance start after it (accepted.json: now).
        stamp = night_stamp(i) if i < 9 else "2099-01-01T00:00:00Z"
        run_dir = write_run(tmp_path, name, recs, started_at=stamp, summary=summaries[name])
        if i == 9:
            assert main(["accept", str(tmp_path / "n07"), "--note", "new server build"]) == 0
            assert "accepted n07 as the new normal" in capsys.readouterr().out
            accepted = json.loads((tmp_path / "n07" / "accepted.json").read_text())
            assert accepted["kind"] == "tokrate-acceptance"
            assert accepted["note"] == "new server build"
        codes.append(check_baseline(run_dir, LATEST_GOOD, tmp_path))
    assert codes[7:] == [1, 1, 0], codes
    doc = json.loads((tmp_path / "n09" / "comparison.json").read_text())
    assert doc["reference"]["runs"] == ["n07", "n08"] and doc["reference"]["accepted"] == "n07"
    # Only a complete run can be accepted.
    partial = write_run(tmp_path, "cut", make_records("cut", seed=99), status="interrupted")
    assert main(["accept", str(partial)]) == 2
    assert "only a complete run can be accepted" in capsys.readouterr().err
