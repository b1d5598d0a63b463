"""The background load of a benchmark's loaded setting: CPU-bound processes it starts and
stops itself, by pid, so a measurement never depends on what else the machine runs."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Iterator


@contextlib.contextmanager
def busy_processes(count: int) -> Iterator[list[int]]:
    """``count`` processes spinning on a core; stopped by pid on exit."""
    procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(count)]
    try:
        yield [p.pid for p in procs]
    finally:
        for p in procs:
            os.kill(p.pid, signal.SIGTERM)
        for p in procs:
            p.wait()
