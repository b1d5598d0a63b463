"""The prompt-cache row of a comparison (docs/regressions.md "Prompt-cache hit rate").

A provider whose prompt cache stopped working answers every request cold: TTFT of a
long shared prefix climbs, and the cost of cached input tokens with it. The row
``cache_hit_rate`` compares the hit rate summary.json reports per group
(:class:`~tokrate.runfolder.summary.CacheUse`: cached / input tokens over the ok
measured requests whose server reported a cached figure, each capped at its input) as
an absolute difference in percentage points, like the pass rate.

Its interval is Newcombe's hybrid-score interval of the difference of two shares,
each share taken over its *effective* number of requests: the cached share of one
request is a value in [0, 1], so its variance is at most that of a hit-or-miss
request with the same mean, and a token-weighted share of n requests weighs like
Kish's ``n_eff = (sum of input tokens)^2 / (sum of squared input tokens)``
independent requests (n when every prompt is equally long, fewer when a few long
prompts carry the share). The tokens of one prompt are never counted as independent
evidence (20 requests of 10k tokens are 20 observations, not 200k).

No row at all when neither run reports a cached figure (:func:`has_cached_tokens`):
most servers say nothing, and the default simulator with its prefix cache off says
nothing too, so runs without a cache keep exactly the rows they had. A group where
only one side reported is ``inconclusive`` with that said: a server that stopped
reporting is not proof that its cache stopped working.
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from tokrate.analysis.share_compare import ShareCount, compare_shares
from tokrate.runfolder.comparison import CompareSettings, MetricResult
from tokrate.spec.thresholds import Threshold

__all__ = ["CacheShare", "cache_share", "compare_cache_hit_rate", "has_cached_tokens"]


def has_cached_tokens(records: pl.DataFrame) -> bool:
    """Whether any record of a run carries a cached-token figure from its server."""
    return "cached_tokens" in records.columns and records["cached_tokens"].is_not_null().any()


@dataclass(frozen=True, slots=True)
class CacheShare:
    """The hit rate of a group and what its interval rests on: ``n`` requests that
    reported a cached figure, ``n_eff`` their effective number (module doc)."""

    n: int
    rate: float | None
    n_eff: float

    @property
    def count(self) -> ShareCount:
        """The share as Newcombe's interval weighs it: ``rate * n_eff`` of ``n_eff``."""
        hits = 0.0 if self.rate is None else self.rate * self.n_eff
        return ShareCount(self.n, self.rate, hits, self.n_eff)


def cache_share(group: pl.DataFrame) -> CacheShare:
    """The :class:`CacheShare` of a group of :func:`tokrate.analysis.metrics.analysed`
    records (its ``cached_counted`` column: cached tokens capped at the input)."""
    reported = group.filter((pl.col("status") == "ok") & pl.col("cached_counted").is_not_null())
    n = reported.height
    inputs = reported["input_tokens"].cast(pl.Float64)
    total = float(inputs.sum())
    if total <= 0:
        return CacheShare(n, None, 0.0)
    rate = float(reported["cached_counted"].cast(pl.Float64).sum()) / total
    n_eff = total * total / float((inputs * inputs).sum())
    return CacheShare(n, rate, n_eff)


def compare_cache_hit_rate(
    gb: pl.DataFrame,
    gc: pl.DataFrame,
    t: Threshold,
    s: CompareSettings,
    problem: str | None,
    empty: MetricResult,
) -> MetricResult:
    """One ``cache_hit_rate`` row from two groups of analysed records (module doc)."""
    b, c = cache_share(gb), cache_share(gc)
    unjudged = None
    if b.rate is None and c.rate is None:
        unjudged = "no request of this group reported cached tokens"
    elif c.rate is None:
        unjudged = f"the current run reports no cached tokens (the baseline's {b.n} requests did)"
    elif b.rate is None:
        unjudged = f"the baseline reports no cached tokens (the current run's {c.n} requests do)"
    elif min(b.n, c.n) < s.min_samples:
        unjudged = (
            f"too few requests that reported cached tokens (baseline {b.n},"
            f" current {c.n}; need {s.min_samples})"
        )
    return compare_shares(b.count, c.count, t, s, problem, empty, unjudged)
