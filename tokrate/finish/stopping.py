"""Stop signals in the finishing process: what it must write is written, the rest is
skipped.

The parent (the process that measured) runs this child in a session of its own, so a
Ctrl-C at the terminal reaches the parent alone; the parent passes each stop signal on
through a pipe (``--stop-fd``: one byte, the signal's number), which the child reads
from a thread of its own. A byte written before the child started reading waits in the
pipe, so a signal that came while the child was starting is never lost. A signal sent
to the child itself is handled the same way.

Finalizing (records.parquet, summary.json, the final run.json) is never cut short: a
signal then is noted and the report and baseline steps that follow are skipped. During
those two steps a signal stops the step at once (:class:`FinishStopped`, raised where
it stands; every file is written atomically, so nothing is left half-written).
"""

from __future__ import annotations

import _thread
import contextlib
import os
import signal
import threading
from collections.abc import Iterator
from typing import Final

__all__ = ["ChildSignals", "FinishStopped", "signal_name"]

_STOP_SIGNALS: Final = ("SIGINT", "SIGTERM", "SIGHUP")


def signal_name(signum: int) -> str:
    """``SIGTERM`` for 15; ``signal 42`` for a number without a name."""
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


class FinishStopped(BaseException):
    """A stop signal during a step that may be cut short (a BaseException: the steps'
    own ``except Exception`` never takes it for the step's failure)."""


class ChildSignals:
    """The finishing process's stop signals (module doc): :meth:`install` once, then
    :attr:`signum` says whether one came, and :meth:`abortable` marks a step that a
    signal may cut short."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self._abortable = False

    def install(self, stop_fd: int | None) -> None:
        """Handle the stop signals, and watch ``stop_fd`` (the parent's pipe) for them."""
        for name in _STOP_SIGNALS:
            sig = getattr(signal, name, None)
            if sig is not None:
                signal.signal(sig, self._handle)
        if stop_fd is not None:
            threading.Thread(target=self._watch, args=(stop_fd,), daemon=True).start()

    def _handle(self, signum: int, _frame: object) -> None:
        if self.signum is None:
            self.signum = signum
        if self._abortable:
            self._abortable = False  # one stop is enough; the step's cleanup runs in peace
            raise FinishStopped

    def _watch(self, fd: int) -> None:
        """Each byte from the parent is a signal it received; EOF (the parent is done,
        or gone) ends the watch."""
        with contextlib.suppress(OSError):
            while data := os.read(fd, 16):
                for signum in data:
                    # As if the signal had come to this process: its handler runs in
                    # the main thread, where a step can be stopped.
                    _thread.interrupt_main(signal.Signals(signum))

    @contextlib.contextmanager
    def abortable(self) -> Iterator[None]:
        """A step that a stop signal may cut short (raises FinishStopped at once when
        one came before it)."""
        if self.signum is not None:
            raise FinishStopped
        self._abortable = True
        try:
            yield
        finally:
            self._abortable = False
