"""Stop signals of a run, the same in every phase for Ctrl-C, SIGTERM and SIGHUP.

One :class:`SignalStopper` holds the run's handlers from its first step to its last
(:func:`stop_on_signals`); what a signal does depends on the phase the run is in:

- ``prepare`` (reading the config's files, the pre-flight, starting the simulator):
  nothing was sent, so the work stops at once: :class:`RunInterrupted` (a
  KeyboardInterrupt, so no ``except Exception`` swallows it) is raised where the run
  stands, the run folder it had created is removed (it would block the run id), and
  the CLI says so in one line, exit 128 + signal.
- ``measure``: workers stop scheduling, in-flight requests get their grace period and
  the rest are recorded as cancelled; a third signal ends the grace period at once.
- ``finish`` (after the load: run.json, the finishing child): nothing is cut short
  that the run's files need. The signal is passed to the finishing child
  (:attr:`SignalStopper.child`), which still writes records.parquet, summary.json
  and the final run.json and skips the report and the baseline check; this process
  waits for it, whatever arrives, and names the command that builds the report.

The exit code is 128 + the first signal (130 Ctrl-C, 143 SIGTERM, 129 SIGHUP).
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from typing import Final, Literal

from tokrate.finish.child import ChildStop
from tokrate.finish.stopping import signal_name
from tokrate.load.worker.stopping import Stop

__all__ = ["Phase", "RunInterrupted", "SignalStopper", "stop_on_signals"]

#: The signals that stop a run, and their exit codes (128 + signal number).
_STOP_SIGNALS: Final = ("SIGINT", "SIGTERM", "SIGHUP")

Phase = Literal["prepare", "measure", "finish"]


class RunInterrupted(KeyboardInterrupt):
    """A stop signal before the load: nothing was sent and nothing is kept.
    ``signum`` is the signal; the exit code is 128 + it."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal_name(signum))
        self.signum = signum

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


class SignalStopper:
    """Which stop signal arrived first (its exit code), how many arrived, and what each
    does in the run's current ``phase`` (module doc)."""

    def __init__(self, stop: Stop) -> None:
        self.stop = stop
        self.signum: int | None = None
        self.count = 0
        self.phase: Phase = "prepare"
        #: Passes a signal on to the finishing child (it stops after what it must write).
        self.child = ChildStop()
        #: A signal came while the run was finishing (the child was, or will be, told).
        self.during_finish = False

    def handle(self, signum: int, _frame: object) -> None:
        self.count += 1
        if self.signum is None:
            self.signum = signum
        if self.phase == "prepare":
            raise RunInterrupted(signum)
        if self.phase == "finish":
            self.during_finish = True
            self.child.request(signum)
            return
        self.stop.set()
        if self.count >= 3:
            # The third signal ends the grace period now; the workers still record
            # what was in flight as cancelled, and every file is still written.
            self.stop.abort()

    def enter(self, phase: Phase) -> None:
        """The run moves on to ``phase``."""
        self.phase = phase

    @property
    def signalled(self) -> bool:
        return self.signum is not None

    @property
    def exit_code(self) -> int:
        return 128 + (self.signum if self.signum is not None else signal.SIGINT)

    @property
    def name(self) -> str:
        return signal_name(self.signum if self.signum is not None else signal.SIGINT)


@contextlib.contextmanager
def stop_on_signals(stopper: SignalStopper) -> Iterator[None]:
    """The stopper's handler for every stop signal while the block runs (module doc),
    the previous handlers after it. Only in the main thread (where handlers can be
    installed); elsewhere the run is stopped through its ``Stop`` alone."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {}
    for name in _STOP_SIGNALS:
        sig = getattr(signal, name, None)
        if sig is not None:
            previous[sig] = signal.signal(sig, stopper.handle)
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
