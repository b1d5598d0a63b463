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
from typing import Any, Final, Literal

from tokrate.errors import RunFolderError
from tokrate.runfolder.jsonread import JsonReader

__all__ = [
    "CAPACITY_SCHEMA_VERSION",
    "PROBE_VERDICTS",
    "ProbePhase",
    "SEARCH_VERDICTS",
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


def _interval(value: object, where: str) -> tuple[float, float] | None:
    if value is None:
        return None
    if (
        isinstance(value, list | tuple)
        and len(value) == 2
        and all(isinstance(v, int | float) and not isinstance(v, bool) for v in value)
    ):
        return (float(value[0]), float(value[1]))
    raise RunFolderError(f"{where}: expected [low, high], got {value!r}")


def _floats(data: Mapping[str, Any] | None, where: str) -> dict[str, float | None]:
    out: dict[str, float | None] = {}
    for key, value in (data or {}).items():
        if value is not None and (not isinstance(value, int | float) or isinstance(value, bool)):
            raise RunFolderError(f"{where}: {key} must be a number or null, got {value!r}")
        out[str(key)] = None if value is None else float(value)
    return out


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

    @property
    def met_fraction(self) -> float | None:
        return self.met / self.requests if self.requests else None

    def to_dict(self) -> dict[str, Any]:
        return {
            "level": self.level,
            "phase": self.phase,
            "scenario": self.scenario,
            "requests": self.requests,
            "met": self.met,
            "met_fraction": self.met_fraction,
            "interval": None if self.interval is None else list(self.interval),
            "verdict": self.verdict,
            "limiting_slo": self.limiting_slo,
            "slo_met": dict(self.slo_met),
            "percentiles": dict(self.percentiles),
            "errors": self.errors,
            "duration_s": self.duration_s,
            "loop_lag_p99_ms": self.loop_lag_p99_ms,
            "send_delay_p95_s": self.send_delay_p95_s,
            "client_cpu_fraction": self.client_cpu_fraction,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], where: str) -> CapacityProbe:
        r = JsonReader(data, where)
        phase = r.str_("phase", "bisect")
        if phase not in ("bracket", "bisect", "verify"):
            raise RunFolderError(f"{where}: phase {phase!r} is not bracket, bisect or verify")
        verdict = r.str_("verdict")
        if verdict not in PROBE_VERDICTS:
            raise RunFolderError(f"{where}: verdict {verdict!r} is not one of {PROBE_VERDICTS}")
        return cls(
            level=r.opt_float("level") or 0.0,
            phase=phase,  # type: ignore[arg-type]
            scenario=r.str_("scenario"),
            requests=r.opt_int("requests") or 0,
            met=r.opt_int("met") or 0,
            interval=_interval(data.get("interval"), f"{where}: interval"),
            verdict=verdict,
            limiting_slo=r.opt_str("limiting_slo"),
            slo_met=_floats(r.opt_mapping("slo_met"), f"{where}: slo_met"),
            percentiles=_floats(r.opt_mapping("percentiles"), f"{where}: percentiles"),
            errors=r.opt_int("errors") or 0,
            duration_s=r.opt_float("duration_s") or 0.0,
            loop_lag_p99_ms=r.opt_float("loop_lag_p99_ms"),
            send_delay_p95_s=r.opt_float("send_delay_p95_s"),
            client_cpu_fraction=r.opt_float("client_cpu_fraction"),
        )


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
    probes: tuple[CapacityProbe, ...]
    note: str = ""
    requests: int = 0
    duration_s: float = 0.0

    @property
    def key(self) -> tuple[str, str]:
        return (self.endpoint, self.model)

    @property
    def label(self) -> str:
        return f"{self.endpoint}/{self.model}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "endpoint": self.endpoint,
            "model": self.model,
            "capacity": self.capacity,
            "verdict": self.verdict,
            "limiting_slo": self.limiting_slo,
            "bracket": None if self.bracket is None else list(self.bracket),
            "note": self.note,
            "requests": self.requests,
            "duration_s": self.duration_s,
            "probes": [p.to_dict() for p in self.probes],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], where: str) -> TargetCapacity:
        r = JsonReader(data, where)
        verdict = r.str_("verdict")
        if verdict not in SEARCH_VERDICTS:
            raise RunFolderError(f"{where}: verdict {verdict!r} is not one of {SEARCH_VERDICTS}")
        return cls(
            endpoint=r.str_("endpoint"),
            model=r.str_("model"),
            capacity=r.opt_float("capacity"),
            verdict=verdict,
            limiting_slo=r.opt_str("limiting_slo"),
            bracket=_interval(data.get("bracket"), f"{where}: bracket"),
            probes=tuple(
                CapacityProbe.from_dict(p, f"{where}: probes[{i}]")
                for i, p in enumerate(r.items("probes"))
            ),
            note=r.str_("note"),
            requests=r.opt_int("requests") or 0,
            duration_s=r.opt_float("duration_s") or 0.0,
        )


@dataclass(frozen=True, slots=True)
class CapacityResult:
    """capacity.json: the search settings that give the numbers their meaning and one
    :class:`TargetCapacity` per target, in run.json's target order."""

    mode: Literal["closed", "open"]
    goodput: float
    confidence: float
    slo: Mapping[str, float | None]
    targets: tuple[TargetCapacity, ...]
    schema_version: int = CAPACITY_SCHEMA_VERSION

    @property
    def unit(self) -> str:
        """What a level counts: "concurrency" (streams) or "rate_rps"."""
        return "concurrency" if self.mode == "closed" else "rate_rps"

    def target(self, endpoint: str, model: str) -> TargetCapacity | None:
        return next((t for t in self.targets if t.key == (endpoint, model)), None)

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema_version": self.schema_version,
            "mode": self.mode,
            "unit": self.unit,
            "goodput": self.goodput,
            "confidence": self.confidence,
            "slo": dict(self.slo),
            "targets": [t.to_dict() for t in self.targets],
        }

    @classmethod
    def from_dict(cls, data: Any, where: str = "capacity.json") -> CapacityResult:
        """Raises RunFolderError (one line) for an unknown version or a bad field."""
        if not isinstance(data, Mapping):
            raise RunFolderError(f"{where}: not a JSON object")
        version = data.get("schema_version")
        if version != CAPACITY_SCHEMA_VERSION:
            raise RunFolderError(
                f"{where}: schema_version {version!r} is not supported"
                f" (known: [{CAPACITY_SCHEMA_VERSION}]); upgrade tokrate"
            )
        r = JsonReader(data, where)
        mode = r.str_("mode")
        if mode not in ("closed", "open"):
            raise RunFolderError(f"{where}: mode must be closed or open, got {mode!r}")
        return cls(
            mode=mode,  # type: ignore[arg-type]
            goodput=r.opt_float("goodput") or 0.0,
            confidence=r.opt_float("confidence") or 0.0,
            slo=_floats(r.opt_mapping("slo"), f"{where}: slo"),
            targets=tuple(
                TargetCapacity.from_dict(t, f"{where}: targets[{i}]")
                for i, t in enumerate(r.items("targets"))
            ),
        )
