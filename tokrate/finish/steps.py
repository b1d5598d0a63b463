"""The finishing process's work, step by step (the protocol is tokrate.finish.child's).

:func:`finish` runs the steps a :class:`~tokrate.finish.child.FinishRequest` asks for
and returns the ones that failed as :class:`~tokrate.finish.child.FinishProblem`s: it
writes files (through the store and the report) and nothing else. A failed finalize
ends the work (nothing after it has a summary to read); a failed report does not stop
the baseline check, since the measurements and the summary are already saved. A stop
signal (tokrate.finish.stopping) never cuts finalizing short; it skips the report and
the baseline check, or stops the one running, each then a problem marked ``stopped``.
"""

from __future__ import annotations

from tokrate.errors import TokrateError
from tokrate.finish.child import FinishProblem, FinishRequest, Step
from tokrate.finish.stopping import ChildSignals, FinishStopped, signal_name
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


def _stopped(step: Step, signals: ChildSignals) -> FinishProblem:
    signum = signals.signum or 0
    what = "the report" if step == "report" else "the baseline check"
    return FinishProblem(
        step, 128 + signum, f"{what} was skipped: stopped by {signal_name(signum)}", stopped=True
    )


def finish(request: FinishRequest, signals: ChildSignals | None = None) -> list[FinishProblem]:
    """Run every step ``request`` asks for, in order (module doc); ``signals``: the
    process's stop signals (tokrate.finish.stopping): finalize runs through them, the
    report and the baseline check are skipped, or cut short, by one."""
    signals = signals or ChildSignals()
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
            with signals.abortable():
                from tokrate.report.build import build_report

                build_report([run_dir], formats=request.report_formats)
        except FinishStopped:
            problems.append(_stopped("report", signals))
        except Exception as err:  # any failure: the run is saved, the report is rebuilt later
            problems.append(_problem("report", err))
    if request.baseline is not None:
        from tokrate.finish.baseline import check_baseline
        from tokrate.spec.thresholds import merge_thresholds, parse_threshold

        try:
            with signals.abortable():
                root = request.reports_root or run_dir.parent
                thresholds = merge_thresholds(parse_threshold(t) for t in request.thresholds)
                check_baseline(
                    run_dir, request.baseline, root, thresholds, request.thresholds_from_history
                )
        except FinishStopped:
            problems.append(_stopped("baseline", signals))
        except TokrateError as err:
            problems.append(_problem("baseline", err))
    return problems
