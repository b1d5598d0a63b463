"""Live progress rows and the end-of-run table, rendered to a fixed-width console."""

from __future__ import annotations

import io

from rich.console import Console

from tokrate.events import RequestFinished, RequestStarted, WorkerWarning
from tokrate.progress import RunProgress, compact_table
from tokrate.records import RequestRecord


def _console() -> tuple[Console, io.StringIO]:
    buf = io.StringIO()
    return Console(file=buf, width=100, force_terminal=False, color_system=None), buf


def _finished(model: str, status: str, tokens: int | None) -> RequestFinished:
    rec = RequestRecord(
        run_id="r", endpoint="sim", model=model, scenario="c=1", prompt_id="p", task="t",
        request_index=0, started_at=0.0, t0_ns=0, status=status,  # type: ignore[arg-type]
        output_tokens=tokens, error_class=None if status == "ok" else "http_5xx",
    )  # fmt: skip
    return RequestFinished(record=rec)


def test_rows_count_done_errors_and_tokens() -> None:
    console, buf = _console()
    progress = RunProgress(console, ["sim/a", "sim/b"], live=False)
    progress.start_scenario("c=1", [3, None])
    progress.on_event(RequestStarted("w0", "c=1", 0, 0, 0.0))
    progress.on_event(_finished("a", "ok", 10))
    progress.on_event(_finished("a", "error", None))
    progress.on_event(_finished("b", "ok", 5))
    progress.on_event(WorkerWarning("w0", "something to fix"))
    progress.close()
    console.print(progress.render())
    text = buf.getvalue()
    assert "warning: something to fix" in text
    row_a = next(line for line in text.splitlines() if "sim/a" in line).split()
    row_b = next(line for line in text.splitlines() if "sim/b" in line).split()
    assert row_a[1] == "2/3" and row_a[3] == "1"  # done/total, errors
    assert row_b[1] == "1/?" and row_b[3] == "0"  # duration-bound: total unknown


def test_compact_table_shows_each_group() -> None:
    console, buf = _console()
    summary = {
        "run_id": "x",
        "groups": [
            {
                "model": "sim-7b",
                "scenario": "c=1",
                "counts": {"ok": 8, "scheduled": 8, "error": 0},
                "ttft_s": {"p50": 0.0123, "p99": 0.02},
                "tpot_s": {"p50": 0.0086},
                "decode_tps": {"p50": 116.3},
                "aggregate_output_tps": 114.0,
            }
        ],
    }
    console.print(compact_table(summary))
    line = next(ln for ln in buf.getvalue().splitlines() if "sim-7b" in ln)
    for cell in ("c=1", "8/8", "12", "20", "9", "116.3", "114.0"):
        assert cell in line, cell
