"""Stop signals of a run: Ctrl-C, SIGTERM and SIGHUP all stop it gracefully; the exit
code is 128 + the first signal; a third signal ends the grace period at once."""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from typing import Final

from tokrate.load.worker.stopping import Stop

__all__ = ["SignalStopper", "stop_on_signals"]

#: The signals that stop a run gracefully, and their exit codes (128 + signal number).
_STOP_SIGNALS: Final = ("SIGINT", "SIGTERM", "SIGHUP")


class SignalStopper:
    """Which stop signal arrived first (its exit code), and how many arrived."""

    def __init__(self, stop: Stop) -> None:
        self.stop = stop
        self.signum: int | None = None
        self.count = 0

    def handle(self, signum: int, _frame: object) -> None:
        self.count += 1
        if self.signum is None:
            self.signum = signum
        self.stop.set()
        if self.count >= 3:
            # The third signal ends the grace period now; the workers still record
            # what was in flight as cancelled, and every file is still written.
            self.stop.abort()

    @property
    def exit_code(self) -> int:
        return 128 + (self.signum if self.signum is not None else signal.SIGINT)


@contextlib.contextmanager
def stop_on_signals(stopper: SignalStopper) -> Iterator[None]:
    """While measuring, a stop signal only sets ``stop`` (see the module doc), so a
    signal never interrupts the driver mid-write and no event is lost between the
    backend and the store. Only in the main thread (where handlers can be installed)."""
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
