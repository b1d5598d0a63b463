"""MLPerf LoadGen's early-stopping criterion for tail percentiles: how many samples a
percentile needs before it can be judged, and the conservative estimate that n samples
certify.

The criterion (LoadGen's ``loadgen/early_stopping.cc`` and ``results.cc``; the MLPerf
Inference rules, "early stopping"): let q be a percentile (0.95) and x a value. If the
true q-quantile were above x, each sample would lie above x with probability at least
1 - q, so seeing at most t of n samples above x has probability at most

    B(t; n, 1 - q) = P(Binomial(n, 1 - q) <= t)
                   = sum over k = 0..t of  C(n, k) (1 - q)^k q^(n - k).

x is *certified* (with confidence C: the true q-quantile is not above it) when that
probability is below 1 - C. LoadGen uses C = 99% (:data:`CONFIDENCE`) and, like it:

- **minimum samples** (:func:`min_samples`): the smallest n with B(1; n, 1 - q) < 1 - C,
  so that one sample may lie above the certified value: 11 for a p50, 64 for a p90,
  130 for a p95, 662 for a p99 (LoadGen's own figures). Below that a percentile rests
  on its top one or two samples and is not judged (``tokrate.analysis.compare``);
  ``--requests auto`` sends until every judged percentile has it.
- **estimate** (:func:`estimate`): with t* the largest t with B(t; n, 1 - q) < 1 - C,
  the t*-th largest of the n samples (LoadGen "would discard t* - 1 highest latency
  queries"): a value the true q-quantile stays at or below with at least 99%
  confidence. It is never below the plain percentile by more than sampling allows and
  approaches it as n grows; None below the minimum.

Pure Python (no numpy, no scipy): the binomial terms are summed in log space with
``math.lgamma``, so the measuring process can count samples with it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from functools import lru_cache
from typing import Final

from tokrate.spec.thresholds import ABSOLUTE_METRICS, metric_column

__all__ = [
    "CONFIDENCE",
    "ES_QUANTILES",
    "binomial_cdf",
    "samples_needed",
    "certified_rank",
    "estimate",
    "min_samples",
]

#: LoadGen's confidence for an early-stopping decision.
CONFIDENCE: Final = 0.99
#: The tail percentiles whose early-stopping estimates summary.json, compare and the
#: report show beside the plain value (key, q).
ES_QUANTILES: Final = (("p90", 0.90), ("p95", 0.95), ("p99", 0.99))


def binomial_cdf(t: int, n: int, p: float) -> float:
    """P(Binomial(n, p) <= t) for 0 <= p <= 1, summed in log space (exact to rounding;
    O(t) terms)."""
    if t < 0:
        return 0.0
    if t >= n or p <= 0.0:
        return 1.0
    if p >= 1.0:
        return 0.0
    log_p, log_q = math.log(p), math.log1p(-p)
    log_n_fact = math.lgamma(n + 1)
    total = -math.inf
    for k in range(t + 1):
        term = log_n_fact - math.lgamma(k + 1) - math.lgamma(n - k + 1) + k * log_p
        term += (n - k) * log_q
        hi = max(total, term)
        total = hi + math.log(math.exp(total - hi) + math.exp(term - hi))
    return min(1.0, math.exp(total))


def _tail(q: float) -> float:
    """The share of samples beyond the percentile on its far side (0.05 for a p95; a
    p5 is the same tail from below)."""
    if not 0.0 < q < 1.0:
        raise ValueError(f"a percentile must lie strictly between 0 and 1, got {q}")
    return min(q, 1.0 - q)


@lru_cache(maxsize=64)
def min_samples(q: float, confidence: float = CONFIDENCE) -> int:
    """The fewest samples on which the ``q`` percentile can be certified (module doc):
    the smallest n with B(1; n, 1 - q) < 1 - confidence. 64 for p90, 130 for p95, 662
    for p99 at 99%."""
    p = _tail(q)
    alpha = 1.0 - confidence
    # B(1; n, p) = (1 - p)^n + n p (1 - p)^(n - 1) falls monotonically in n (n >= 2).
    n = 2
    while (1.0 - p) ** (n - 1) * (1.0 - p + n * p) >= alpha:
        n += 1
    return n


def certified_rank(n: int, q: float, confidence: float = CONFIDENCE) -> int | None:
    """t*: the largest t with B(t; n, 1 - q) < 1 - confidence, so the t*-th largest of
    n samples is the early-stopping estimate; None when n is below
    :func:`min_samples` (then t* would be under 1)."""
    if n < min_samples(q, confidence):
        return None
    p = _tail(q)
    alpha = 1.0 - confidence
    log_p, log_q = math.log(p), math.log1p(-p)
    log_n_fact = math.lgamma(n + 1)
    total = -math.inf
    for k in range(n + 1):
        term = log_n_fact - math.lgamma(k + 1) - math.lgamma(n - k + 1) + k * log_p
        term += (n - k) * log_q
        hi = max(total, term)
        total = hi + math.log(math.exp(total - hi) + math.exp(term - hi))
        if math.exp(total) >= alpha:
            return k - 1  # B(k) reached 1 - confidence; k >= 2 here (n >= the minimum)
    return n


def estimate(values: Iterable[float], q: float, confidence: float = CONFIDENCE) -> float | None:
    """The early-stopping estimate of the ``q`` percentile of ``values`` (module doc):
    their t*-th largest, None below the minimum samples. NaNs are ignored."""
    ordered = sorted(v for v in values if not math.isnan(v))
    rank = certified_rank(len(ordered), q, confidence)
    if rank is None:
        return None
    return ordered[len(ordered) - rank]


def samples_needed(metric: str, least: int, confidence: float = CONFIDENCE) -> int:
    """Values each side needs for ``metric`` to be judged: a percentile q MLPerf
    LoadGen's early-stopping minimum at ``confidence`` (the fewest samples on which q
    can be certified: 11 for a p50, 64 for a p90, 130 for a p95, 662 for a p99 at 99%;
    tokrate.analysis.early_stopping), at least ``least`` (CompareSettings.min_samples);
    a mean or a rate ``least``. Below that a percentile rests on its top one or two
    requests, and one slow request moves it."""
    if metric in (*ABSOLUTE_METRICS, "capacity"):
        return least
    _, q = metric_column(metric)
    if q is None:
        return least
    return max(least, min_samples(q, confidence))
