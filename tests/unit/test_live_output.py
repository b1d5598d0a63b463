"""One object for what a run shows (issue 43): warnings and errors show even with
--quiet; the cost, the prompts' sources, plain lines and the progress display do not;
without a console nothing is drawn."""

from __future__ import annotations

import io
import threading

from rich.console import Console

from tokrate.load.live import LiveOutput
from tokrate.load.progress import ScenarioInfo


def _console() -> tuple[Console, io.StringIO]:
    buf = io.StringIO()
    return Console(file=buf, width=200, color_system=None), buf


def _show_everything(live: LiveOutput) -> None:
    live.tell("cost", "at most $0.10")
    live.line("load done; writing summary.json")
    live.notice("warning", "a proxy applies")
    live.notices([("error", "target sim/m got 0 ok requests of 4 (http_5xx 4)")])
    with live.showing_progress(
        ["sim/m"],
        [ScenarioInfo("c=1", (4,), concurrency=1)],
        title="tokrate run t",
        stop=threading.Event(),
        grace_s=5.0,
        interval_s=3600.0,
    ):
        live.start_scenario(0)


def test_a_run_that_talks_shows_every_line_and_its_progress() -> None:
    console, buf = _console()
    live = LiveOutput(console)
    _show_everything(live)
    assert live.progress is not None
    lines = buf.getvalue().splitlines()
    assert lines[:4] == [
        "cost: at most $0.10",
        "load done; writing summary.json",
        "warning: a proxy applies",
        "error: target sim/m got 0 ok requests of 4 (http_5xx 4)",
    ]
    # The progress's plain line when its scenario starts (not a terminal).
    assert lines[4].startswith("[") and "scenario 1 of 1 (c=1): 0/4 requests" in lines[4]


def test_quiet_keeps_warnings_and_errors_only() -> None:
    console, buf = _console()
    live = LiveOutput(console, quiet=True)
    _show_everything(live)
    assert live.progress is None
    assert buf.getvalue().splitlines() == [
        "warning: a proxy applies",
        "error: target sim/m got 0 ok requests of 4 (http_5xx 4)",
    ]


def test_a_quieted_copy_is_quiet_on_the_same_console() -> None:
    console, buf = _console()
    again = LiveOutput(console).quieted()
    again.tell("prompts", "every prompt of data/prompts.jsonl")
    again.notice("confirm", "regression in sim-7b c=8: measuring it again")
    assert buf.getvalue().splitlines() == ["confirm: regression in sim-7b c=8: measuring it again"]


def test_without_a_console_nothing_is_drawn() -> None:
    live = LiveOutput()
    _show_everything(live)
    assert live.progress is None
