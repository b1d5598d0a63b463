"""Repeated warnings of one kind collapse to one line with a count (issue 11)."""

from __future__ import annotations

import io
from pathlib import Path

from rich.console import Console

from tokrate.inputs.targets import Target
from tokrate.load.collector import Collector, collapse_warnings
from tokrate.load.events import WorkerWarning
from tokrate.load.progress import RunProgress
from tokrate.runfolder.store import RunStore
from tokrate.spec import EndpointSpec, ModelSpec


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
        "warning: scenario c=1: event-loop lag (and 2 more like it)",  # at the end
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
        "warning: scenario c=1: event-loop lag (and 1 more like it)",
        "error: target sim/m got 0 ok requests of 4 (http_5xx 4)",
    ]
