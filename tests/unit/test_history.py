"""`tokrate history` over synthetic run folders: speed, change markers, bad folders."""

from __future__ import annotations

import json
import time
from pathlib import Path

import polars as pl
import pytest
from helpers.runfolders import make_records, summary_of, write_run

from tokrate.analysis.history import load_history
from tokrate.cli import main
from tokrate.errors import UsageError
from tokrate.report.history_pages import build_history


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


def test_two_hundred_runs_build_fast_and_mark_the_change(two_hundred: Path) -> None:
    started = time.perf_counter()
    out, history = build_history(two_hundred)
    elapsed = time.perf_counter() - started
    # Generous: ~1.5 s on the 2-core dev machine; the bound only catches a blow-up.
    assert elapsed < 30, elapsed
    assert history.runs == 200 and not history.warnings
    changes = history.changes
    hit = changes.filter((pl.col("run_id") == "run-150") & (pl.col("model") == "sim-70b"))
    assert set(hit["metric"]) >= {"tpot_p50", "e2e_p95", "decode_tps_p50"}
    assert set(hit["change"]) == {"regressed"}
    # The unchanged tier is not marked at the change, and noise is rarely marked at all.
    assert (
        changes.filter((pl.col("run_id") == "run-150") & (pl.col("model") == "sim-7b")).height == 0
    )
    stable = changes.filter(~pl.col("metric").is_in(["ttft_p95"]))
    assert stable.filter(pl.col("run_id") < "run-150").height <= 3
    for name in ("history.html", "history.md", "history.csv", "charts/tpot_p50.png"):
        assert (out / name).stat().st_size > 0, name
    html = (out / "history.html").read_text()
    assert html.count("data:image/png;base64,") == 5
    assert "run-150 (regressed)" in (out / "history.md").read_text()


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
    assert main(["history", str(two_hundred), "--metric", "bogus"]) == 2
    assert "--metric 'bogus': unknown metric" in capsys.readouterr().err


def test_records_fallback_matches_summary(tmp_path: Path) -> None:
    with_summary, without = tmp_path / "a", tmp_path / "b"
    _runs(with_summary, 4)
    _runs(without, 4, summary=False)
    a = load_history(with_summary).points.sort("run_id", "model", "metric")
    b = load_history(without).points.sort("run_id", "model", "metric")
    assert a["value"].to_list() == pytest.approx(b["value"].to_list(), rel=1e-9)


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
        " (known: [1, 2]); upgrade tokrate; using records instead"
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
        load_history(".", window=0)
