"""The real default ``tokrate run`` (nothing but ``--output-dir``): the six simulator
tiers at c=1 and c=8 in real time, the demo SLOs, the bundled sets, the report.

It takes ~40 s of real time on purpose (it is the run a user gets), so the tests that
read it share one: ``tests/conftest.py``'s session fixture ``default_run`` runs it once
per worker, and the modules that use it are one xdist work unit (``_SHARED_UNITS``), so
it runs once in the suite. What the checks need from the run itself is kept: the
terminal output, the simulators it started, the client's loop stalls past the max
threshold and the CPU waits of the same stretch.
"""

from __future__ import annotations

import contextlib
import io
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import tokrate.load.worker.engine
import tokrate.sim.server
from helpers.cpu_waits import CpuWaits
from tokrate.cli import main
from tokrate.load.worker.looplag import MAX_THRESHOLD_MS, LagMonitor

__all__ = ["DefaultRun", "run_default"]


@dataclass(frozen=True, slots=True)
class DefaultRun:
    """One default run. ``out``/``err``: what it printed (not a terminal: 80 columns);
    ``started``: the base URLs of the simulators it started; ``stalls``: every wake-up of
    its loop-lag monitors past the max threshold, as (due, woke) ``perf_counter_ns``;
    ``waits``: this process's and its children's CPU waits over the run."""

    exit_code: int
    out: str
    err: str
    run_dir: Path
    started: list[str]
    stalls: list[tuple[int, int]]
    waits: CpuWaits


def run_default(output_dir: Path) -> DefaultRun:
    """``tokrate run --output-dir output_dir`` in this process (module doc)."""
    started: list[str] = []
    real = tokrate.sim.server.simulator_process

    @contextlib.contextmanager
    def spy(config: Any = None, /, **kw: Any) -> Iterator[str]:
        with real(config, **kw) as url:
            started.append(url)
            yield url

    stalls: list[tuple[int, int]] = []

    class StallsKept(LagMonitor):
        def add_late(self, due_ns: int, woke_ns: int) -> None:
            super().add_late(due_ns, woke_ns)
            if (woke_ns - due_ns) / 1e6 > MAX_THRESHOLD_MS:
                stalls.append((due_ns, woke_ns))

    out, err = io.StringIO(), io.StringIO()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(tokrate.sim.server, "simulator_process", spy)
        patch.setattr(tokrate.load.worker.engine, "LagMonitor", StallsKept)
        with CpuWaits() as waits, contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            rc = main(["run", "--output-dir", str(output_dir)])
    (run_dir,) = list(output_dir.iterdir())
    return DefaultRun(rc, out.getvalue(), err.getvalue(), run_dir, started, stalls, waits)
