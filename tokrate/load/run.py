"""``run_benchmark(spec)``: the whole of ``tokrate run`` as one library call.

Three steps, each finishing before the next starts, and what passes between them is
one frozen value; nothing is sent before *measure* but the pre-flight's probes:

- **prepare** (:func:`tokrate.load.prepare.prepare` -> :class:`~tokrate.load.prepare.
  Prepared`): the keys, prompts, targets, pre-flight, plan, backend and run folder;
  a failure leaves no run folder behind.
- **measure** (:func:`tokrate.load.measure.measure` -> :class:`~tokrate.load.measure.
  Measured`): the load (a sweep or a capacity search) and run.json's account of it.
- **finish** (:func:`tokrate.load.finish.finish` -> :class:`~tokrate.load.finish.
  RunResult`): the finishing child (summary, report, baseline check) and the verdict.

With ``--baseline``, a regression is measured once more before it is reported
(:func:`tokrate.load.confirm.confirm`, which runs the three steps on the regressed
scenarios and judges the run again). Everything a person sees while the run goes
passes through one :class:`~tokrate.load.live.LiveOutput`.

Ctrl-C, SIGTERM (what ``timeout`` and CI schedulers send) and SIGHUP all stop the run
the same way, in every phase (tokrate.load.signals): before the load, at once, leaving
no run folder; during it, workers stop scheduling, in-flight requests get the grace
period, the rest are recorded as cancelled, everything is written with status
"interrupted"; after it, the finishing child still writes records.parquet,
summary.json and the final run.json, skips the report and the baseline check, and
this process waits for it. The exit code is 128 + the signal (130 for Ctrl-C, 143 for
SIGTERM, 129 for SIGHUP). A third signal during the load ends the grace period at once
(in-flight requests recorded as cancelled, every file still written).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from tokrate.load.confirm import confirm, to_confirm
from tokrate.load.finish import RunResult, finish
from tokrate.load.live import LiveOutput
from tokrate.load.measure import measure
from tokrate.load.prepare import prepare
from tokrate.load.signals import SignalStopper, stop_on_signals
from tokrate.load.worker.stopping import Stop
from tokrate.spec.types import RunSpec

if TYPE_CHECKING:
    from rich.console import Console

__all__ = ["run_benchmark"]


def run_benchmark(
    spec: RunSpec,
    *,
    console: Console | None = None,
    quiet: bool = False,
    stop: Stop | None = None,
    base_dir: Path | None = None,
) -> RunResult:
    """Run the benchmark ``spec`` describes and write its run folder (module doc).

    ``console`` is a rich Console for live progress and warnings (None: no drawing; a
    console that is not a terminal gets one plain progress line every
    ``spec.output.progress_interval_s``); ``quiet`` suppresses the progress but not
    warnings or the lines naming failed targets. ``stop`` (set it from another thread)
    stops the run as a signal would. ``base_dir`` resolves relative prompt paths
    (default: the config file's folder, else the cwd). Nothing here draws a table.

    Raises: ConfigError (ModelNotServed among them), PromptError, OutputError,
    RunFolderError, EndpointUnreachable (all before any load is sent, leaving no run
    folder); SimulatorError when the embedded simulator cannot start; FinishError when
    the run's files could not be finished or the baseline check failed (the records
    are saved either way).
    """
    live = LiveOutput(console, quiet=quiet)
    stopper = SignalStopper(stop or Stop())
    with stop_on_signals(stopper):
        with prepare(spec, live, stopper, base_dir) as prepared:
            measured = measure(prepared, live)
        result = finish(measured, live)
        groups = to_confirm(spec, result)
        if groups:
            result = confirm(spec, result, groups, live)
        return result
