"""Issue 27: compare and history gate on the prompt-cache hit rate, on real simulator
runs (the embedded simulator over 127.0.0.1, run_benchmark, compare_runs).

A shared-prefix workload against the simulator with its prefix cache on, twice (same
seeds: the same prompts in the same order, so the same blocks hit), and once against
``prefix_cache_cold`` (the cache is looked up but keeps nothing: usage reports 0 cached
tokens, a provider whose cache stopped working). The hit rates are the simulator's own
token counts, not timings, so the verdicts hold on a loaded machine.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest
from helpers.specs import sim_spec

from tokrate.analysis.compare import compare_runs
from tokrate.analysis.history import load_history
from tokrate.load.run import run_benchmark
from tokrate.runfolder.comparison import MetricResult
from tokrate.spec.thresholds import DEFAULT_COMPARE_THRESHOLDS
from tokrate.spec.types import PromptsSpec, SharedPrefixSpec, SimulatorSpec

#: 8 shared-prefix prompts and 8 unique-prefix controls, each sent once.
PROMPTS = PromptsSpec(
    shared_prefix=SharedPrefixSpec(prefix_tokens=1024, input_tokens=32, output_tokens=4, count=8)
)


def _run(root: Path, name: str, simulator: SimulatorSpec) -> Path:
    spec = sim_spec(
        None,
        root,
        models=("sim-7b",),
        run_id=name,
        prompts=PROMPTS,
        simulator=simulator,
        concurrency=(1,),
        requests=16,
    )
    return Path(run_benchmark(spec, quiet=True).run_dir)


def _cache_row(base: Path, cur: Path) -> MetricResult:
    (row,) = [r for r in compare_runs(base, cur).results if r.metric == "cache_hit_rate"]
    return row


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("cache_gate")
    silent = tmp_path_factory.mktemp("cache_off")
    warm = SimulatorSpec(time_scale=4.0, prefix_cache=True)
    cold = SimulatorSpec(time_scale=4.0, prefix_cache_cold=True)
    off = SimulatorSpec(time_scale=4.0)
    return {
        "warm1": _run(root, "warm1", warm),
        "warm2": _run(root, "warm2", warm),
        "cold": _run(root, "cold", cold),
        "off1": _run(silent, "off1", off),
        "off2": _run(silent, "off2", off),
    }


def test_a_cache_that_stopped_working_is_a_regression(runs: dict[str, Path]) -> None:
    records = pl.read_parquet(runs["warm1"] / "records.parquet")
    shared = records.filter(pl.col("task") == "shared-prefix")
    # All but the first shared-prefix request found the 1024-token prefix cached (in
    # whole 16-token blocks).
    assert (shared["cached_tokens"] >= 1024 - 16).sum() == shared.height - 1
    row = _cache_row(runs["warm1"], runs["cold"])
    assert row.verdict == "regressed", row.reason
    assert row.current == 0.0 and row.n_current == 16
    assert row.baseline is not None and row.baseline > 0.3
    assert row.ci_high is not None and row.ci_high < 0


def test_two_identical_runs_are_not_flagged(runs: dict[str, Path]) -> None:
    row = _cache_row(runs["warm1"], runs["warm2"])
    assert row.verdict == "unchanged"
    assert row.baseline == row.current and row.change == 0.0


def test_no_row_when_neither_run_reports_cached_tokens(runs: dict[str, Path]) -> None:
    rows = compare_runs(runs["off1"], runs["off2"]).results
    assert rows and "cache_hit_rate" not in {r.metric for r in rows}


def test_history_marks_the_drop(runs: dict[str, Path]) -> None:
    history = load_history(
        runs["warm1"].parent, metrics=("cache_hit_rate",), thresholds=DEFAULT_COMPARE_THRESHOLDS
    )
    points = history.points.sort("started_at")
    assert points["run_id"].to_list() == ["warm1", "warm2", "cold"]
    assert points["value"][2] == 0.0
    assert points.filter(pl.col("outside"))["run_id"].to_list() == ["cold"]
