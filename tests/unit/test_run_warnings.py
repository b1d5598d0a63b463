"""Repeated warnings of one kind: one line with a count in run.json (issue 11); on the
terminal each repeat with its own numbers, at most three of a kind, wrapped at word
boundaries on an 80-column terminal (issue 24)."""

from __future__ import annotations

import io
from pathlib import Path

from rich.console import Console

from tokrate.inputs.targets import Target
from tokrate.load.collector import Collector, collapse_warnings
from tokrate.load.progress import RunProgress
from tokrate.load.worker.events import WorkerWarning
from tokrate.runfolder.store import RunStore
from tokrate.spec.types import EndpointSpec, ModelSpec


def test_collapse_keeps_the_first_of_each_kind_with_a_count() -> None:
    pairs = [
        ("loop_lag", "scenario c=1: lag 7 ms"),
        ("client", "pool overflow"),
        ("loop_lag", "scenario c=8: lag 9 ms"),
        ("loop_lag", "scenario c=16: lag 12 ms"),
        ("", "a one-off"),
        ("", "a one-off"),
        ("loop_lag", "scenario c=8: lag 9 ms"),  # the very same line again
    ]
    assert collapse_warnings(pairs) == [
        "scenario c=1: lag 7 ms (and 2 more like it)",
        "pool overflow",
        "a one-off",
    ]


def _sink(tmp_path: Path, progress: object) -> Collector:
    target = Target(EndpointSpec("sim", "http://127.0.0.1:1/v1"), ModelSpec("sim", "m"))
    return Collector(RunStore(tmp_path / "run"), progress, [target])


def test_terminal_prints_each_kind_once_live_then_the_count(tmp_path: Path) -> None:
    buf = io.StringIO()
    console = Console(file=buf, width=200, color_system=None)
    progress = RunProgress(console, ["sim/m"], live=False, interval_s=3600)
    sink = _sink(tmp_path, progress)
    for c in (1, 8, 16):
        sink(WorkerWarning("w0", f"scenario c={c}: event-loop lag", kind="loop_lag"))
    sink(WorkerWarning("w0", "a proxy applies", kind="client"))
    sink.print_warnings(console, [])
    assert buf.getvalue().splitlines() == [
        "warning: scenario c=1: event-loop lag",  # live, first of its kind
        "warning: a proxy applies",
        "warning: scenario c=8: event-loop lag",  # at the end: the later ones, each its own
        "warning: scenario c=16: event-loop lag",
    ]
    assert sink.warnings == [
        "scenario c=1: event-loop lag (and 2 more like it)",
        "a proxy applies",
    ]


def test_quiet_prints_the_collapsed_list_once_at_the_end(tmp_path: Path) -> None:
    buf = io.StringIO()
    console = Console(file=buf, width=200, color_system=None)
    sink = _sink(tmp_path, None)
    for c in (1, 8):
        sink(WorkerWarning("w0", f"scenario c={c}: event-loop lag", kind="loop_lag"))
    sink.print_warnings(console, ["target sim/m got 0 ok requests of 4 (http_5xx 4)"])
    assert buf.getvalue().splitlines() == [
        "warning: scenario c=1: event-loop lag",
        "warning: scenario c=8: event-loop lag",
        "error: target sim/m got 0 ok requests of 4 (http_5xx 4)",
    ]


LAG = (
    "scenario c={c}, worker w0: event-loop lag p99 {p99} ms, max {mx} ms (threshold p99 5 ms"
    " / max 50 ms): timestamps may be late by that much; lower the concurrency per process"
    " or use --workers N"
)


def test_end_of_run_repeats_show_their_own_numbers_wrapped_at_80_columns(
    tmp_path: Path,
) -> None:
    buf = io.StringIO()
    console = Console(file=buf, width=80, force_terminal=True, color_system=None)
    progress = RunProgress(console, ["sim/m"], live=False, interval_s=3600)
    sink = _sink(tmp_path, progress)
    figures = [(1, 5.5, 35.7), (8, 6.1, 53.4), (16, 7.0, 60.2), (32, 9.9, 80.0), (64, 12.5, 99.1)]
    for c, p99, mx in figures:
        sink(WorkerWarning("w0", LAG.format(c=c, p99=p99, mx=mx), kind="loop_lag"))
    sink.print_warnings(console, [])
    assert buf.getvalue().splitlines() == [
        "warning: scenario c=1, worker w0: event-loop lag p99 5.5 ms, max 35.7 ms",
        "         (threshold p99 5 ms / max 50 ms): timestamps may be late by that much;",
        "         lower the concurrency per process or use --workers N",
        "warning: scenario c=8, worker w0: event-loop lag p99 6.1 ms, max 53.4 ms",
        "         (threshold p99 5 ms / max 50 ms): timestamps may be late by that much;",
        "         lower the concurrency per process or use --workers N",
        "warning: scenario c=16, worker w0: event-loop lag p99 7.0 ms, max 60.2 ms",
        "         (threshold p99 5 ms / max 50 ms): timestamps may be late by that much;",
        "         lower the concurrency per process or use --workers N",
        "warning: scenario c=32, worker w0: event-loop lag p99 9.9 ms, max 80.0 ms",
        "         (threshold p99 5 ms / max 50 ms): timestamps may be late by that much;",
        "         lower the concurrency per process or use --workers N",
        "warning: ... and 1 more like these",
    ]
    assert sink.warnings == [LAG.format(c=1, p99=5.5, mx=35.7) + " (and 4 more like it)"]


def test_a_log_keeps_each_notice_on_one_line(tmp_path: Path) -> None:
    buf = io.StringIO()
    console = Console(file=buf, width=80, force_terminal=False, color_system=None)
    sink = _sink(tmp_path, None)
    sink(WorkerWarning("w0", LAG.format(c=1, p99=5.5, mx=35.7), kind="loop_lag"))
    sink.print_warnings(console, [])
    assert buf.getvalue().splitlines() == ["warning: " + LAG.format(c=1, p99=5.5, mx=35.7)]
