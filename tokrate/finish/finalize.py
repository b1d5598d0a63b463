"""A run's work after the load, away from the measuring process.

The process that measured a run never imports polars, numpy or matplotlib (their
import alone is ~70 MB of RSS, more than the 256 streams of the load): records.parquet,
summary.json and the calibration verdict are computed in a child process
(``python -m tokrate.finish.finalize``), the report in another (``tokrate report``), and the
terminal summary table is drawn by a third (:func:`print_summary`: the report package
it lives in loads the analysis stack). The measuring process reads summary.json back
(plain JSON) and writes run.json last, so "complete" is still only ever seen next to
a complete parquet and summary.

Where a child cannot run (no interpreter to start, a crash), the same work runs
in-process (:meth:`tokrate.runfolder.store.RunStore.finalize`): correct, only not lean.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import orjson

from tokrate.runfolder.run_info import RunInfo
from tokrate.runfolder.store import (
    RunStore,
    iso_now,
    load_run_info,
    load_summary,
    read_records_jsonl,
)
from tokrate.runfolder.summary import Summary

if TYPE_CHECKING:
    from tokrate.load.capacity_search import Summarize

__all__ = ["CHILD_TIMEOUT_S", "child_command", "finalize_run", "print_summary"]

#: What a child runs (``-c``, not ``-m``: this module is already imported with the
#: package, and runpy warns about running such a module).
_ENTRY: Final = "import sys; from tokrate.finish.finalize import _main; _main(sys.argv[1:])"
#: Bound on each child (a million records take ~10 s to summarise on 2 cores).
CHILD_TIMEOUT_S: Final = 600.0


def child_command(*args: str) -> tuple[list[str], dict[str, str]]:
    """argv and environment of a child ``python -m`` that imports this tokrate."""
    root = str(Path(__file__).resolve().parent.parent)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    return [sys.executable, *args], env


def finalize_run(
    store: RunStore,
    *,
    status: str,
    loop_lag_p99_ms: float,
    summarize: Summarize | None = None,
    **changes: Any,
) -> Summary | None:
    """Finish ``store``'s run folder (module docstring): parquet and summary.json in a
    child, then run.json with ``status``, ``ended_at``, the calibration verdict and
    the RunInfo field ``changes``. Returns the summary. Raises OutputError as
    RunStore.finalize does.

    ``summarize``: a summariser of its own (a capacity search's, which also writes
    capacity.json); it runs in this process, since the search already loaded the
    analysis stack to judge its probes."""
    store.close()
    store.update(**changes)  # the child summarises with every field but the status
    if summarize is not None:
        return _in_process(store, status, loop_lag_p99_ms, summarize)
    argv, env = child_command("-c", _ENTRY, str(store.path), status, repr(loop_lag_p99_ms))
    try:
        done = subprocess.run(argv, env=env, capture_output=True, timeout=CHILD_TIMEOUT_S)
        ok = done.returncode == 0
    except (OSError, subprocess.SubprocessError):
        ok = False
    if ok:
        try:
            verdict = orjson.loads(done.stdout)
            summary = load_summary(store.path)
        except (ValueError, OSError):
            ok = False
    if not ok:
        return _in_process(store, status, loop_lag_p99_ms)
    store.update(status=status, ended_at=iso_now(), calibration=verdict)
    return summary


def _in_process(
    store: RunStore, status: str, loop_lag_p99_ms: float, summarize: Summarize | None = None
) -> Summary | None:
    from tokrate.analysis.calibration import run_envelope
    from tokrate.analysis.metrics import summarize as summarize_run

    frame, summary = store.finalize(status=status, summarize=summarize or summarize_run)
    store.update(calibration=run_envelope(frame, loop_lag_p99_ms))
    return summary


def _child(run_dir: Path, status: str, loop_lag_p99_ms: float) -> dict[str, Any]:
    from tokrate.analysis.calibration import run_envelope
    from tokrate.analysis.metrics import summarize
    from tokrate.fileio import write_atomic

    info: RunInfo = dataclasses.replace(load_run_info(run_dir), status=status)
    frame = read_records_jsonl(run_dir / "records.jsonl")
    frame.write_parquet(run_dir / "records.parquet")
    summary = summarize(frame, info)
    document = orjson.dumps(
        summary.to_dict(), option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY
    )
    write_atomic(run_dir / "summary.json", document + b"\n")
    return run_envelope(frame, loop_lag_p99_ms)


def print_summary(run_dir: Path, summary: Summary, title: str, *, plain: bool) -> None:
    """Draw the run's summary table on ``sys.stdout`` (``render_summary``; ``plain``:
    80 columns, no colour, for a pipe or file; else a terminal of this one's width),
    drawn by a child; in this process when the child cannot run."""
    import shutil

    width = 80 if plain else shutil.get_terminal_size().columns
    argv, env = child_command("-c", _ENTRY, "--summary", str(run_dir), title,
                              "plain" if plain else "tty", str(width))  # fmt: skip
    try:
        done = subprocess.run(argv, env=env, capture_output=True, timeout=CHILD_TIMEOUT_S)
        if done.returncode == 0:
            sys.stdout.write(done.stdout.decode())
            return
    except (OSError, subprocess.SubprocessError):
        pass
    _render(run_dir, summary, title, plain, width)


def _render(run_dir: Path, summary: Summary, title: str, plain: bool, width: int) -> None:
    from rich.console import Console

    from tokrate.report.text import render_summary

    if plain:
        out = Console(width=80, color_system=None)
    else:
        out = Console(force_terminal=True, width=width)
    render_summary(summary, out, title=title)
    if summary.capacity is not None:
        from tokrate.report.capacity_section import render_capacity

        out.print()
        render_capacity(summary.capacity, out)
    # The tier pick in words ends the summary (tokrate.analysis.tier_pick decides,
    # tokrate.report.tier_text says it).
    from tokrate.analysis.tier_pick import TierRun, decide_tiers
    from tokrate.report.tier_text import render_verdict

    info = load_run_info(run_dir)
    decision = decide_tiers([TierRun(info.name, summary, info)])
    if decision.cells:
        out.print()
        render_verdict(decision, out)


def _main(argv: list[str]) -> None:
    if argv[0] == "--summary":
        summary = load_summary(Path(argv[1]))
        if summary is None:
            raise SystemExit(1)
        _render(Path(argv[1]), summary, argv[2], argv[3] == "plain", int(argv[4]))
        return
    verdict = _child(Path(argv[0]), argv[1], float(argv[2]))
    sys.stdout.buffer.write(orjson.dumps(verdict))
