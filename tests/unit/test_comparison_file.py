"""comparison.json read back (tokrate.runfolder.comparison): the process that measured
a run learns its verdict from the file, so what it reads must render exactly as the
comparison that was written."""

from __future__ import annotations

import io
from pathlib import Path

import orjson
import pytest
from helpers.runfolders import make_records, write_run
from rich.console import Console

from tokrate.analysis.compare import compare_runs
from tokrate.analysis.noise import fit_thresholds
from tokrate.errors import RunFolderError
from tokrate.finish.baseline import check_baseline
from tokrate.report.terminal.comparison_text import render_json, render_markdown, render_table
from tokrate.runfolder.comparison import Comparison, comparison_from_json, read_comparison
from tokrate.runfolder.store import LATEST_GOOD
from tokrate.spec.thresholds import ThresholdSet


def _table(c: Comparison) -> str:
    buf = io.StringIO()
    render_table(c, Console(file=buf, width=80, color_system=None))
    return buf.getvalue()


def _assert_reads_back(c: Comparison) -> None:
    back = comparison_from_json(orjson.loads(render_json(c)))
    assert render_json(back) == render_json(c)
    assert render_markdown(back) == render_markdown(c)
    assert _table(back) == _table(c)
    assert (back.verdict, back.exit_code, back.counts) == (c.verdict, c.exit_code, c.counts)


def test_a_regression_and_a_missing_model_read_back_as_written(tmp_path: Path) -> None:
    base = write_run(tmp_path, "base", make_records("base", seed=1))
    slow = make_records("cur", seed=2, slow={"sim-70b": 1.3}, models=("sim-70b", "sim-1b"))
    cur = write_run(tmp_path, "cur", slow)
    _assert_reads_back(compare_runs(base, cur, {"e2e_p95": "off", "ttft_p95": "+20%"}))


def test_thresholds_fitted_to_noise_read_back_per_series(tmp_path: Path) -> None:
    history = tmp_path / "history"
    for k in range(7):
        recs = make_records(f"night{k}", seed=10 + k, slow={"sim-7b": 1.0 + 0.06 * (k % 3)})
        write_run(history, f"night{k}", recs, started_at=f"2026-02-0{1 + k}T03:17:00Z")
    fit = fit_thresholds(history, history / "night6", ThresholdSet())
    thresholds, noise = fit.thresholds, fit.source
    assert thresholds.per_series and noise.fitted == len(thresholds.per_series)
    c = compare_runs(history / "night5", history / "night6", thresholds, noise=noise)
    _assert_reads_back(c)
    back = comparison_from_json(orjson.loads(render_json(c)))
    assert back.noise == noise


def test_inconclusive_rows_warnings_and_a_confirmation_read_back(tmp_path: Path) -> None:
    base = write_run(tmp_path, "base", make_records("base", seed=1), warnings=["base warned"])
    slow = make_records("cur", seed=2, slow={"sim-70b": 1.3, "sim-7b": 1.3})
    cur = write_run(tmp_path, "cur", slow, loop_lag={"c=4": 20.0}, warnings=["lagged"])
    write_run(cur, "confirm", make_records("confirm", seed=3, slow={"sim-70b": 1.3}))
    c = compare_runs(base, cur)
    assert c.inconclusive and c.confirmed
    assert any(r.confirmation is not None for r in c.results)
    _assert_reads_back(c)
    back = comparison_from_json(orjson.loads(render_json(c)))
    assert (back.baseline.warnings, back.current.warnings) == (("base warned",), ("lagged",))
    assert back.results == c.results


def test_the_run_folder_file(tmp_path: Path) -> None:
    root = tmp_path / "reports"
    first = write_run(root, "a", make_records("a", seed=1))
    assert check_baseline(first, LATEST_GOOD, root) == 0
    assert read_comparison(first) is None  # no baseline yet
    second = write_run(root, "b", make_records("b", seed=2))
    code = check_baseline(second, LATEST_GOOD, root)
    read = read_comparison(second)
    assert read is not None and read.exit_code == code and read.baseline_name == "a"
    with pytest.raises(RunFolderError, match="no comparison"):
        read_comparison(tmp_path)
    doc = orjson.loads((second / "comparison.json").read_bytes())
    (second / "comparison.json").write_bytes(orjson.dumps({**doc, "schema_version": 99}))
    with pytest.raises(RunFolderError, match="schema_version 99"):
        read_comparison(second)
