"""The last step of a run: the finishing child, what it said, and the verdict.

:func:`finish` runs one child process (:mod:`tokrate.finish.child`: ``python -m
tokrate.finish``), which writes records.parquet, server_metrics.parquet, summary.json
and the final run.json, builds the report and runs the baseline check; this process
reads summary.json and comparison.json back with their readers and never imports
polars, numpy or matplotlib for any of it. Then it shows the run's warnings and makes
the :class:`RunResult`. A target that got no ok request at all makes the exit code 1,
with one line per such target naming its error classes and counts.

A signal that arrived after the load (tokrate.load.signals: its finish phase) was
passed on to the child, which still writes records.parquet, summary.json and the
final run.json and skips the report and the baseline check; the result then names
that signal (``stopped_by``) and exits 128 + it.

The confirmation of a regression (tokrate.load.confirm) runs after this step, on its
result.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from tokrate.errors import FinishError
from tokrate.finish.child import FinishOutcome, FinishRequest, run_finish
from tokrate.load.live import LiveOutput
from tokrate.load.measure import Measured
from tokrate.runfolder.store import load_summary
from tokrate.runfolder.summary import Summary
from tokrate.spec.types import RunSpec

if TYPE_CHECKING:
    from tokrate.runfolder.comparison import Comparison

__all__ = ["RunResult", "finish", "judge_again", "verdict"]


@dataclass(frozen=True, slots=True)
class RunResult:
    """What a run produced. ``exit_code``: 0 ok; 1 a baseline regression (confirmed by
    a re-measurement unless ``compare.confirm`` is off) or a target that got no ok
    request; 2 nothing comparable with the baseline; 3 no regression, but a verdict
    was inconclusive (client overloaded, too few samples); 128 + signal when a signal
    stopped it (130 Ctrl-C, 143 SIGTERM).

    ``warnings`` are one line each (repeats of one kind collapsed); ``failed_targets``
    the lines naming every target with no ok request (its error classes with counts);
    ``comparison`` the Comparison of a ``baseline`` check, as comparison.json holds it
    (None without one, or when there was no baseline yet); ``baseline_result`` a
    one-line verdict of that check.
    """

    run_dir: Path
    summary: Summary | None
    exit_code: int
    interrupted: bool
    warnings: tuple[str, ...] = ()
    failed_targets: tuple[str, ...] = ()
    label: str | None = None
    comparison: Comparison | None = None
    baseline_result: str | None = None
    #: The signal (``SIGTERM``) that came after the load, while its files were being
    #: finished: the load is whole, the report or baseline check skipped (warnings).
    stopped_by: str | None = None


def finish(m: Measured, live: LiveOutput) -> RunResult:
    """The finishing child for the measured run, its warnings on ``live``, and the
    result (module doc). Raises FinishError when the run's files could not be finished
    or the baseline check failed (the records are saved in records.jsonl either way)."""
    stopper = m.stopper
    outcome = run_finish(_request(m.spec, m.run_dir, m.interrupted), stop=stopper.child)
    live.notices(m.end_notices)
    late = _finish_warnings(outcome, m.run_dir)
    for line in late:
        live.notice("warning", line)
    _raise_problems(outcome, m.run_dir)
    result = RunResult(
        run_dir=m.run_dir,
        summary=load_summary(m.run_dir),
        exit_code=stopper.exit_code if stopper.signalled else (1 if m.failed_targets else 0),
        interrupted=m.interrupted,
        warnings=(*m.warnings, *late),
        failed_targets=m.failed_targets,
        label=m.spec.output.label,
        stopped_by=stopper.name if stopper.signalled and not m.interrupted else None,
    )
    if m.spec.baseline and not m.interrupted and not stopper.signalled:
        from tokrate.runfolder.comparison import read_comparison

        result = verdict(m.spec, result, read_comparison(m.run_dir))
    return result


def verdict(spec: RunSpec, result: RunResult, comparison: Comparison | None) -> RunResult:
    """``result`` (a run that was not stopped, with a baseline) with ``comparison``
    as its baseline check's verdict: its exit code and its one-line verdict."""
    from tokrate.report.terminal.comparison_text import baseline_verdict_line
    from tokrate.runfolder.comparison import combined_exit

    assert spec.baseline is not None
    run_code = 1 if result.failed_targets else 0
    return dataclasses.replace(
        result,
        comparison=comparison,
        exit_code=combined_exit(run_code, 0 if comparison is None else comparison.exit_code),
        baseline_result=baseline_verdict_line(spec.baseline, comparison),
    )


def judge_again(spec: RunSpec, run_dir: Path) -> Comparison | None:
    """The baseline step alone, again, on the finished run in ``run_dir`` (a
    confirmation re-judging it with its re-measurement), and its comparison. Raises
    FinishError as :func:`finish`."""
    from tokrate.runfolder.comparison import read_comparison

    request = dataclasses.replace(
        _request(spec, run_dir, interrupted=False), status=None, report_formats=()
    )
    _raise_problems(run_finish(request), run_dir)
    return read_comparison(run_dir)


def _request(spec: RunSpec, run_dir: Path, interrupted: bool) -> FinishRequest:
    """What the finishing process does after this load (no baseline check after a
    stop: an interrupted run is judged by nobody)."""
    baseline = None if interrupted else spec.baseline
    return FinishRequest(
        run_dir=run_dir,
        status="interrupted" if interrupted else "complete",
        report_formats=tuple(spec.output.formats) if spec.output.report else (),
        baseline=baseline,
        reports_root=Path(spec.output.dir),
        thresholds=tuple(spec.compare.thresholds),
        thresholds_from_history=spec.compare.thresholds_from_history,
    )


def _raise_problems(outcome: FinishOutcome, run_dir: Path) -> None:
    """A failed finalize or baseline check is this run's error (the records are saved
    in records.jsonl either way); a failed report, or a step a signal skipped, is only
    a warning (_finish_warnings)."""
    finalize = outcome.problem("finalize")
    if finalize is not None:
        raise FinishError(
            f"{run_dir}: the run's files were not finished ({finalize.error}); every record"
            " is in records.jsonl",
            finalize.exit_code,
        )
    baseline = outcome.problem("baseline")
    if baseline is not None and not baseline.stopped:
        raise FinishError(baseline.error, baseline.exit_code)


def _finish_warnings(outcome: FinishOutcome, run_dir: Path) -> list[str]:
    """The warnings of a report that was not built (the measurements are safe on disk,
    so it says how to build it) and of a baseline check a signal skipped."""
    out = []
    report = outcome.problem("report")
    if report is not None:
        why = report.error or "the report process failed"
        out.append(f"report not built: tokrate report {run_dir} ({why}; the run is saved)")
    baseline = outcome.problem("baseline")
    if baseline is not None and baseline.stopped:
        out.append(f"{baseline.error}; the run is saved")
    return out
