"""Stopping rules: conditions checked on every record as it reaches the driver, each
of which may end sending early, for the scenario or for the whole run. One mechanism
for every such condition (the spend cap, ``--max-cost``: tokrate.load.spend; a rule
that samples until every statistic is judged can be another): a rule only says *why*
to stop; :class:`StopRules` does the stopping and keeps the reasons for run.json.

How a stop works: each scenario runs under its own :class:`~tokrate.load.worker.
stopping.Stop`, a child of the run's (so a signal still stops everything). A rule's
reason of scope "scenario" sets that child: its workers stop scheduling, the requests
in flight get the grace period and are recorded, and the next scenario starts. Scope
"run" does the same and starts no further scenario. Nothing is lost: every record
already sent reaches records.jsonl first (the collector calls the rules after the
store). The run then finishes as a complete run (its plan ended early by a rule, not by
the user), and run.json ``stopped`` says which rule stopped what, and why.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

from tokrate.load.worker.stopping import Stop
from tokrate.runfolder.records import RequestRecord
from tokrate.runfolder.run_info import StopInfo

__all__ = ["StopReason", "StopRule", "StopRules"]


@dataclass(frozen=True, slots=True)
class StopReason:
    """Why a rule stopped sending: ``rule`` (its name, e.g. "max_cost"), ``scope``
    ("scenario": this one ends, the next starts; "run": no further scenario) and
    ``detail`` (one line a user reads, with the numbers)."""

    rule: str
    scope: Literal["scenario", "run"]
    detail: str


class StopRule(Protocol):
    """A stopping condition. ``observe`` sees every record the driver receives, in
    arrival order (warm-up, retried and failed ones too), with the requests still in
    flight per target label ("endpoint/model", this one no longer among them), and
    returns a reason the first time sending must stop (None otherwise)."""

    def observe(self, record: RequestRecord, in_flight: Mapping[str, int]) -> StopReason | None: ...


class StopRules:
    """The rules of one run, applied to its records (the collector calls
    :meth:`observe` after storing each one)."""

    def __init__(self, rules: Sequence[StopRule]) -> None:
        self.rules = tuple(rules)
        #: Requests sent and not yet recorded, per target label.
        self.in_flight: dict[str, int] = {}
        self._scenario: str | None = None
        self._stop: Stop | None = None
        #: The reason that ended the run (scope "run"), once one has.
        self.halted: StopReason | None = None
        self._stopped: list[StopInfo] = []

    def __bool__(self) -> bool:
        return bool(self.rules)

    def begin(self, scenario: str, stop: Stop) -> None:
        """The scenario now measured and the Stop its workers watch."""
        self._scenario, self._stop = scenario, stop

    def started(self, label: str) -> None:
        """A request to target ``label`` was sent (RequestStarted)."""
        self.in_flight[label] = self.in_flight.get(label, 0) + 1

    def observe(self, record: RequestRecord) -> None:
        label = f"{record.endpoint}/{record.model}"
        if self.in_flight.get(label, 0) > 0:
            self.in_flight[label] -= 1
        for rule in self.rules:
            reason = rule.observe(record, self.in_flight)
            if reason is None:
                continue
            scenario = self._scenario or record.scenario
            if not any(s.rule == reason.rule and s.scenario == scenario for s in self._stopped):
                self._stopped.append(StopInfo(reason.rule, reason.scope, scenario, reason.detail))
            if reason.scope == "run" and self.halted is None:
                self.halted = reason
            if self._stop is not None:
                self._stop.set()

    @property
    def stopped(self) -> tuple[StopInfo, ...]:
        """What each rule stopped, in order (run.json ``stopped``)."""
        return tuple(self._stopped)
