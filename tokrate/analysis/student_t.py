"""Student's t quantiles and the t interval of a mean: pure Python (no numpy, no
scipy), so the measuring process can merge and judge intervals of means, as
:mod:`tokrate.runfolder.proportions` does for proportions."""

from __future__ import annotations

import math
from typing import Final

__all__ = ["mean_interval", "t_quantile", "t_quantile_975"]


# Two-sided 95% Student-t critical values t(0.975, df) for df = 1..30; beyond 30 the
# normal-approximation series below is accurate to < 0.1%. Tabled because scipy is not
# a dependency.
_T975: Final = (
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
    2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
    2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
)  # fmt: skip


# The same for the 99.9% quantile t(0.999, df), df = 1..30 (one-sided 0.1%: the noise
# thresholds of tokrate.analysis.noise).
_T999: Final = (
    318.309, 22.327, 10.215, 7.173, 5.893, 5.208, 4.785, 4.501, 4.297, 4.144,
    4.025, 3.930, 3.852, 3.787, 3.733, 3.686, 3.646, 3.610, 3.579, 3.552,
    3.527, 3.505, 3.485, 3.467, 3.450, 3.435, 3.421, 3.408, 3.396, 3.385,
)  # fmt: skip
_TABLES: Final = {0.975: (_T975, 1.959964), 0.999: (_T999, 3.090232)}


def t_quantile(p: float, df: int) -> float:
    """The ``p`` quantile (0.975 or 0.999) of Student's t with ``df`` >= 1 degrees of
    freedom: tabled to df 30, a Cornish-Fisher expansion beyond (error < 0.1%)."""
    if df < 1:
        raise ValueError("df must be >= 1")
    if p not in _TABLES:
        raise ValueError(f"t_quantile knows p in {sorted(_TABLES)}, got {p}")
    table, z = _TABLES[p]
    if df <= len(table):
        return table[df - 1]
    # Cornish-Fisher expansion of t in terms of the normal quantile.
    return z + (z**3 + z) / (4 * df) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df**2)


def t_quantile_975(df: int) -> float:
    """The 97.5% quantile of Student's t with ``df`` degrees of freedom (df >= 1)."""
    return t_quantile(0.975, df)


def mean_interval(mean: float, sd: float, n: int) -> tuple[float, float] | None:
    """The two-sided 95% Student-t interval of a mean of ``n`` values whose sample
    standard deviation is ``sd``: mean ± t(0.975, n - 1) x sd / sqrt(n). None for
    n < 2 (one value has no spread to estimate). A bounded per-request quantity (a
    request's cost) has a mean close to normal from a few dozen requests on, which
    this interval assumes."""
    if n < 2:
        return None
    half = t_quantile_975(n - 1) * sd / math.sqrt(n)
    return mean - half, mean + half
