"""The driver-side event sink of a run: every event reaches the store first (nothing
is lost), then the live progress; outcome counts, loop-lag samples, warnings and
preconnect set-up times are kept for run.json.

Counts are kept incrementally (memory stays flat on long runs; the records themselves
live on disk only): a retry replaces its request's previous (failed) attempt, so
scheduled == ok + error + cancelled counts planned requests, once each.

A record the store cannot write (a full disk) stops the load like a signal that ends
the grace period at once (``on_write_error``); it and every record after it is kept out
of the counts (they count what records.jsonl holds) and counted in ``lost``, and
``write_error`` is the store's one-line error.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Final

from tokrate.errors import OutputError
from tokrate.inputs.targets import Target
from tokrate.load.notices import print_notice
from tokrate.load.record_warnings import RecordWarnings
from tokrate.load.stop_rules import StopRules
from tokrate.load.worker.events import (
    Event,
    LoopLag,
    Preconnected,
    RequestFinished,
    RequestStarted,
    WorkerWarning,
)
from tokrate.load.worker.looplag import LagSummary, merge
from tokrate.redact import Redactor, strip_control
from tokrate.runfolder.records import RequestRecord
from tokrate.runfolder.run_info import ConnectionSetup, OutcomeCounts
from tokrate.runfolder.store import RunStore

if TYPE_CHECKING:
    from rich.console import Console

    from tokrate.load.progress import RunProgress

__all__ = [
    "Collector",
    "TargetOutcomes",
    "collapse_warnings",
    "collapsed_warnings",
    "count_outcomes",
    "warning_groups",
]


def collapse_warnings(warnings: Sequence[tuple[str, str]]) -> list[str]:
    """One line per kind of warning, in order of first appearance: ``(kind, message)``
    pairs of one kind (a non-empty kind) become the first message plus how many more
    there were; pairs without a kind are only de-duplicated."""
    return [line for line, _n in collapsed_warnings(warnings)]


def warning_groups(warnings: Sequence[tuple[str, str]]) -> list[list[str]]:
    """The distinct messages of each kind, kinds in order of first appearance (a
    message without a kind is a group of its own)."""
    groups: dict[str, list[str]] = {}
    for kind, message in warnings:
        bucket = groups.setdefault(kind or f"\x00{message}", [])
        if message not in bucket:
            bucket.append(message)
    return list(groups.values())


def collapsed_warnings(warnings: Sequence[tuple[str, str]]) -> list[tuple[str, int]]:
    out = []
    for messages in warning_groups(warnings):
        extra = len(messages) - 1
        more = f" (and {extra} more like it)" if extra else ""
        out.append((messages[0] + more, len(messages)))
    return out


#: Messages of one kind the end-of-run list prints in full before "and N more".
SHOWN_PER_KIND: Final = 3


class TargetOutcomes:
    """Per target: ok requests, and failures by error class with a first example."""

    __slots__ = ("errors", "example", "ok", "total")

    def __init__(self) -> None:
        self.ok = 0
        self.total = 0
        self.errors: dict[str, int] = {}
        self.example: str | None = None

    def add(self, record: RequestRecord) -> None:
        self.total += 1
        if record.status == "ok":
            self.ok += 1
            return
        cls = record.error_class or record.status
        self.errors[cls] = self.errors.get(cls, 0) + 1
        if self.example is None and record.error_message:
            self.example = record.error_message

    def failure_line(self, label: str) -> str:
        if self.total == 0:
            return f"target {label} got no request (the run ended before its turn)"
        classes = ", ".join(f"{cls} {n}" for cls, n in sorted(self.errors.items()))
        example = f"; first: {self.example}" if self.example else ""
        return f"target {label} got 0 ok requests of {self.total} ({classes}){example}"


class Collector:
    """Driver-side event sink: store first (nothing lost), then progress."""

    def __init__(
        self,
        store: RunStore,
        progress: RunProgress | None,
        targets: Sequence[Target],
        redactor: Redactor | None = None,
        record_warnings: RecordWarnings | None = None,
        on_write_error: Callable[[], None] | None = None,
        stop_rules: StopRules | None = None,
    ) -> None:
        self.store = store
        #: Stopping rules (tokrate.load.stop_rules), shown each record once it is stored.
        self.stop_rules = stop_rules
        #: The store's error for the first record it could not write (module doc).
        self.write_error: OutputError | None = None
        #: Records that ended after the store failed (not on disk, not counted).
        self.lost = 0
        self._on_write_error = on_write_error
        #: Warnings derived from the records themselves (response model, context, cache).
        self.record_warnings = record_warnings
        self.redactor = redactor or Redactor()
        self.progress = progress
        # Outcome counts kept incrementally (memory stays flat on long runs; the
        # records themselves live on disk only).
        self.counts = {"scheduled": 0, "ok": 0, "error": 0, "cancelled": 0}
        self.lags: list[LagSummary] = []
        #: The same per scenario (worst worker) and whether any of its workers exceeded
        #: the threshold: run.json loop_lag.scenarios, which compare gates verdicts on.
        self.scenario_lags: dict[str, tuple[LagSummary, bool]] = {}
        self.raw_warnings: list[tuple[str, str]] = []
        self.labels = [t.label for t in targets]
        self.outcomes = {label: TargetOutcomes() for label in self.labels}
        #: Preconnected set-up times per (scenario, endpoint), for run.json.
        self.connections: dict[tuple[str, str], list[float | None]] = {}
        #: Ids of the prompts some request sent (run.json ``prompts`` ``sent``).
        self.sent_prompts: set[str] = set()
        #: Wall clock (driver's) of the first send and of the last measured end: the
        #: span the report's timeline cuts into bins.
        self.first_send_at: float | None = None
        self.last_end_at: float | None = None

    @property
    def span_s(self) -> float:
        """Seconds from the first send to the last measured end (0.0 before any)."""
        if self.first_send_at is None or self.last_end_at is None:
            return 0.0
        return max(0.0, self.last_end_at - self.first_send_at)

    @property
    def warnings(self) -> list[str]:
        return collapse_warnings(self.raw_warnings)

    def warn(self, message: str, kind: str = "") -> None:
        # Warnings quote servers and workers: redacted and stripped of terminal controls
        # before they reach run.json or the terminal.
        self.raw_warnings.append((kind, self.redactor.text(strip_control(message))))

    def finish_record_warnings(self) -> None:
        """The record-derived warnings due at the end of the measurement (call while the
        live progress still runs, so they print like the others)."""
        if self.record_warnings is not None:
            for kind, message in self.record_warnings.final():
                self(WorkerWarning("driver", message, kind))

    def failed_targets(self, *, sent_only: bool = False) -> list[str]:
        """One line per target without an ok request; ``sent_only``: only those that
        were sent some (a run a stopping rule ended may never reach a target)."""
        return [
            outcome.failure_line(label)
            for label, outcome in self.outcomes.items()
            if outcome.ok == 0 and (outcome.total or not sent_only)
        ]

    def connection_setups(self) -> tuple[ConnectionSetup, ...]:
        return tuple(
            ConnectionSetup(
                scenario=scenario,
                endpoint=endpoint,
                opened=sum(1 for v in values if v is not None),
                failed=sum(1 for v in values if v is None),
                connect_s=tuple(round(v, 6) for v in values if v is not None),
            )
            for (scenario, endpoint), values in self.connections.items()
        )

    def outcome_counts(self) -> OutcomeCounts:
        return OutcomeCounts(**self.counts)

    def end_notices(self, failed: Sequence[str]) -> list[tuple[str, str]]:
        """What the terminal shows after the run, as ``(kind, text)`` notices. With live
        progress the first warning of each kind was printed as it came, so only the
        later ones of a kind show now, each with its own numbers (a count alone hid
        them: "(and 1 more like it)" under the first one's figures); without it
        (``--quiet``) every kind shows now. At most :data:`SHOWN_PER_KIND` of a kind,
        then how many more (all are in run.json's count). Then one error per target
        without a single ok request (``failed``)."""
        live = self.progress is not None
        out: list[tuple[str, str]] = []
        for messages in warning_groups(self.raw_warnings):
            fresh = [m for m in (messages[1:] if live else messages) if m not in failed]
            out.extend(("warning", message) for message in fresh[:SHOWN_PER_KIND])
            if len(fresh) > SHOWN_PER_KIND:
                out.append(("warning", f"... and {len(fresh) - SHOWN_PER_KIND} more like these"))
        out.extend(("error", line) for line in failed)
        return out

    def print_warnings(self, console: Console, failed: Sequence[str]) -> None:
        """Print :meth:`end_notices` on ``console``."""
        for kind, text in self.end_notices(failed):
            print_notice(console, kind, text)

    def _stored(self, record: RequestRecord) -> bool:
        """Append ``record`` to the store; False (and the load stopped) when it cannot."""
        if self.write_error is None:
            try:
                self.store.append(record)
                return True
            except OutputError as err:
                self.write_error = err
                (self._on_write_error or _noop)()
        self.lost += 1
        return False

    def stop_on_write_error(self, err: OutputError) -> None:
        """A write of the store outside an event (a scenario's flush) failed: as for a
        record (module doc)."""
        if self.write_error is None:
            self.write_error = err
            (self._on_write_error or _noop)()

    def _finished(self, record: RequestRecord) -> None:
        """Store first (nothing lost), then counts, warnings and the stopping rules."""
        if not self._stored(record):
            return
        self.sent_prompts.add(record.prompt_id)
        if record.attempt > 1:
            # A retry replaces its request's previous (failed) attempt in the counts.
            self.counts["error"] -= 1
        else:
            self.counts["scheduled"] += 1
        self.counts[record.status] += 1
        if self.first_send_at is None or record.started_at < self.first_send_at:
            self.first_send_at = record.started_at
        if not record.warmup:
            end = record.started_at + (record.e2e_s or 0.0)
            if self.last_end_at is None or end > self.last_end_at:
                self.last_end_at = end
        outcome = self.outcomes.get(f"{record.endpoint}/{record.model}")
        if outcome is not None:
            outcome.add(record)
        if self.record_warnings is not None:
            for kind, message in self.record_warnings.add(record):
                self(WorkerWarning("driver", message, kind))
        if self.stop_rules:
            self.stop_rules.observe(record)

    def __call__(self, event: Event) -> None:
        if isinstance(event, RequestFinished):
            self._finished(event.record)
        elif isinstance(event, RequestStarted):
            if self.stop_rules and 0 <= event.target_index < len(self.labels):
                self.stop_rules.started(self.labels[event.target_index])
        elif isinstance(event, LoopLag):
            lag = LagSummary(event.max_ms, event.p99_ms, event.samples)
            self.lags.append(lag)
            seen, exceeded = self.scenario_lags.get(event.scenario, (None, False))
            worst = lag if seen is None else merge([seen, lag])
            self.scenario_lags[event.scenario] = (worst, exceeded or event.exceeded)
        elif isinstance(event, WorkerWarning):
            self.warn(event.message, event.kind)
        elif isinstance(event, Preconnected):
            key = (event.scenario, event.endpoint)
            self.connections.setdefault(key, []).extend(event.connect_s)
        if self.progress is not None:
            self.progress.on_event(event)


def _noop() -> None:
    pass


def count_outcomes(records: Sequence[RequestRecord]) -> dict[str, int]:
    """scheduled/ok/error/cancelled over the *last attempt* of each planned request
    (a retried request counts once), so scheduled == ok + error + cancelled."""
    last: dict[tuple[str, int], RequestRecord] = {}
    for r in records:
        key = (r.scenario, r.request_index)
        prev = last.get(key)
        if prev is None or r.attempt >= prev.attempt:
            last[key] = r
    counts = {"scheduled": len(last), "ok": 0, "error": 0, "cancelled": 0}
    for r in last.values():
        counts[r.status] += 1
    return counts
