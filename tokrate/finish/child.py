"""The one protocol between the process that measured a run and the one that finishes
it: ``python -m tokrate.finish RUN_DIR [options]``.

The measuring process never imports polars, numpy or matplotlib (their import alone
is ~70 MB of RSS, more than the 256 streams of a load), so everything after the load
that needs them runs in one child: :class:`FinishRequest` says which steps, as argv::

    python -m tokrate.finish RUN_DIR [--status complete|interrupted] [--report png,svg]
        [--baseline REF --reports-root DIR [--threshold T]... [--thresholds-from-history DIR]]
        [--stop-fd FD]

Each step runs only when its flag is given, in this order: *finalize* (``--status``:
records.parquet, summary.json, run.json last with the status, so "complete" is only
ever seen next to a complete parquet and summary), *report* (``--report``: charts,
report.html, summary.md) and *baseline* (``--baseline``: comparison.json / .md and
the ``latest-good`` pointer). A step can run alone on a finished folder (a
confirmation pass re-judging a run is ``--baseline`` only).

Stop signals (tokrate.finish.stopping): the child runs in a session of its own; the
parent passes a stop signal it receives on through a pipe (``--stop-fd``, one byte per
signal: :class:`ChildStop`), and the child still finalizes, skipping the report and
the baseline check (a problem with ``"stopped": true``). The parent waits for it.

The child answers in the run folder itself: the parent reads summary.json and
comparison.json with their readers (:func:`tokrate.runfolder.store.load_summary`,
:func:`tokrate.runfolder.comparison.read_comparison`). It prints nothing; a step that
fails is one line on stderr, ``tokrate.finish {"step": ..., "exit_code": ...,
"error": ...}`` (:class:`FinishProblem`), and the child goes on with the steps that do
not need it (a failed report does not stop the baseline check; a failed finalize stops
everything). This module is both sides of that protocol and imports nothing heavy.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Literal

import orjson

from tokrate.errors import RunFolderError, UsageError
from tokrate.runfolder.files import JSON_LIMIT_BYTES, read_run_file

__all__ = [
    "CHILD_TIMEOUT_S",
    "ChildStop",
    "FinishOutcome",
    "FinishProblem",
    "FinishRequest",
    "Step",
    "run_finish",
]

Step = Literal["finalize", "report", "baseline"]
_STEPS: Final[tuple[Step, ...]] = ("finalize", "report", "baseline")
#: The prefix of a problem line on the child's stderr (anything else there is not ours:
#: a library's warning, or a traceback when the child itself crashed).
_PREFIX: Final = "tokrate.finish "
#: Bound on the child, all steps together: a million records take ~10 s to summarise on
#: 2 cores, and the report of a large run a few minutes.
CHILD_TIMEOUT_S: Final = 1800.0


@dataclass(frozen=True, slots=True)
class FinishRequest:
    """What the finishing process is to do with ``run_dir`` (module doc). ``status``
    None skips finalize, empty ``report_formats`` the report, ``baseline`` None the
    baseline check (then ``reports_root`` holds the ``latest-good`` pointer)."""

    run_dir: Path
    status: Literal["complete", "interrupted"] | None = None
    report_formats: tuple[str, ...] = ()
    baseline: str | None = None
    reports_root: Path | None = None
    thresholds: tuple[str, ...] = ()
    thresholds_from_history: str | None = None
    #: The read end of the parent's stop pipe (module doc), None without one.
    stop_fd: int | None = None

    @property
    def steps(self) -> tuple[Step, ...]:
        asked = {
            "finalize": self.status is not None,
            "report": bool(self.report_formats),
            "baseline": self.baseline is not None,
        }
        return tuple(step for step in _STEPS if asked[step])

    def argv(self) -> list[str]:
        """The child's arguments (after ``python -m tokrate.finish``)."""
        out = [str(self.run_dir)]
        if self.status is not None:
            out += ["--status", self.status]
        if self.report_formats:
            out += ["--report", ",".join(self.report_formats)]
        if self.baseline is not None:
            out += ["--baseline", self.baseline]
            out += ["--reports-root", str(self.reports_root or self.run_dir.parent)]
            for text in self.thresholds:
                out += ["--threshold", text]
            if self.thresholds_from_history is not None:
                out += ["--thresholds-from-history", self.thresholds_from_history]
        if self.stop_fd is not None:
            out += ["--stop-fd", str(self.stop_fd)]
        return out

    @classmethod
    def parse(cls, argv: Sequence[str]) -> FinishRequest:
        """The request ``argv`` describes (the inverse of :meth:`argv`). Raises
        UsageError for anything else."""
        if not argv or argv[0].startswith("--"):
            raise UsageError("tokrate.finish: usage: python -m tokrate.finish RUN_DIR [options]")
        values: dict[str, str] = {}
        thresholds: list[str] = []
        rest = list(argv[1:])
        while rest:
            flag = rest.pop(0)
            if flag not in _FLAGS or not rest:
                raise UsageError(f"tokrate.finish: unexpected argument {flag!r}")
            value = rest.pop(0)
            if flag == "--threshold":
                thresholds.append(value)
            else:
                values[flag] = value
        status = values.get("--status")
        if status not in (None, "complete", "interrupted"):
            raise UsageError(f"tokrate.finish: --status {status!r}: complete or interrupted")
        root = values.get("--reports-root")
        stop_fd = values.get("--stop-fd")
        if stop_fd is not None and not stop_fd.isdigit():
            raise UsageError(f"tokrate.finish: --stop-fd {stop_fd!r}: a file descriptor number")
        return cls(
            run_dir=Path(argv[0]),
            status=status,  # type: ignore[arg-type]
            report_formats=tuple(f for f in values.get("--report", "").split(",") if f),
            baseline=values.get("--baseline"),
            reports_root=None if root is None else Path(root),
            thresholds=tuple(thresholds),
            thresholds_from_history=values.get("--thresholds-from-history"),
            stop_fd=None if stop_fd is None else int(stop_fd),
        )


_FLAGS: Final = (
    "--status",
    "--report",
    "--baseline",
    "--reports-root",
    "--threshold",
    "--thresholds-from-history",
    "--stop-fd",
)


@dataclass(frozen=True, slots=True)
class FinishProblem:
    """One step that failed: its one-line error and the exit code it carries (a
    TokrateError's, 1 for anything else); ``stopped``: it did not fail, a stop signal
    skipped it (the exit code is then 128 + the signal)."""

    step: Step
    exit_code: int
    error: str
    stopped: bool = False

    def line(self) -> str:
        """The problem as the child writes it on stderr."""
        document = {"step": self.step, "exit_code": self.exit_code, "error": self.error}
        if self.stopped:
            document["stopped"] = True
        return _PREFIX + orjson.dumps(document).decode()

    @classmethod
    def from_line(cls, line: str) -> FinishProblem | None:
        """The problem a stderr line carries; None for a line that is not one."""
        if not line.startswith(_PREFIX):
            return None
        try:
            data = orjson.loads(line[len(_PREFIX) :])
            step, code, error = data["step"], data["exit_code"], data["error"]
        except (ValueError, KeyError, TypeError):
            return None
        if step not in _STEPS or not isinstance(code, int) or not isinstance(error, str):
            return None
        return cls(step, code, error, data.get("stopped") is True)


@dataclass(frozen=True, slots=True)
class FinishOutcome:
    """What the child said: the steps that failed (none: every step asked for is done)."""

    problems: tuple[FinishProblem, ...] = ()

    def problem(self, step: Step) -> FinishProblem | None:
        return next((p for p in self.problems if p.step == step), None)


def _command(request: FinishRequest) -> tuple[list[str], dict[str, str]]:
    """argv and environment of the child: this interpreter, importing this tokrate."""
    root = str(Path(__file__).resolve().parent.parent.parent)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    return [sys.executable, "-m", "tokrate.finish", *request.argv()], env


def _unfinished(request: FinishRequest) -> Step:
    """The step a child that died without a word was in: the first whose file is not
    there (run.json still "running", no report.html, no comparison.json)."""
    folder = request.run_dir
    for step in request.steps:
        if step == "finalize":
            try:
                data = read_run_file(folder / "run.json", JSON_LIMIT_BYTES) or b""
            except RunFolderError:
                data = b""
            running = not data or b'"status": "running"' in data
            if running:
                return step
        if step == "report" and not (folder / "report.html").is_file():
            return step
        if step == "baseline" and not (folder / "comparison.json").is_file():
            return step
    return request.steps[-1]


class ChildStop:
    """The parent's end of the stop pipe (module doc). :meth:`request` (from a signal
    handler) tells the running child to stop after finalizing; one asked for before the
    child starts is passed on as soon as it does."""

    def __init__(self) -> None:
        self.signals: list[int] = []
        self._fd: int | None = None

    def request(self, signum: int) -> None:
        self.signals.append(signum)
        self._send(bytes([signum]))

    def _send(self, data: bytes) -> None:
        if self._fd is not None:
            with contextlib.suppress(OSError):  # the child is gone: nothing to tell
                os.write(self._fd, data)

    def _open(self, fd: int) -> None:
        self._fd = fd
        self._send(bytes(self.signals))

    def _close(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)


def run_finish(
    request: FinishRequest, *, timeout_s: float = CHILD_TIMEOUT_S, stop: ChildStop | None = None
) -> FinishOutcome:
    """Run the finishing process on ``request`` and wait for it (``timeout_s`` for all
    of its steps), whatever signal arrives meanwhile: ``stop`` passes them on (module
    doc). Never raises for what the child does: a child that crashed, was killed or
    ran out of time is a problem of the step it was in."""
    if not request.steps:
        return FinishOutcome()
    read_fd, write_fd = os.pipe()
    request = dataclasses.replace(request, stop_fd=read_fd)
    argv, env = _command(request)
    stop = stop or ChildStop()
    try:
        proc = subprocess.Popen(
            argv,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            pass_fds=(read_fd,),
            # Its own session: a Ctrl-C at the terminal reaches this process, which
            # passes it on once, through the pipe.
            start_new_session=True,
        )
    except OSError as err:
        os.close(write_fd)
        error = f"the finishing process did not start ({err.strerror or err})"
        return FinishOutcome((FinishProblem(request.steps[0], 1, error),))
    finally:
        os.close(read_fd)
    stop._open(write_fd)
    try:
        try:
            _, stderr = proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            error = f"the finishing process ran past {timeout_s:g} s and was stopped"
            return FinishOutcome((FinishProblem(_unfinished(request), 1, error),))
    finally:
        stop._close()
    lines = stderr.splitlines()
    problems = tuple(p for p in map(FinishProblem.from_line, lines) if p is not None)
    if proc.returncode != 0 and not problems:
        last = next((x.strip() for x in reversed(lines) if x.strip()), "")
        error = last or f"the finishing process exited with code {proc.returncode}"
        problems = (FinishProblem(_unfinished(request), 1, error),)
    return FinishOutcome(problems)
