"""Capacities of two runs side by side: what ``tokrate compare`` (and a ``--baseline``
gate) says about a capacity search, row by row per target.

The change is relative (current / baseline - 1). A capacity that fell by more than the
``capacity`` threshold (default :data:`~tokrate.spec.thresholds.CAPACITY_DEFAULT`, 10%;
``--threshold capacity=-5%`` changes it) is ``regressed``, one that rose by more is
``improved``, else ``unchanged``. A capacity is comparable only when both searches
used the same mode, goodput and SLOs, and neither is a mere lower bound
(``client_bound``, ``budget``, ``interrupted``); a search that found no level at all
(``none``) against one that did is a regression of 100%.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal

from tokrate.runfolder.capacity_result import CapacityResult, TargetCapacity

__all__ = ["CapacityChange", "compare_capacities"]

Verdict = Literal["improved", "unchanged", "regressed", "not_comparable"]

#: Verdicts whose capacity is only a lower bound: nothing to compare against.
_LOWER_BOUNDS: Final = ("client_bound", "budget", "interrupted")


@dataclass(frozen=True, slots=True)
class CapacityChange:
    """One target's capacity in both runs (None: unknown) and the verdict."""

    endpoint: str
    model: str
    unit: str
    verdict: Verdict
    reason: str
    baseline: float | None = None
    current: float | None = None
    change: float | None = None


def _settings_problem(base: CapacityResult, cur: CapacityResult) -> str | None:
    if base.mode != cur.mode:
        return f"searched {base.mode} loop vs {cur.mode} loop"
    if base.goodput != cur.goodput:
        return f"goodput {base.goodput:g} vs {cur.goodput:g}"
    if dict(base.slo) != dict(cur.slo):
        return "other SLOs"
    return None


def _one(
    b: TargetCapacity | None, c: TargetCapacity | None, problem: str | None, limit: float
) -> tuple[Verdict, str, float | None]:
    """(verdict, reason, change) for one target."""
    if b is None or c is None:
        return (
            "not_comparable",
            f"no capacity search for it in the {'baseline' if b is None else 'current'} run",
            None,
        )
    if problem is not None:
        return "not_comparable", problem, None
    for side, t in (("baseline", b), ("current", c)):
        if t.verdict in _LOWER_BOUNDS:
            return "not_comparable", f"{side} search ended {t.verdict}: only a lower bound", None
        if t.verdict == "unverified":
            return "not_comparable", f"{side} capacity did not meet in its verification", None
        if t.verdict == "non_monotone":
            return "not_comparable", f"{side} SLOs met at twice its capacity too", None
    if not b.capacity:
        return "not_comparable", "the baseline met the SLOs at no level", None
    change = (c.capacity or 0.0) / b.capacity - 1.0
    if change < -limit:
        return "regressed", f"capacity fell {-change:.0%} (threshold {limit:.0%})", change
    if change > limit:
        return "improved", f"capacity rose {change:.0%}", change
    return "unchanged", f"within {limit:.0%}", change


def compare_capacities(
    base: CapacityResult | None, cur: CapacityResult | None, limit: float
) -> list[CapacityChange]:
    """One row per target of either search; [] when neither run searched."""
    if base is None and cur is None:
        return []
    problem = None if base is None or cur is None else _settings_problem(base, cur)
    keys: list[tuple[str, str]] = []
    for result in (base, cur):
        for t in result.targets if result is not None else ():
            if t.key not in keys:
                keys.append(t.key)
    unit = next(r.unit for r in (cur, base) if r is not None)
    out = []
    for endpoint, model in keys:
        b = base.target(endpoint, model) if base is not None else None
        c = cur.target(endpoint, model) if cur is not None else None
        verdict, reason, change = _one(b, c, problem, limit)
        out.append(
            CapacityChange(
                endpoint,
                model,
                unit,
                verdict,
                reason,
                None if b is None else b.capacity,
                None if c is None else c.capacity,
                change,
            )
        )
    return out
