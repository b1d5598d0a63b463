"""Costs of several parts (tasks of one level) pooled into one, exactly: pure Python,
so the measuring process can print a verdict over several tasks.

Each part's :class:`~tokrate.runfolder.summary.Cost` keeps its request count, mean and
standard deviation, so the pooled mean is the request-weighted mean and the pooled
standard deviation is the one of all the requests together (within-part plus
between-part spread); the interval is the Student-t one of the pooled mean, as each
part's own (tokrate.analysis.cost).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from tokrate.analysis.student_t import mean_interval
from tokrate.runfolder.summary import Cost

__all__ = ["pool_costs"]


def _weighted(parts: Sequence[Cost], field: str) -> float | None:
    known = [(c.n, getattr(c, field)) for c in parts if getattr(c, field) is not None and c.n]
    total = sum(n for n, _ in known)
    return sum(n * v for n, v in known) / total if total else None


def pool_costs(parts: Sequence[Cost | None]) -> Cost | None:
    """One cost over ``parts`` (None when any part is unpriced or has no per-request
    figure: a pooled cost that left a part out would understate it). The rule
    (``source``) is the parts' own; parts priced by different rules do not pool."""
    if not parts or any(c is None or c.usd_per_1k_requests is None for c in parts):
        return None
    costs = [c for c in parts if c is not None]
    if len({c.source for c in costs}) != 1:
        return None
    n = sum(c.n for c in costs)
    if n == 0:
        return None
    # Per request, in USD x 1,000 (the unit the parts keep).
    mean = sum(c.n * (c.usd_per_1k_requests or 0.0) for c in costs) / n
    within = sum((c.n - 1) * (c.usd_per_1k_requests_sd or 0.0) ** 2 for c in costs if c.n > 1)
    between = sum(c.n * ((c.usd_per_1k_requests or 0.0) - mean) ** 2 for c in costs)
    sd = math.sqrt((within + between) / (n - 1)) if n > 1 else 0.0
    interval = mean_interval(mean, sd, n)
    return Cost(
        source=costs[0].source,
        usd_per_m_output=costs[0].usd_per_m_output,
        n=n,
        usd_per_1k_requests=mean,
        usd_per_1k_requests_sd=sd,
        usd_per_1k_requests_ci=None if interval is None else (max(0.0, interval[0]), interval[1]),
        input_tokens_mean=_weighted(costs, "input_tokens_mean"),
        cached_input_tokens_mean=_weighted(costs, "cached_input_tokens_mean"),
        output_tokens_mean=_weighted(costs, "output_tokens_mean"),
        reasoning_tokens_mean=_weighted(costs, "reasoning_tokens_mean"),
    )
