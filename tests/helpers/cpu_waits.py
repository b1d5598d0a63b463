"""How long this process and its children waited for a CPU, by the kernel's own count.

A timing check against a bound the physics gives (client TTFT vs the server's own)
holds on an idle machine; on a busy one (a CI runner, two CPU-bound processes beside
the suite) the client and the server are runnable but not running for whole time
slices, and any stamp taken after such a wait is late by it. The kernel counts that
wait per thread (``/proc/<pid>/task/<tid>/schedstat``, second field: ns spent on a run
queue). :class:`CpuWaits` samples the sum over every thread of this process and of its
child processes (an embedded or spawned simulator) every few ms, so a test can take out
of each request's error the wait that fell inside it: what remains is the client's own
error, which the idle bound still judges.

The sampler is a process of its own (this file run as a script), so it never holds the
measuring process's GIL; stamps are ``perf_counter_ns`` (CLOCK_MONOTONIC), the same in
every process.
"""

from __future__ import annotations

import bisect
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import TracebackType

__all__ = ["CpuWaits"]


def _waited_ns(pid: int | str) -> int:
    """Run-queue wait of every thread of ``pid`` so far (ns; 0 for one that is gone)."""
    total = 0
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return 0
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat", "rb") as f:
                total += int(f.read().split()[1])
        except (OSError, IndexError, ValueError):
            continue  # a thread that ended between the listing and the read
    return total


def _children(pid: int) -> list[str]:
    out: list[str] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/children", "rb") as f:
                out += f.read().decode().split()
        except OSError:
            continue
    return out


def _sample_forever(pid: int, interval_s: float, path: str) -> None:
    """The sampler process: one line per sample, ``before total after`` (the stamps
    taken just before and just after the counts were read), until it is killed."""
    me = str(os.getpid())
    with open(path, "w") as out:
        while True:
            before = time.perf_counter_ns()
            total = _waited_ns(pid) + sum(_waited_ns(c) for c in _children(pid) if c != me)
            out.write(f"{before} {total} {time.perf_counter_ns()}\n")
            out.flush()
            time.sleep(interval_s)


class CpuWaits:
    """Samples, every ``interval_s``, the total run-queue wait (ns) of this process's
    and its children's threads; :meth:`within` bounds the wait inside a span."""

    def __init__(self, interval_s: float = 0.01) -> None:
        self._interval = interval_s
        self._dir = tempfile.TemporaryDirectory(prefix="cpu-waits-")
        self._path = Path(self._dir.name) / "samples"
        self._proc: subprocess.Popen[bytes] | None = None
        self._before: list[int] = []
        self._waited: list[int] = []
        self._after: list[int] = []

    def __enter__(self) -> CpuWaits:
        argv = [sys.executable, __file__, str(os.getpid()), str(self._interval), str(self._path)]
        self._proc = subprocess.Popen(argv)
        while not (self._path.exists() and self._path.stat().st_size):
            time.sleep(0.01)  # the first sample is there before the measured span starts
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        time.sleep(2 * self._interval)  # a sample after the last span ended
        assert self._proc is not None
        os.kill(self._proc.pid, signal.SIGTERM)
        self._proc.wait()
        for line in self._path.read_text().splitlines():
            fields = line.split()
            if len(fields) == 3:  # the last line may be cut by the kill
                self._before.append(int(fields[0]))
                self._waited.append(int(fields[1]))
                self._after.append(int(fields[2]))
        self._dir.cleanup()

    def within(self, start_ns: int, end_ns: int) -> int:
        """An upper bound on the run-queue wait (ns, all threads of the processes
        together) between ``start_ns`` and ``end_ns`` (perf_counter_ns): from the last
        count read wholly before the start to the first read wholly after the end (the
        whole sampled span where either lies outside it)."""
        if not self._waited:
            return 0
        first = max(0, bisect.bisect_right(self._after, start_ns) - 1)
        last = min(len(self._before) - 1, bisect.bisect_left(self._before, end_ns))
        return self._waited[last] - self._waited[first]


if __name__ == "__main__":
    _sample_forever(int(sys.argv[1]), float(sys.argv[2]), sys.argv[3])
