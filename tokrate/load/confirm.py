"""The confirmation pass of ``tokrate run --baseline``: a regression is measured twice
before it is reported.

Performance CI systems retrigger a failed benchmark before they alert: a one-off stall
of the machine or the provider during tonight's window would otherwise fail the night.
After the baseline check, the groups (endpoint, model, scenario) with a regressed row
that no re-measurement covered (comparison.json ``unconfirmed``) are measured once more,
and the check runs again: :func:`tokrate.analysis.compare.compare_loaded` reads the
re-measurement and a regressed row stands only when it regressed against the same
baseline, with the same threshold, too. One pass, never more; ``[compare] confirm =
false`` (``--no-confirm``) reports the first verdict as it is.

:func:`confirm` runs it after the run's last step (:func:`tokrate.load.run.run_benchmark`
calls it; it never runs the whole pipeline again): the re-measurement is the pipeline's
three steps (prepare, measure, finish) on a spec of its own, quiet but for its
warnings, under its own stop signals; then the baseline step alone on the run. The
re-measurement is a run folder of its own, ``<run>/confirm/`` (run.json, records,
summary; no report, no baseline check): this run's spec with only the flagged
scenarios, and the same targets the server saw in them: all of them when the targets
share the measured window (``interleaved``, ``parallel``), only the flagged ones when
they take turns (``sequential``). Scenario names, seeds and prompts are the spec's, so
it sends the same requests in the same order; the embedded simulator is started
afresh, as a retrigger would.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path

from tokrate.errors import TokrateError
from tokrate.load.finish import RunResult, finish, judge_again, verdict
from tokrate.load.live import LiveOutput
from tokrate.load.measure import measure
from tokrate.load.prepare import prepare
from tokrate.load.signals import SignalStopper, stop_on_signals
from tokrate.load.worker.stopping import Stop
from tokrate.runfolder.store import load_run_info
from tokrate.spec.types import ModelSpec, RunSpec

__all__ = ["CONFIRM_RUN_ID", "confirm", "confirm_line", "confirm_spec", "to_confirm"]

#: The re-measurement's run id: the folder name inside the run folder
#: (tokrate.analysis.compare.CONFIRM_FOLDER reads it).
CONFIRM_RUN_ID = "confirm"


def confirm_spec(spec: RunSpec, run_dir: Path, groups: Sequence[tuple[str, str, str]]) -> RunSpec:
    """The spec of the re-measurement of ``groups`` (endpoint, model, scenario) of the
    run in ``run_dir`` (module doc). Raises RunFolderError for an unreadable run.json."""
    info = load_run_info(run_dir)
    flagged = {scenario for _, _, scenario in groups}
    levels = [s for s in info.scenarios if s.name in flagged]
    load = spec.load
    if load.mode == "closed":
        conc = sorted({s.concurrency for s in levels if s.concurrency is not None})
        load = dataclasses.replace(load, concurrency=tuple(conc) or load.concurrency)
    else:
        rates = sorted({s.rate_rps for s in levels if s.rate_rps is not None})
        load = dataclasses.replace(load, rates=tuple(rates) or load.rates)
    models = spec.models
    if load.targets == "sequential":
        wanted = {(e, m) for e, m, _ in groups}
        models = tuple(ModelSpec(endpoint=e, name=m) for e, m in sorted(wanted))
        if spec.models:
            models = tuple(m for m in spec.models if (m.endpoint, m.name) in wanted) or models
    output = dataclasses.replace(
        spec.output,
        dir=str(run_dir),
        run_id=CONFIRM_RUN_ID,
        report=False,
        label=f"{info.name} (confirmation)",
    )
    return dataclasses.replace(spec, load=load, models=models, output=output, baseline=None)


def confirm_line(groups: Sequence[tuple[str, str, str]]) -> str:
    """The line the terminal shows before the re-measurement."""
    listed = ", ".join(sorted({f"{model} {scenario}" for _, model, scenario in groups}))
    return f"regression in {listed}: measuring it again before reporting it"


def to_confirm(spec: RunSpec, result: RunResult) -> tuple[tuple[str, str, str], ...]:
    """The groups (endpoint, model, scenario) of ``result`` whose regression is to be
    measured again: its comparison's ``unconfirmed``, unless ``compare.confirm`` is off."""
    if result.comparison is None or not spec.compare.confirm:
        return ()
    return result.comparison.unconfirmed


def confirm(
    spec: RunSpec, result: RunResult, groups: Sequence[tuple[str, str, str]], live: LiveOutput
) -> RunResult:
    """``result`` of the run ``spec`` described, after its regressed ``groups`` were
    measured again into ``<run>/confirm`` and its baseline check ran again on that
    re-measurement (module doc): its comparison, exit code and verdict line are the
    second check's. The re-measurement's own outcome does not matter: one that failed
    or was stopped confirms nothing, and the regression stands as measured (``live``
    says so). Raises FinishError when the second check fails."""
    live.notice("confirm", confirm_line(groups))
    try:
        _measure_again(confirm_spec(spec, result.run_dir, groups), live.quieted())
    except TokrateError as err:
        live.notice("warning", f"the re-measurement did not run ({err}); the regression stands")
    return verdict(spec, result, judge_again(spec, result.run_dir))


def _measure_again(again: RunSpec, live: LiveOutput) -> None:
    """The re-measurement: prepare, measure and finish ``again`` (no report, no
    baseline check), under stop signals of its own (a signal stops it, not the run)."""
    stopper = SignalStopper(Stop())
    with stop_on_signals(stopper):
        with prepare(again, live, stopper) as prepared:
            measured = measure(prepared, live)
        finish(measured, live)
