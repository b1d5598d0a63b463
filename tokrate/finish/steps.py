"""The finishing process's work, step by step (the protocol is tokrate.finish.child's).

:func:`finish` runs the steps a :class:`~tokrate.finish.child.FinishRequest` asks for
and returns the ones that failed as :class:`~tokrate.finish.child.FinishProblem`s: it
writes files (through the store and the report) and nothing else. A failed finalize
ends the work (nothing after it has a summary to read); a failed report does not stop
the baseline check, since the measurements and the summary are already saved.
"""

from __future__ import annotations

from tokrate.errors import TokrateError
from tokrate.finish.child import FinishProblem, FinishRequest, Step
from tokrate.redact import strip_control

__all__ = ["finish"]


def _problem(step: Step, err: BaseException) -> FinishProblem:
    """One line for a step's error: a TokrateError's own words (and exit code); any
    other exception with its type, as a traceback's last line names it."""
    if isinstance(err, TokrateError):
        code, text = err.exit_code, str(err)
    else:
        code, text = 1, f"{type(err).__name__}: {err}"
    return FinishProblem(step, code, " ".join(strip_control(text).split()))


def finish(request: FinishRequest) -> list[FinishProblem]:
    """Run every step ``request`` asks for, in order (module doc)."""
    problems: list[FinishProblem] = []
    run_dir = request.run_dir
    if request.status is not None:
        from tokrate.finish.finalize import finalize_run_folder

        try:
            finalize_run_folder(run_dir, request.status)
        except TokrateError as err:
            return [_problem("finalize", err)]
    if request.report_formats:
        try:
            from tokrate.report.build import build_report

            build_report([run_dir], formats=request.report_formats)
        except Exception as err:  # any failure: the run is saved, the report is rebuilt later
            problems.append(_problem("report", err))
    if request.baseline is not None:
        from tokrate.finish.baseline import baseline_thresholds, check_baseline

        try:
            root = request.reports_root or run_dir.parent
            thresholds, noise = baseline_thresholds(
                run_dir, root, request.thresholds, request.thresholds_from_history
            )
            check_baseline(run_dir, request.baseline, root, thresholds, noise=noise)
        except TokrateError as err:
            problems.append(_problem("baseline", err))
    return problems
