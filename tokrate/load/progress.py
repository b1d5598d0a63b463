"""Live progress of a run: the only live drawing in tokrate.

Consumes engine events in the driver thread. Clock: ``time.monotonic()`` of the
driver (nothing here enters a measurement).

- On a terminal: a rich Live display redrawn :data:`REFRESH_PER_S` (4) times a second
  by rich's own thread, whatever the requests do: a title line (run, "scenario k of
  N", elapsed, overall ETA), one row per target (requests done/total of the scenario,
  output tokens/s, errors, requests in flight, ETA of the scenario) and, after Ctrl-C,
  what the run is waiting for (requests in flight, grace seconds left).
- Anywhere else (a CI log, a pipe): one plain line every ``interval_s`` seconds
  (``[output] progress_interval_s``, default 10) from a timer thread, plus one when
  each scenario starts and one when Ctrl-C starts the grace period, in this form::

      [  12s] scenario 2 of 4 (c=8): 37/96 requests, 1,234 tok/s, 0 errors, 8 in flight, ETA ~45s

Requests, not attempts: with ``[client.retry]`` a failed attempt that is sent again
(RequestFinished.retry_in_s) is not done; it waits in back-off ("8 in flight + 2 in
retry back-off"; "+2 back-off" in the live table), and its request counts once, by
its last attempt, so done never passes the planned total.

Tokens count as chunks arrive: workers report each request's content chunks while
it streams (StreamProgress, 4 times a second), replaced by the server's usage count
once it ends. The overall ETA adds the current scenario's remaining time (its
duration limit, or the requests left / streams x the target's mean E2E at this load)
and an estimate per later scenario (its duration limit, or planned requests / streams
x the target's mean E2E so far); "?" until that can be known.

Warnings print above the display as they arrive, the first of each kind only
(the later ones print at the end: ``Collector.end_notices``, through tokrate.load.live).

The final summary table is ``tokrate.report.text.render_summary``'s.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Final

from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from tokrate.load.notices import print_notice
from tokrate.load.worker.events import (
    RequestFinished,
    RequestStarted,
    StreamProgress,
    WorkerWarning,
)

__all__ = [
    "REFRESH_PER_S",
    "RunProgress",
    "ScenarioInfo",
    "format_duration",
]

#: Redraws per second of the live display (at least 2, whatever requests do).
REFRESH_PER_S: Final = 4


@dataclass(frozen=True, slots=True)
class ScenarioInfo:
    """What progress needs to know of one scenario ahead of time. ``planned`` has one
    entry per target of the run: requests it gets here (0: not in this scenario; None:
    duration-bound). ``concurrency``/``rate_rps`` are per target."""

    name: str
    planned: tuple[int | None, ...]
    duration_s: float | None = None
    concurrency: int | None = None
    rate_rps: float | None = None


def format_duration(seconds: float | None) -> str:
    """``"45s"``, ``"3m05s"``, ``"1h02m"``; ``"?"`` for None."""
    if seconds is None or not math.isfinite(seconds):
        return "?"
    s = max(0, round(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


class _Row:
    """One target's requests in the current scenario. ``done`` counts planned requests
    whose last attempt ended (a retry replaces its request's failed attempt: done never
    passes total), ``backing_off`` the requests waiting to be sent again."""

    __slots__ = ("backing_off", "done", "errors", "finished_at", "in_flight", "total")

    def __init__(self, total: int | None) -> None:
        self.done = 0
        self.errors = 0
        self.in_flight = 0
        self.backing_off = 0
        self.total = total
        #: When the target's last planned request ended (its tok/s stops there).
        self.finished_at: float | None = None


class RunProgress:
    """Progress of one run; use as a context manager (or call :meth:`close`).

    ``targets`` are the ``endpoint/model`` labels in target-index order; ``scenarios``
    the run's scenarios in order. ``stop`` is the run's stop event (Ctrl-C sets it)
    and ``grace_s`` the engine's grace period, shown while stopping. ``live`` forces
    the terminal display (True) or plain lines (False); None picks by
    ``console.is_terminal``.
    """

    def __init__(
        self,
        console: Console,
        targets: Sequence[str],
        scenarios: Sequence[ScenarioInfo] = (),
        *,
        title: str = "tokrate run",
        stop: threading.Event | None = None,
        grace_s: float = 5.0,
        interval_s: float = 10.0,
        live: bool | None = None,
    ) -> None:
        self.console = console
        self.labels = list(targets)
        self.index = {label: i for i, label in enumerate(self.labels)}
        self.scenarios = list(scenarios)
        self.title = title
        self.stop = stop
        self.grace_s = grace_s
        self.interval_s = interval_s
        self.k = -1
        self.rows = [_Row(None) for _ in self.labels]
        self.snapshots: dict[str, tuple[int, ...]] = {}
        self.run_started = time.monotonic()
        self.started = self.run_started
        self.stop_seen: float | None = None
        self.warned: set[str] = set()
        #: (scenario, request index, target index) of requests in back-off.
        self.retrying: set[tuple[str, int, int]] = set()
        # Mean E2E of ok requests per target over the whole run (for later scenarios)
        # and in the current scenario (its own load sets its pace).
        self.e2e_sum = [0.0] * len(self.labels)
        self.e2e_n = [0] * len(self.labels)
        self.level_e2e_sum = [0.0] * len(self.labels)
        self.level_e2e_n = [0] * len(self.labels)
        self._lock = threading.RLock()
        self._closed = threading.Event()
        self._ticker: threading.Thread | None = None
        self.live: Live | None = None
        use_live = console.is_terminal if live is None else live
        if use_live:
            self.live = Live(
                console=console,
                refresh_per_second=REFRESH_PER_S,
                transient=True,
                redirect_stdout=False,
                redirect_stderr=False,
                get_renderable=self.render,
            )

    # --- lifecycle ------------------------------------------------------------------

    def __enter__(self) -> RunProgress:
        if self.live is not None:
            self.live.start()
        else:
            self._ticker = threading.Thread(target=self._tick, name="tokrate-progress", daemon=True)
            self._ticker.start()
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
        self._closed.set()
        if self.live is not None:
            self.live.stop()
            self.live = None
        if self._ticker is not None:
            self._ticker.join(timeout=2)
            self._ticker = None

    def _tick(self) -> None:
        """Plain lines: one every ``interval_s``, and one at once when a stop begins
        (so a log shows what the grace period waits for)."""
        last = time.monotonic()
        stop_told = False
        while not self._closed.wait(min(0.25, self.interval_s)):
            stopping = self.stop is not None and self.stop.is_set()
            now = time.monotonic()
            if self.k < 0 and not stopping:
                continue  # no scenario yet: start_scenario prints the first line
            if now - last >= self.interval_s or (stopping and not stop_told):
                stop_told = stop_told or stopping
                last = now
                self._print_line()

    def _print_line(self) -> None:
        line = self.plain_line()
        self.console.print(line, markup=False, highlight=False, soft_wrap=True)

    # --- events ---------------------------------------------------------------------

    def start_scenario(self, k: int) -> None:
        """Scenario ``k`` (index into ``scenarios``) starts now."""
        with self._lock:
            self.k = k
            self.started = time.monotonic()
            info = self.scenarios[k] if 0 <= k < len(self.scenarios) else None
            planned = info.planned if info is not None else ()
            self.rows = [
                _Row(planned[i] if i < len(planned) else None) for i in range(len(self.labels))
            ]
            self.snapshots = {}
            self.retrying = set()
            self.level_e2e_sum = [0.0] * len(self.labels)
            self.level_e2e_n = [0] * len(self.labels)
        if self.live is None and self._ticker is not None:
            self._print_line()

    def on_event(self, event: Any) -> None:
        with self._lock:
            if isinstance(event, RequestStarted):
                if 0 <= event.target_index < len(self.rows):
                    row = self.rows[event.target_index]
                    row.in_flight += 1
                    again = (event.scenario, event.request_index, event.target_index)
                    if again in self.retrying:
                        self.retrying.discard(again)
                        row.backing_off = max(0, row.backing_off - 1)
            elif isinstance(event, RequestFinished):
                self._finished(event)
            elif isinstance(event, StreamProgress):
                self.snapshots[event.worker_id] = event.tokens
        if isinstance(event, WorkerWarning):
            key = event.kind or event.message
            if key not in self.warned:
                self.warned.add(key)
                print_notice(self.console, "warning", event.message)

    def _finished(self, event: RequestFinished) -> None:
        rec = event.record
        i = self.index.get(f"{rec.endpoint}/{rec.model}")
        if i is None:
            return
        row = self.rows[i]
        row.in_flight = max(0, row.in_flight - 1)
        if event.retry_in_s is not None:
            # Not the request's last attempt: it waits, then is sent again.
            row.backing_off += 1
            self.retrying.add((rec.scenario, rec.request_index, i))
            return
        row.done += 1
        if row.total is not None and row.done >= row.total and row.finished_at is None:
            row.finished_at = time.monotonic()
        if rec.status != "ok":
            row.errors += 1
        elif rec.e2e_s is not None:
            self.e2e_sum[i] += rec.e2e_s
            self.e2e_n[i] += 1
            self.level_e2e_sum[i] += rec.e2e_s
            self.level_e2e_n[i] += 1

    # --- numbers --------------------------------------------------------------------

    def _tokens(self) -> list[int]:
        tokens = [0] * len(self.labels)
        for snapshot in self.snapshots.values():
            for i, n in enumerate(snapshot[: len(tokens)]):
                tokens[i] += n
        return tokens

    def _mean_e2e(self, i: int) -> float | None:
        """Target ``i``'s mean E2E in this scenario, else over the run so far."""
        if self.level_e2e_n[i]:
            return self.level_e2e_sum[i] / self.level_e2e_n[i]
        if self.e2e_n[i]:
            return self.e2e_sum[i] / self.e2e_n[i]
        return None

    def _row_eta(self, row: _Row, elapsed: float, i: int | None = None) -> float | None:
        """Seconds left for one target, from its mean E2E at this load (before its
        first request of the scenario ends, its mean from earlier ones; else None).

        Closed loop: the requests left, ``concurrency`` at a time, each one mean E2E
        long. Not the pace done / elapsed: at c streams the first answers all end
        about one E2E in, and 1 done after 4 s at c=8 is not 4 s per request (that
        read 2m02s for a run that ended at 61 s). Open loop: the arrivals left at the
        rate, plus one E2E for the last answer."""
        if row.total is None:
            return None
        if row.done >= row.total:
            return 0.0
        info = self.scenarios[self.k] if 0 <= self.k < len(self.scenarios) else None
        mean = None if i is None else self._mean_e2e(i)
        if mean is None or info is None:
            return None
        if info.rate_rps:
            return max(0.0, row.total / info.rate_rps + mean - elapsed)
        streams = max(1, min(info.concurrency or 1, row.total))
        return (row.total - row.done) / streams * mean

    def _scenario_eta(self, elapsed: float) -> float | None:
        """Seconds left in the current scenario (None: not known yet)."""
        info = self.scenarios[self.k] if 0 <= self.k < len(self.scenarios) else None
        by_duration = None
        if info is not None and info.duration_s is not None:
            by_duration = max(0.0, info.duration_s - elapsed)
        etas = [self._row_eta(r, elapsed, i) for i, r in enumerate(self.rows) if r.total != 0]
        if any(r.total is None for r in self.rows if r.total != 0):
            return by_duration
        if any(e is None for e in etas):
            return by_duration
        by_count = max((e for e in etas if e is not None), default=0.0)
        return by_count if by_duration is None else min(by_count, by_duration)

    def _future_eta(self, info: ScenarioInfo) -> float | None:
        """Estimated seconds of a scenario not started yet."""
        per_target: list[float] = []
        for i, planned in enumerate(info.planned):
            if planned == 0:
                continue
            mean = self.e2e_sum[i] / self.e2e_n[i] if self.e2e_n[i] else None
            if planned is None:
                continue  # bounded by the duration below
            if mean is None:
                return info.duration_s
            if info.rate_rps:
                per_target.append(planned / info.rate_rps + mean)
            else:
                per_target.append(math.ceil(planned / (info.concurrency or 1)) * mean)
        by_count = max(per_target) if per_target else None
        if info.duration_s is None:
            return by_count
        return info.duration_s if by_count is None else min(by_count, info.duration_s)

    def overall_eta(self) -> float | None:
        """Seconds left in the whole run (None: unknown yet)."""
        with self._lock:
            elapsed = time.monotonic() - self.started
            total = self._scenario_eta(elapsed)
            if total is None:
                return None
            for info in self.scenarios[self.k + 1 :]:
                rest = self._future_eta(info)
                if rest is None:
                    return None
                total += rest
            return total

    def _stopping(self) -> str | None:
        if self.stop is None or not self.stop.is_set():
            return None
        now = time.monotonic()
        if self.stop_seen is None:
            self.stop_seen = now
        in_flight = sum(r.in_flight for r in self.rows)
        left = self.grace_s - (now - self.stop_seen)
        if left > 0:
            return (
                f"stopping: waiting for {in_flight} request{'s' if in_flight != 1 else ''}"
                f" in flight to finish ({left:.1f} s of the {self.grace_s:g} s grace left,"
                " then they are recorded as cancelled); Ctrl-C twice more stops waiting"
            )
        return (
            f"stopping: grace period over, cancelling {in_flight} request"
            f"{'s' if in_flight != 1 else ''} still in flight and writing the run folder"
        )

    def _header(self) -> str:
        n = len(self.scenarios)
        name = self.scenarios[self.k].name if 0 <= self.k < n else ""
        elapsed = time.monotonic() - self.run_started
        eta = self.overall_eta()
        return (
            f"{self.title} · scenario {self.k + 1} of {n}: {name} · elapsed"
            f" {format_duration(elapsed)} · ETA {'~' if eta else ''}{format_duration(eta)}"
        )

    # --- drawing --------------------------------------------------------------------

    def render(self) -> Group:
        """The current state as rich renderables (what the live display shows)."""
        with self._lock:
            elapsed = time.monotonic() - self.started
            tokens = self._tokens()
            table = Table(box=None, pad_edge=False)
            for col in ("target", "done", "tok/s", "errors", "in flight", "eta"):
                table.add_column(col, justify="left" if col == "target" else "right")
            for i, (label, row, tok) in enumerate(zip(self.labels, self.rows, tokens, strict=True)):
                if row.total == 0:
                    continue  # not part of this scenario (sequential mode)
                total = "?" if row.total is None else str(row.total)
                active = (row.finished_at or time.monotonic()) - self.started
                tps = tok / active if active > 0 else 0.0
                eta = self._row_eta(row, elapsed, i)
                eta_text = "done" if eta == 0.0 else format_duration(eta)
                table.add_row(
                    label,
                    f"{row.done}/{total}",
                    f"{tps:,.0f}",
                    str(row.errors),
                    str(row.in_flight) + _backing_off(row.backing_off, short=True),
                    eta_text,
                )
            parts: list[Any] = [Text(self._header()), table]
            stopping = self._stopping()
            if stopping is not None:
                parts.append(Text(stopping, style="yellow"))
            return Group(*parts)

    def plain_line(self) -> str:
        """One line for logs: where the run is, how fast, and how long it has left."""
        with self._lock:
            elapsed = time.monotonic() - self.started
            n = len(self.scenarios)
            name = self.scenarios[self.k].name if 0 <= self.k < n else ""
            rows = [r for r in self.rows if r.total != 0]
            done = sum(r.done for r in rows)
            totals = [r.total for r in rows]
            total = "?" if any(t is None for t in totals) else str(sum(t or 0 for t in totals))
            tps = sum(self._tokens()) / elapsed if elapsed > 0 else 0.0
            errors = sum(r.errors for r in rows)
            in_flight = sum(r.in_flight for r in rows)
            backing_off = _backing_off(sum(r.backing_off for r in rows), short=False)
            eta = self.overall_eta()
            since = time.monotonic() - self.run_started
            line = (
                f"[{format_duration(since):>6}] scenario {self.k + 1} of {n} ({name}):"
                f" {done}/{total} requests, {tps:,.0f} tok/s, {errors} error"
                f"{'s' if errors != 1 else ''}, {in_flight} in flight{backing_off},"
                f" ETA {'~' if eta else ''}{format_duration(eta)}"
            )
            stopping = self._stopping()
            return f"{line}; {stopping}" if stopping else line


def _backing_off(n: int, *, short: bool) -> str:
    """The requests waiting out a retry's back-off, after the in-flight count."""
    if not n:
        return ""
    return f" +{n} back-off" if short else f" + {n} in retry back-off"
