"""Live progress: rows, tokens as chunks arrive, ETA, the Ctrl-C grace line, redraws on a
terminal and plain lines without one; and the fallback end-of-run table."""

from __future__ import annotations

import dataclasses
import io
import re
import time
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from tokrate.load.progress import RunProgress, ScenarioInfo, format_duration
from tokrate.load.worker.events import (
    RequestFinished,
    RequestStarted,
    StreamProgress,
    WorkerWarning,
)
from tokrate.load.worker.stopping import Stop
from tokrate.runfolder.records import RequestRecord

#: One plain progress line (docs/running.md shows the same form).
LINE = re.compile(
    r"^\[\s*\d+(s|m\d\ds)\] scenario \d+ of \d+ \(.+\): \d+/(\d+|\?) requests, [\d,]+ tok/s,"
    r" \d+ errors?, \d+ in flight( \+ \d+ in retry back-off)?, ETA ~?(\d+s|\d+m\d\ds|\d+h\d\dm|\?)(; stopping: .*)?$"
)


def _console(*, terminal: bool = False) -> tuple[Console, io.StringIO]:
    buf = io.StringIO()
    console = Console(file=buf, width=120, force_terminal=terminal, color_system=None)
    return console, buf


def _finished(model: str, status: str, tokens: int | None, e2e: float = 1.0) -> RequestFinished:
    rec = RequestRecord(
        run_id="r",
        endpoint="sim",
        model=model,
        scenario="c=1",
        prompt_id="p",
        task="t",
        request_index=0,
        started_at=0.0,
        t0_ns=0,
        status=status,  # type: ignore[arg-type]
        output_tokens=tokens,
        error_class=None if status == "ok" else "http_5xx",
        e2e_s=e2e,
    )
    return RequestFinished(record=rec)


def _attempt(index: int, status: str, attempt: int, retry_in_s: float | None) -> RequestFinished:
    """Attempt ``attempt`` of request ``index`` to sim/a (retried when ``retry_in_s``)."""
    rec = _finished("a", status, 3 if status == "ok" else None).record
    rec = dataclasses.replace(rec, scenario="c=2", request_index=index, attempt=attempt)
    return RequestFinished(record=rec, retry_in_s=retry_in_s)


SCENARIOS = (
    ScenarioInfo("c=1", (3, None), concurrency=1),
    ScenarioInfo("c=4", (3, None), concurrency=4),
)


def _rows(text: str, label: str) -> list[str]:
    return next(line for line in text.splitlines() if label in line).split()


def test_rows_count_done_errors_and_tokens_as_chunks_arrive() -> None:
    console, buf = _console()
    progress = RunProgress(console, ["sim/a", "sim/b"], SCENARIOS, live=False, interval_s=3600)
    progress.start_scenario(0)
    progress.on_event(RequestStarted("w0", "c=1", 0, 0, 0.0))
    # Mid-stream: 40 chunks received, nothing finished yet: tokens already count.
    progress.on_event(StreamProgress("w0", "c=1", tokens=(40, 0), in_flight=(1, 0)))
    time.sleep(0.05)
    console.print(progress.render())
    assert _rows(buf.getvalue(), "sim/a")[2] != "0"  # tok/s
    progress.on_event(_finished("a", "ok", 10))
    progress.on_event(_finished("a", "error", None))
    progress.on_event(_finished("b", "ok", 5))
    progress.on_event(WorkerWarning("w0", "something to fix", kind="x"))
    progress.on_event(WorkerWarning("w1", "something to fix again", kind="x"))
    progress.close()
    buf.truncate(0)
    console.print(progress.render())
    text = buf.getvalue()
    row_a, row_b = _rows(text, "sim/a"), _rows(text, "sim/b")
    assert row_a[1] == "2/3" and row_a[3] == "1" and row_a[4] == "0"  # done, errors, in flight
    assert row_b[1] == "1/?" and row_b[3] == "0"  # duration-bound: total unknown
    assert "scenario 1 of 2: c=1" in text


def test_only_the_first_warning_of_a_kind_prints_live() -> None:
    console, buf = _console()
    progress = RunProgress(console, ["sim/a"], SCENARIOS, live=False, interval_s=3600)
    progress.on_event(WorkerWarning("w0", "lag in c=1", kind="loop_lag"))
    progress.on_event(WorkerWarning("w0", "lag in c=4", kind="loop_lag"))
    progress.on_event(WorkerWarning("w0", "another thing"))
    assert buf.getvalue().splitlines() == ["warning: lag in c=1", "warning: another thing"]


def test_plain_lines_every_interval_without_a_terminal() -> None:
    console, buf = _console(terminal=False)
    progress = RunProgress(console, ["sim/a", "sim/b"], SCENARIOS, interval_s=0.2)
    assert progress.live is None  # not a terminal: plain lines
    with progress:
        progress.start_scenario(0)
        progress.on_event(RequestStarted("w0", "c=1", 0, 0, 0.0))
        progress.on_event(StreamProgress("w0", "c=1", tokens=(12, 0), in_flight=(1, 0)))
        time.sleep(0.75)
        progress.start_scenario(1)
        time.sleep(0.3)
    lines = buf.getvalue().splitlines()
    assert len(lines) >= 5, lines  # one per scenario start + one every 0.2 s
    for line in lines:
        assert LINE.match(line), line
    assert lines[0].startswith("[    0s] scenario 1 of 2 (c=1): 0/? requests")
    assert any("scenario 2 of 2 (c=4)" in line for line in lines)
    assert any("1 in flight" in line and " 0 tok/s" not in line for line in lines[1:4])


def test_live_display_redraws_at_least_twice_a_second_with_no_events() -> None:
    console, _buf = _console(terminal=True)
    calls: list[float] = []

    class Counting(RunProgress):
        def render(self) -> Any:
            calls.append(time.monotonic())
            return super().render()

    progress = Counting(console, ["sim/a"], SCENARIOS)
    assert progress.live is not None
    with progress:
        progress.start_scenario(0)
        calls.clear()
        time.sleep(1.6)
    assert len(calls) >= 3, calls  # >= 2 per second while nothing happens


def test_overall_eta_covers_later_scenarios(monkeypatch: pytest.MonkeyPatch) -> None:
    now = [1000.0]
    monkeypatch.setattr("tokrate.load.progress.time.monotonic", lambda: now[0])
    console, _ = _console()
    timed = (
        ScenarioInfo("c=1", (None,), duration_s=30.0, concurrency=1),
        ScenarioInfo("c=4", (None,), duration_s=30.0, concurrency=4),
        ScenarioInfo("c=16", (None,), duration_s=30.0, concurrency=16),
    )
    progress = RunProgress(console, ["sim/a"], timed, live=False, interval_s=3600)
    progress.start_scenario(0)
    now[0] += 10.0
    assert progress.overall_eta() == pytest.approx(20.0 + 30.0 + 30.0)
    counted = (
        ScenarioInfo("c=1", (10,), concurrency=1),
        ScenarioInfo("c=2", (10,), concurrency=2),
    )
    progress = RunProgress(console, ["sim/a"], counted, live=False, interval_s=3600)
    progress.start_scenario(0)
    assert progress.overall_eta() is None  # nothing finished yet: unknown, not 0
    for _ in range(4):
        progress.on_event(_finished("a", "ok", 10, e2e=2.0))
    now[0] += 8.0
    # current: 8 s for 4 of 10 -> 12 s left; next: 10 requests / 2 streams x 2 s = 10 s
    assert progress.overall_eta() == pytest.approx(12.0 + 10.0)
    assert format_duration(22.4) == "22s" and format_duration(125) == "2m05s"


def test_grace_period_says_what_it_waits_for() -> None:
    console, _ = _console()
    stop = Stop()
    progress = RunProgress(
        console, ["sim/a"], SCENARIOS, live=False, interval_s=3600, stop=stop, grace_s=5.0
    )
    progress.start_scenario(0)
    for i in range(2):
        progress.on_event(RequestStarted("w0", "c=1", i, 0, 0.0))
    assert "stopping" not in progress.plain_line()
    stop.set()
    line = progress.plain_line()
    assert LINE.match(line), line
    assert "stopping: waiting for 2 requests in flight to finish" in line
    assert "of the 5 s grace left" in line


def test_a_log_shows_the_grace_period_at_once() -> None:
    console, buf = _console(terminal=False)
    stop = Stop()
    progress = RunProgress(console, ["sim/a"], SCENARIOS, interval_s=3600, stop=stop)
    with progress:
        progress.start_scenario(0)
        progress.on_event(RequestStarted("w0", "c=1", 0, 0, 0.0))
        stop.set()
        time.sleep(0.6)
    lines = buf.getvalue().splitlines()
    assert len(lines) == 2, lines  # the scenario start, then the stop: not every 0.25 s
    assert "stopping: waiting for 1 request in flight to finish" in lines[1]


def test_cli_prints_progress_lines_into_a_log(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from tokrate.cli import main

    rc = main(
        [
            "run",
            "-m",
            "sim-34b",
            "--concurrency",
            "1,2",
            "--requests",
            "4",
            "--max-tokens",
            "16",
            "--time-scale",
            "5",
            "--output-dir",
            str(tmp_path),
            "--no-report",
            "--progress-interval",
            "0.25",
        ]
    )
    err = capsys.readouterr().err
    assert rc == 0, err
    lines = [ln for ln in err.splitlines() if ln.startswith("[")]
    assert any("scenario 1 of 2 (c=1)" in ln for ln in lines)
    assert any("scenario 2 of 2 (c=2)" in ln for ln in lines)
    assert len(lines) >= 4, err
    assert all(LINE.match(ln) for ln in lines), lines
    # The seconds between the last request and the summary table say what they do.
    every = err.splitlines()
    assert every.index("load done; writing summary.json") > every.index(lines[-1])


def test_eta_at_c8_follows_the_streams_not_the_first_answer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Two interleaved targets, 8 streams each, every answer 4 s (a) or 2 s (b): the
    run ends at 16 s. Old pace rule (elapsed / done): 1 answer done after 4 s read
    4 s x 31 = 2 min. Checked against that schedule's own end at every answer, never
    against a wall clock."""
    now = [0.0]
    monkeypatch.setattr("tokrate.load.progress.time.monotonic", lambda: now[0])
    console, _ = _console()
    plan = (ScenarioInfo("c=8", (32, 32), concurrency=8),)
    progress = RunProgress(console, ["sim/a", "sim/b"], plan, live=False, interval_s=3600)
    progress.start_scenario(0)
    # Closed loop: each target's stream k ends at multiples of its E2E.
    ends = sorted(
        [(4.0 * (n // 8 + 1), "a", 4.0) for n in range(32)]
        + [(2.0 * (n // 8 + 1), "b", 2.0) for n in range(32)]
    )
    run_end = ends[-1][0]
    for t, model, e2e in ends[:-1]:
        now[0] = t
        progress.on_event(_finished(model, "ok", 16, e2e=e2e))
        eta = progress.overall_eta()
        if eta is None:  # unknown until each target has one answer at this load
            assert t < 4.0
            continue
        truth = run_end - t
        # Within one answer's length: the streams end in lockstep here, the worst case
        # for "requests left / streams x mean E2E".
        assert abs(eta - truth) <= 4.0, (t, eta, truth)


def test_retries_count_requests_not_attempts_and_show_the_back_off() -> None:
    """With [client.retry], each failed attempt that is sent again was counted as a
    request done (the old line read "60/40 requests ... ETA 0s" during back-off): now
    done counts planned requests by their last attempt, and the ones waiting to be sent
    again are shown as in back-off."""
    console, _ = _console()
    progress = RunProgress(
        console, ["sim/a"], (ScenarioInfo("c=2", (2,), concurrency=2),), live=False
    )
    progress.start_scenario(0)
    for index in (0, 1):
        progress.on_event(RequestStarted("w0", "c=2", index, 0, 0.0))
        progress.on_event(_attempt(index, "error", 1, retry_in_s=1.0))
    line = progress.plain_line()
    assert " 0/2 requests" in line and "0 errors, 0 in flight + 2 in retry back-off" in line
    assert LINE.match(line), line
    assert "0 +2 back-off" in _rows_text(progress)  # the live table: in flight + back-off
    progress.on_event(RequestStarted("w0", "c=2", 0, 0, 0.0))
    progress.on_event(_attempt(0, "ok", 2, retry_in_s=None))
    progress.on_event(RequestStarted("w0", "c=2", 1, 0, 0.0))
    progress.on_event(_attempt(1, "error", 2, retry_in_s=None))  # its attempts spent
    line = progress.plain_line()
    assert " 2/2 requests" in line and "1 error, 0 in flight," in line, line
    assert LINE.match(line), line


def _rows_text(progress: RunProgress) -> str:
    console, buf = _console()
    console.print(progress.render())
    return buf.getvalue()
