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

:mod:`tokrate.load.run` runs it (this module only derives its spec). The
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

from tokrate.runfolder.store import load_run_info
from tokrate.spec.types import ModelSpec, RunSpec

__all__ = ["CONFIRM_RUN_ID", "confirm_spec", "confirm_line"]

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
