"""The protocol between a capacity search and the child that judges its probes'
records: ``python -m tokrate.finish.probe_judge SLO_JSON`` (both sides are here; this
module imports nothing heavy).

A probe is decided while it runs, from its records against the ``[slo]`` limits, by the
same rule as summary.json's ``slo_met`` (:func:`tokrate.analysis.metrics.slo_met_expr`
over :func:`tokrate.analysis.metrics.derive`: a buffered stream has no TPOT or ITL, an
empty answer misses, a request too short for a limit set is not judged). That rule is polars expressions, and the measuring process never
imports polars, so one child per capacity search applies it: :class:`ProbeJudgeChild`
starts it, sends it each batch of records and reads the verdicts back.

Wire format, one line each way per batch: the parent writes a JSON array of records
(records.jsonl's objects: :func:`tokrate.runfolder.jsondoc.to_json`); the child answers a JSON
array with one ``[request_index, ok, met, {slo key: value or null}, send_delay_s,
judged]`` per record, in order (``judged`` false: too short for a limit set, so neither
met nor missed) (:func:`answer_line`, :func:`read_answer`). The child exits at the end
of its input; it runs in a session of its own, so a Ctrl-C meant for the run does not
reach it (the run's stop grace still needs verdicts), and a parent that dies closes its
input.
"""

from __future__ import annotations

import contextlib
import os
import select
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import orjson

from tokrate.errors import FinishError
from tokrate.runfolder.jsondoc import to_json
from tokrate.runfolder.records import RequestRecord

__all__ = [
    "ANSWER_TIMEOUT_S",
    "Judged",
    "ProbeJudgeChild",
    "answer_line",
    "read_answer",
]

#: Seconds the child may take for one answer: the first includes its start (importing
#: polars: ~1 s, tens of seconds on a loaded 2-core machine); a batch takes milliseconds.
ANSWER_TIMEOUT_S: Final = 120.0
_MODULE: Final = "tokrate.finish.probe_judge"


@dataclass(frozen=True, slots=True)
class Judged:
    """One request's verdict: ``ok`` (it ended ok), ``met`` (every SLO set held, the
    ``slo_met`` rule), ``values`` (per SLO key the value it was judged by, seconds;
    None where the request has none), its ``send_delay_s``, and ``judged`` (False: too
    short for a limit set, a one-token answer against a TPOT limit: neither met nor
    missed, docs/definitions.md "SLO met")."""

    request_index: int
    ok: bool
    met: bool
    values: dict[str, float | None]
    send_delay_s: float | None
    judged: bool = True


def answer_line(judged: Sequence[Judged]) -> bytes:
    """The child's answer to one batch (module doc), newline included."""
    rows = [[j.request_index, j.ok, j.met, j.values, j.send_delay_s, j.judged] for j in judged]
    return orjson.dumps(rows) + b"\n"


def read_answer(line: bytes) -> list[Judged]:
    """The verdicts of one answer line. Raises ValueError for a line that is not one."""
    try:
        rows = orjson.loads(line)
        return [
            Judged(
                int(index),
                bool(ok),
                bool(met),
                {str(k): None if v is None else float(v) for k, v in values.items()},
                None if delay is None else float(delay),
                bool(judged),
            )
            for index, ok, met, values, delay, judged in rows
        ]
    except (TypeError, AttributeError) as err:
        raise ValueError(f"not an answer ({err})") from None


class ProbeJudgeChild:
    """The judging child of one capacity search (module doc): started on entering the
    context, stopped on leaving it; :meth:`judge` sends one batch and waits for its
    verdicts (at most ``timeout_s``).

    Raises FinishError (one line, the child's last word on stderr when it left one)
    when the child cannot start, dies, answers garbage or does not answer in time.
    """

    def __init__(self, slo: Mapping[str, float], *, timeout_s: float = ANSWER_TIMEOUT_S):
        self.slo = dict(slo)
        self.timeout_s = timeout_s
        self._proc: subprocess.Popen[bytes] | None = None
        self._stderr: Any = None
        self._buffer = b""

    def __enter__(self) -> ProbeJudgeChild:
        root = str(Path(__file__).resolve().parent.parent.parent)
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
        argv = [sys.executable, "-m", _MODULE, orjson.dumps(self.slo).decode()]
        self._stderr = tempfile.TemporaryFile()
        try:
            self._proc = subprocess.Popen(
                argv,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=self._stderr,
                env=env,
                start_new_session=True,
            )
        except OSError as err:
            self._stderr.close()
            raise FinishError(f"{self._name} did not start ({err.strerror or err})") from None
        return self

    def __exit__(self, *exc: object) -> None:
        proc, self._proc = self._proc, None
        if proc is not None:
            with contextlib.suppress(OSError):
                assert proc.stdin is not None
                proc.stdin.close()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            if proc.stdout is not None:
                proc.stdout.close()
        if self._stderr is not None:
            self._stderr.close()
            self._stderr = None

    def judge(self, records: Sequence[RequestRecord]) -> list[Judged]:
        """The verdicts of ``records``, in their order."""
        proc = self._proc
        if proc is None or proc.stdin is None:
            raise FinishError(f"{self._name} is not running")
        line = orjson.dumps([to_json(r) for r in records]) + b"\n"
        try:
            proc.stdin.write(line)
            proc.stdin.flush()
        except OSError:  # a broken pipe: the child is gone
            raise self._failed("exited") from None
        try:
            judged = read_answer(self._read_line())
        except ValueError as err:
            raise self._failed(f"answered {err}") from None
        if len(judged) != len(records):
            raise self._failed(f"answered {len(judged)} verdicts for {len(records)} records")
        return judged

    @property
    def _name(self) -> str:
        return f"capacity search: the probes' judge (python -m {_MODULE})"

    def _read_line(self) -> bytes:
        assert self._proc is not None and self._proc.stdout is not None
        fd = self._proc.stdout.fileno()
        deadline = time.monotonic() + self.timeout_s
        while b"\n" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                raise self._failed(f"did not answer within {self.timeout_s:g} s")
            ready, _, _ = select.select([fd], [], [], left)
            if not ready:
                continue
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                raise self._failed("exited")
            self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        return line

    def _failed(self, what: str) -> FinishError:
        """The error for a child that failed (it is stopped first)."""
        proc = self._proc
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()
        last = ""
        if self._stderr is not None:
            self._stderr.seek(0)
            lines = self._stderr.read().decode("utf-8", errors="replace").splitlines()
            last = next((x.strip() for x in reversed(lines) if x.strip()), "")
        code = "" if proc is None or proc.returncode is None else f" (exit code {proc.returncode})"
        return FinishError(f"{self._name} {what}{code}" + (f": {last}" if last else ""))
