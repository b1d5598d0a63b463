"""The one child after the load (``python -m tokrate.finish``, tokrate.finish.child):
it answers in the run folder, prints nothing, reports each failed step as one line,
and a failed report never stops the baseline check."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from helpers.runfolders import make_records

from tokrate.finish.child import FinishProblem, FinishRequest, run_finish
from tokrate.runfolder.comparison import read_comparison
from tokrate.runfolder.loaded_run import load_run
from tokrate.runfolder.run_info import RunInfo, ScenarioInfo, TargetInfo
from tokrate.runfolder.store import LATEST_GOOD, RunStore, load_summary


def measured(root: Path, run_id: str, seed: int = 1) -> Path:
    """A run folder as the measuring process leaves it: run.json "running" and every
    record in records.jsonl, nothing else."""
    store = RunStore(root / run_id)
    store.start(
        RunInfo(
            run_id=run_id,
            targets=tuple(TargetInfo(endpoint="sim", model=m) for m in ("sim-7b", "sim-70b")),
            scenarios=(ScenarioInfo("c=4", 4, None, None),),
        )
    )
    for record in make_records(run_id, seed=seed):
        store.append(record)
    store.close()
    return store.path


def test_every_step_answers_in_the_run_folder_and_prints_nothing(tmp_path: Path) -> None:
    root = tmp_path / "reports"
    run_dir = measured(root, "a")
    request = FinishRequest(
        run_dir,
        status="complete",
        report_formats=("svg",),
        baseline=LATEST_GOOD,
        reports_root=root,
    )
    done = subprocess.run(
        [sys.executable, "-m", "tokrate.finish", *request.argv()],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")
    loaded = load_run(run_dir)
    assert loaded.info.status == "complete" and loaded.info.calibration is not None
    assert loaded.summary is not None and loaded.summary == load_summary(run_dir)
    assert (run_dir / "records.parquet").is_file() and (run_dir / "report.html").is_file()
    assert read_comparison(run_dir) is None  # no baseline yet: it became latest-good
    assert (root / LATEST_GOOD).read_text().strip() == "a"
    # The next run is judged against it, by the baseline step alone on a finished folder.
    second = measured(root, "b", seed=2)
    assert run_finish(FinishRequest(second, status="complete")).problems == ()
    again = FinishRequest(second, baseline=LATEST_GOOD, reports_root=root)
    assert again.steps == ("baseline",)
    assert run_finish(again).problems == ()
    comparison = read_comparison(second)
    assert comparison is not None and comparison.baseline_name == "a"


def test_a_failed_report_is_one_line_and_the_baseline_still_runs(tmp_path: Path) -> None:
    root = tmp_path / "reports"
    run_dir = measured(root, "a")
    outcome = run_finish(
        FinishRequest(
            run_dir,
            status="complete",
            report_formats=("bogus",),
            baseline=LATEST_GOOD,
            reports_root=root,
        )
    )
    (problem,) = outcome.problems
    assert problem.step == "report" and problem.exit_code == 2 and "bogus" in problem.error
    assert (run_dir / "comparison.json").is_file()


def test_a_failed_finalize_stops_every_later_step(tmp_path: Path) -> None:
    run_dir = measured(tmp_path, "a")
    (run_dir / "records.jsonl").unlink()
    outcome = run_finish(FinishRequest(run_dir, status="complete", report_formats=("svg",)))
    (problem,) = outcome.problems
    assert problem.step == "finalize" and problem.exit_code == 2
    assert "records.jsonl" in problem.error and "\n" not in problem.error
    assert not (run_dir / "report.html").exists()
    assert load_run(run_dir).info.status == "running"


def test_a_child_that_runs_out_of_time_is_the_problem_of_its_step(tmp_path: Path) -> None:
    run_dir = measured(tmp_path, "a")
    outcome = run_finish(FinishRequest(run_dir, status="complete"), timeout_s=0.01)
    (problem,) = outcome.problems
    assert problem.step == "finalize" and "ran past" in problem.error


@pytest.mark.parametrize(
    "request_",
    [
        FinishRequest(Path("r")),
        FinishRequest(Path("r"), status="interrupted", report_formats=("png", "svg")),
        FinishRequest(
            Path("r"),
            baseline="latest-good",
            reports_root=Path("root"),
            thresholds=("ttft_p95=+20%", "e2e_p95=off"),
            thresholds_from_history="hist",
        ),
    ],
)
def test_the_request_is_its_argv(request_: FinishRequest) -> None:
    assert FinishRequest.parse(request_.argv()) == request_


def test_a_problem_is_one_line_that_reads_back() -> None:
    problem = FinishProblem("baseline", 2, 'a "quoted" reason')
    assert "\n" not in problem.line()
    assert FinishProblem.from_line(problem.line()) == problem
    assert FinishProblem.from_line("UserWarning: something else") is None
