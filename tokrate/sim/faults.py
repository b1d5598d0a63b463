"""Fault injection: the ``--faults`` SPEC grammar and the seeded per-request draw.

SPEC is a comma-separated list of rules::

    [TIER:]KIND=PROBABILITY[:PARAM=VALUE]...

    "http_500=0.1,stall=0.05:seconds=2,sim-70b:http_429=0.2:retry_after=1"

A rule without TIER applies to every tier; a TIER rule replaces the global rule of the
same KIND for that tier. Per request at most one fault fires: one uniform draw from
the tier's own ``random.Random`` (seeded by ``seed`` and the tier name, so other tiers'
traffic never shifts it) is compared with the cumulative probabilities in the fixed
order of :data:`FAULT_KINDS`. The probabilities of one tier must sum to <= 1.

Fault durations (``seconds``, ``retry_after``) are wall-clock seconds and are *not*
divided by ``time_scale``: they exist to trip client timeouts, which are not scaled.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from tokrate.errors import ConfigError

__all__ = ["FAULT_KINDS", "FaultPlan", "FaultRule", "parse_faults"]

#: kind -> {param: default}. Order is the draw order.
FAULT_KINDS: Mapping[str, Mapping[str, float]] = MappingProxyType(
    {
        "http_500": {},
        "http_429": {"retry_after": 1.0},
        "http_503": {},
        "html_200": {},
        "slow_first_byte": {"seconds": 2.0},
        "disconnect": {"at": 0.5},
        "stall": {"seconds": 2.0, "at": 0.5},
        "malformed": {"at": 0.5},
        "stream_error": {"at": 0.5},
    }
)


@dataclass(frozen=True, slots=True)
class FaultRule:
    """One fault kind with its probability and parameters (defaults filled in).

    ``at`` is the fraction of the output after which a mid-stream fault happens
    (token index ``floor(at x output_tokens)``, clamped to the output).
    """

    kind: str
    probability: float
    params: Mapping[str, float] = field(default_factory=dict)

    def param(self, name: str) -> float:
        return float(self.params[name])


def _rule(text: str, where: str) -> tuple[str | None, FaultRule]:
    parts = [p.strip() for p in text.split(":")]
    tier: str | None = None
    if parts and "=" not in parts[0]:
        tier = parts.pop(0)
        if not tier:
            raise ConfigError(f"{where}: empty tier name in fault rule {text!r}")
    if not parts or not parts[0]:
        raise ConfigError(f"{where}: fault rule {text!r} has no KIND=PROBABILITY")
    kind, _, prob_text = parts[0].partition("=")
    kind = kind.strip()
    if kind not in FAULT_KINDS:
        known = ", ".join(FAULT_KINDS)
        raise ConfigError(f"{where}: unknown fault {kind!r} in {text!r} (known: {known})")
    try:
        prob = float(prob_text)
    except ValueError:
        raise ConfigError(
            f"{where}: fault {kind!r}: probability {prob_text!r} is not a number"
        ) from None
    if not 0.0 <= prob <= 1.0:
        raise ConfigError(f"{where}: fault {kind!r}: probability must be in [0, 1], got {prob}")
    params = dict(FAULT_KINDS[kind])
    for extra in parts[1:]:
        name, eq, value_text = extra.partition("=")
        name = name.strip()
        if not eq or name not in params:
            allowed = ", ".join(FAULT_KINDS[kind]) or "none"
            raise ConfigError(
                f"{where}: fault {kind!r}: unknown parameter {extra!r} (allowed: {allowed})"
            )
        try:
            value = float(value_text)
        except ValueError:
            raise ConfigError(
                f"{where}: fault {kind!r}: {name}={value_text!r} is not a number"
            ) from None
        if value < 0 or (name == "at" and value > 1):
            raise ConfigError(f"{where}: fault {kind!r}: {name}={value} out of range")
        params[name] = value
    return tier, FaultRule(kind, prob, MappingProxyType(params))


def parse_faults(
    spec: str | None, *, where: str = "--faults"
) -> dict[str | None, dict[str, FaultRule]]:
    """Parse SPEC into {tier or None: {kind: rule}}; raises ConfigError naming ``where``."""
    out: dict[str | None, dict[str, FaultRule]] = {}
    if not spec or not spec.strip():
        return out
    for item in spec.split(","):
        if not item.strip():
            continue
        tier, rule = _rule(item.strip(), where)
        out.setdefault(tier, {})[rule.kind] = rule
    return out


class FaultPlan:
    """Resolved rules per tier, plus each tier's seeded draw.

    Not thread-safe; used from the server's event loop only.
    """

    def __init__(
        self,
        rules: Mapping[str | None, Mapping[str, FaultRule]],
        tier_names: tuple[str, ...],
        seed: int,
    ) -> None:
        unknown = sorted(t for t in rules if t is not None and t not in tier_names)
        if unknown:
            raise ConfigError(
                f"faults: unknown tier {unknown[0]!r} (tiers: {', '.join(tier_names)})"
            )
        base = dict(rules.get(None, {}))
        self._by_tier: dict[str, tuple[FaultRule, ...]] = {}
        self._rng: dict[str, random.Random] = {}
        for name in tier_names:
            merged = {**base, **rules.get(name, {})}
            ordered = tuple(
                merged[k] for k in FAULT_KINDS if k in merged and merged[k].probability > 0
            )
            total = sum(r.probability for r in ordered)
            if total > 1.0 + 1e-9:
                raise ConfigError(f"faults: probabilities for tier {name!r} sum to {total:g} > 1")
            self._by_tier[name] = ordered
            self._rng[name] = random.Random(f"faults:{seed}:{name}")

    def rules(self, tier: str) -> tuple[FaultRule, ...]:
        return self._by_tier.get(tier, ())

    def draw(self, tier: str) -> FaultRule | None:
        """The fault for the next request of ``tier`` (None for most requests).

        Always consumes one draw when the tier has any rule, so the sequence of faults
        depends only on the seed and the order of that tier's requests.
        """
        rules = self._by_tier.get(tier)
        if not rules:
            return None
        u = self._rng[tier].random()
        acc = 0.0
        for r in rules:
            acc += r.probability
            if u < acc:
                return r
        return None
