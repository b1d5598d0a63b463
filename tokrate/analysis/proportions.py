"""Intervals of a proportion (k of n requests): pure Python, no numpy, so the
measuring process can judge a fraction without loading the analysis stack.
:mod:`tokrate.analysis.stats` re-exports them with the other statistics."""

from __future__ import annotations

import math
from statistics import NormalDist

__all__ = ["wilson_bounds", "wilson_interval"]


def wilson_bounds(k: float, n: float, z: float) -> tuple[float, float]:
    """The Wilson score interval's two ends at normal quantile ``z``, unclipped (the
    Newcombe interval of a difference builds on them). Requires n > 0; ``k`` and ``n``
    may be effective (fractional) counts, as for a token-weighted share."""
    p = k / n
    denom = 1.0 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return centre - half, centre + half


def wilson_interval(k: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """Wilson score interval of a proportion k/n at ``confidence`` (two-sided); it
    stays inside [0, 1] and is sensible at k = 0 or k = n. Requires n > 0."""
    z = NormalDist().inv_cdf(0.5 + confidence / 2.0)
    lo, hi = wilson_bounds(k, n, z)
    return max(0.0, lo), min(1.0, hi)
