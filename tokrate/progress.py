"""Live terminal progress of a run: the only live drawing in tokrate.

One row per target (``endpoint/model``): requests done/total of the current scenario,
streamed output tokens/s (over the scenario so far), errors, elapsed and ETA. Drawn
with rich on the console it is given (``tokrate run`` uses stderr, so ``--json`` can
own stdout). Warnings print above the live rows as they arrive. ``live=False``
(``--quiet``) draws nothing but still prints warnings.

The final summary table is :func:`print_summary` (``tokrate.report.text.render_summary``
when that module exists, else a compact table of its own).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from types import TracebackType
from typing import Any

from rich.console import Console
from rich.live import Live
from rich.table import Table

from tokrate.events import RequestFinished, RequestStarted, WorkerWarning

__all__ = ["RunProgress", "compact_table", "print_summary"]

_REFRESH_PER_S = 4


class _Row:
    __slots__ = ("done", "errors", "in_flight", "tokens", "total")

    def __init__(self) -> None:
        self.done = 0
        self.errors = 0
        self.tokens = 0
        self.in_flight = 0
        self.total: int | None = None


class RunProgress:
    """Consumes engine events in the driver thread and redraws at 4 Hz.

    Use as a context manager (or call :meth:`close`); :meth:`start_scenario` resets
    the rows with each target's planned request count (None when duration-bound).
    """

    def __init__(self, console: Console, targets: Sequence[str], *, live: bool = True) -> None:
        self.console = console
        self.labels = list(targets)
        self.rows = [_Row() for _ in self.labels]
        self.index = {label: i for i, label in enumerate(self.labels)}
        self.scenario = ""
        self.started = time.monotonic()
        self.live: Live | None = None
        if live:
            self.live = Live(
                self.render(),
                console=console,
                refresh_per_second=_REFRESH_PER_S,
                transient=True,
                redirect_stdout=False,
                redirect_stderr=False,
            )

    def __enter__(self) -> RunProgress:
        if self.live is not None:
            self.live.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        """Stop drawing (idempotent)."""
        if self.live is not None:
            self.live.stop()
            self.live = None

    def start_scenario(self, name: str, totals: Sequence[int | None]) -> None:
        self.scenario = name
        self.started = time.monotonic()
        self.rows = [_Row() for _ in self.labels]
        for row, total in zip(self.rows, totals, strict=False):
            row.total = total
        self._refresh()

    def on_event(self, event: Any) -> None:
        if isinstance(event, RequestStarted):
            if 0 <= event.target_index < len(self.rows):
                self.rows[event.target_index].in_flight += 1
        elif isinstance(event, RequestFinished):
            rec = event.record
            i = self.index.get(f"{rec.endpoint}/{rec.model}")
            if i is not None:
                row = self.rows[i]
                row.in_flight = max(0, row.in_flight - 1)
                row.done += 1
                if rec.status != "ok":
                    row.errors += 1
                row.tokens += rec.output_tokens or 0
        elif isinstance(event, WorkerWarning):
            self.console.print(f"warning: {event.message}", markup=False, highlight=False)
        self._refresh()

    def _refresh(self) -> None:
        if self.live is not None:
            self.live.update(self.render())

    def render(self) -> Table:
        """The current rows as a rich Table (what the live display shows)."""
        elapsed = time.monotonic() - self.started
        table = Table(title=f"scenario {self.scenario}", title_justify="left", box=None)
        for col in ("target", "done", "tok/s", "errors", "elapsed", "eta"):
            table.add_column(col, justify="left" if col == "target" else "right")
        for label, row in zip(self.labels, self.rows, strict=True):
            total = "?" if row.total is None else str(row.total)
            tps = row.tokens / elapsed if elapsed > 0 else 0.0
            eta = "-"
            if row.total and row.done and row.done < row.total:
                eta = f"{elapsed / row.done * (row.total - row.done):.0f}s"
            elif row.total is not None and row.done >= row.total:
                eta = "done"
            table.add_row(
                label,
                f"{row.done}/{total}",
                f"{tps:,.0f}",
                str(row.errors),
                f"{elapsed:.0f}s",
                eta,
            )
        return table


def _fmt_ms(stat: Any, key: str = "p50") -> str:
    if not isinstance(stat, dict) or stat.get(key) is None:
        return "-"
    return f"{1000.0 * float(stat[key]):,.0f}"


def _fmt_num(value: Any, digits: int = 1) -> str:
    return "-" if value is None else f"{float(value):,.{digits}f}"


def print_summary(summary: dict[str, Any] | None, console: Console) -> None:
    """The end-of-run table: the report area's renderer when present, else our own."""
    if summary is None:
        console.print("no summary (tokrate.metrics unavailable)", markup=False)
        return
    try:
        from tokrate.report.text import render_summary
    except ImportError:  # the report area's renderer is optional; fall back below
        pass
    else:
        render_summary(summary, console)
        return
    console.print(compact_table(summary))


def compact_table(summary: dict[str, Any]) -> Table:
    """A small summary table of our own (used when tokrate.report.text is absent)."""
    table = Table(title=f"run {summary.get('run_id', '')}", title_justify="left")
    for col in (
        "model",
        "scenario",
        "ok/sched",
        "err",
        "TTFT p50 ms",
        "TTFT p99 ms",
        "TPOT p50 ms",
        "decode tok/s",
        "agg tok/s",
    ):
        table.add_column(col, justify="left" if col in ("model", "scenario") else "right")
    for g in summary.get("groups", []):
        counts = g.get("counts", {})
        decode = g.get("decode_tps") or {}
        table.add_row(
            str(g.get("model")),
            str(g.get("scenario")),
            f"{counts.get('ok', 0)}/{counts.get('scheduled', 0)}",
            str(counts.get("error", 0)),
            _fmt_ms(g.get("ttft_s")),
            _fmt_ms(g.get("ttft_s"), "p99"),
            _fmt_ms(g.get("tpot_s")),
            _fmt_num(decode.get("p50")),
            _fmt_num(g.get("aggregate_output_tps")),
        )
    return table
