"""The result of a capacity search (capacity.json, summary.json's ``capacity``): typed,
frozen, JSON round-trip. No measuring code: the analysis side reads it.

Units: a *level* is concurrency per target (closed loop, streams) or requests/s per
target (open loop); intervals are fractions in [0, 1]; percentiles in seconds.

Verdicts of one probe: ``meets`` (the Wilson interval of the SLO-met fraction lies at
or above the goodput), ``misses`` (below it), ``undecided`` (the probe's request
budget ended first), ``client_bound`` (the measuring client was the bottleneck: its
event loop lagged or its sends fell behind), ``interrupted``.

Verdicts of one target's search: ``found`` (capacity with a meeting probe below and a
missing one above), ``at_max`` (even ``max_level`` meets: capacity is at least that),
``none`` (the lowest level probed misses), ``undecided`` (the bound above the capacity
is an undecided probe: the capacity is the highest level *shown* to meet),
``client_bound`` (the search stopped: the client, not the server, limited the load;
the capacity is a lower bound), ``budget`` (time or request budget spent; the capacity
is a lower bound), ``interrupted``, ``unverified`` (``verify``: no probe at the capacity
met again, even after lowering it to the next level that had met), ``non_monotone``
(``verify``: twice the capacity met too, though a level between missed: the SLO-met
fraction does not fall steadily with load, so no one level is the capacity).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Final, Literal

from tokrate.errors import RunFolderError
from tokrate.runfolder.jsondoc import from_json

__all__ = [
    "CAPACITY_SCHEMA_VERSION",
    "PROBE_VERDICTS",
    "ProbePhase",
    "SEARCH_VERDICTS",
    "capacity_from_json",
    "CapacityProbe",
    "CapacityResult",
    "TargetCapacity",
]

CAPACITY_SCHEMA_VERSION: Final = 1
PROBE_VERDICTS: Final = ("meets", "misses", "undecided", "client_bound", "interrupted")
SEARCH_VERDICTS: Final = (
    "found",
    "at_max",
    "none",
    "undecided",
    "client_bound",
    "budget",
    "interrupted",
    "unverified",
    "non_monotone",
)

ProbePhase = Literal["bracket", "bisect", "verify"]


@dataclass(frozen=True, slots=True)
class CapacityProbe:
    """One probe: ``requests`` measured requests at ``level``, ``met`` of them meeting
    every SLO; ``interval`` the Wilson interval of ``met / requests``; ``slo_met``
    the met fraction per SLO key; ``percentiles`` p50/p90/p99 (seconds) of the
    ``limiting_slo``'s metric; ``loop_lag_p99_ms`` the client loop's lag and
    ``send_delay_p95_s`` (open loop) how late sends went out; ``client_cpu_fraction``
    the measuring process's CPU time / wall time (None: workers ran elsewhere)."""

    level: float
    phase: ProbePhase
    scenario: str
    requests: int
    met: int
    interval: tuple[float, float] | None
    verdict: str
    limiting_slo: str | None = None
    slo_met: Mapping[str, float | None] = field(default_factory=dict)
    percentiles: Mapping[str, float | None] = field(default_factory=dict)
    errors: int = 0
    duration_s: float = 0.0
    loop_lag_p99_ms: float | None = None
    send_delay_p95_s: float | None = None
    client_cpu_fraction: float | None = None
    #: Written for readers of the file (jsondoc), never read back.
    __json_computed__: ClassVar = {"met": ("met_fraction",)}

    @property
    def met_fraction(self) -> float | None:
        return self.met / self.requests if self.requests else None


@dataclass(frozen=True, slots=True)
class TargetCapacity:
    """One target's search: ``capacity`` the highest level shown to meet every SLO
    (None: none did), ``verdict`` how the search ended (module doc), ``bracket`` the
    (meets, does not meet) levels it narrowed to, ``note`` one line for a reader."""

    endpoint: str
    model: str
    capacity: float | None
    verdict: str
    limiting_slo: str | None
    bracket: tuple[float, float] | None
    note: str = ""
    requests: int = 0
    duration_s: float = 0.0
    probes: tuple[CapacityProbe, ...] = ()

    @property
    def key(self) -> tuple[str, str]:
        return (self.endpoint, self.model)

    @property
    def label(self) -> str:
        return f"{self.endpoint}/{self.model}"


@dataclass(frozen=True, slots=True)
class CapacityResult:
    """capacity.json: the search settings that give the numbers their meaning and one
    :class:`TargetCapacity` per target, in run.json's target order."""

    schema_version: int = field(default=CAPACITY_SCHEMA_VERSION, kw_only=True)
    mode: Literal["closed", "open"]
    goodput: float
    confidence: float
    slo: Mapping[str, float | None]
    targets: tuple[TargetCapacity, ...]
    #: Written for readers of the file (jsondoc), never read back.
    __json_computed__: ClassVar = {"mode": ("unit",)}

    @property
    def unit(self) -> str:
        """What a level counts: "concurrency" (streams) or "rate_rps"."""
        return "concurrency" if self.mode == "closed" else "rate_rps"

    def target(self, endpoint: str, model: str) -> TargetCapacity | None:
        return next((t for t in self.targets if t.key == (endpoint, model)), None)


def capacity_from_json(data: Any, where: str = "capacity.json") -> CapacityResult:
    """capacity.json's document (or summary.json's ``capacity``). Raises RunFolderError
    (one line) for an unknown version or a bad field."""
    if not isinstance(data, Mapping):
        raise RunFolderError(f"{where}: not a JSON object")
    version = data.get("schema_version")
    if version != CAPACITY_SCHEMA_VERSION:
        raise RunFolderError(
            f"{where}: schema_version {version!r} is not supported"
            f" (known: [{CAPACITY_SCHEMA_VERSION}]); upgrade tokrate"
        )
    result = from_json(CapacityResult, data, where)
    for i, target in enumerate(result.targets):
        if target.verdict not in SEARCH_VERDICTS:
            raise RunFolderError(
                f"{where}: targets[{i}]: verdict {target.verdict!r} is not one of {SEARCH_VERDICTS}"
            )
        for j, probe in enumerate(target.probes):
            if probe.verdict not in PROBE_VERDICTS:
                raise RunFolderError(
                    f"{where}: targets[{i}]: probes[{j}]: verdict {probe.verdict!r}"
                    f" is not one of {PROBE_VERDICTS}"
                )
    return result
