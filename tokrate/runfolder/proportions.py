"""The interval of a proportion (k of n requests or answers), the one rule every
run-folder file that stores a k/n uses: summary.json's pass rates (``rate_ci``), the
capacity search's SLO-met fractions, the tier pick's. Pure Python, no numpy, so the
measuring process can judge a fraction without loading the analysis stack; it sits
in runfolder/ because the files store its result, and everything above reads it.
"""

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
    """Wilson score interval of the proportion k/n at ``confidence`` (two-sided).

    Invariants, for every 0 <= k <= n: ``0 <= lo <= k / n <= hi <= 1``, ``lo == 0``
    at k = 0 and ``hi == 1`` at k = n, exactly in floating point. The formula alone
    misses them by a rounding error (19/19 gives an upper end of 0.9999999999999999,
    0/5 a lower end of 2.8e-17), which is enough for a chart's error bar to be
    negative; so the ends are clamped to [0, 1] and to include the rate ``k / n``
    computed as every reader computes it. Raises ValueError unless 0 <= k <= n and
    n > 0.
    """
    if n <= 0 or not 0 <= k <= n:
        raise ValueError(f"a proportion needs 0 <= k <= n and n > 0, got {k}/{n}")
    z = NormalDist().inv_cdf(0.5 + confidence / 2.0)
    lo, hi = wilson_bounds(k, n, z)
    rate = k / n
    return max(0.0, min(lo, rate)), min(1.0, max(hi, rate))
