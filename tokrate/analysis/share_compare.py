"""One comparison of two shares: the error rate, the pass rate of checked answers and
the prompt-cache hit rate (docs/regressions.md).

A share's change is an absolute difference of rates (current - baseline, in
percentage points when shown), judged against its threshold like every other metric:
a change past the threshold the metric's worse way is ``regressed`` only when
Newcombe's hybrid-score interval of the difference excludes 0, the better way
``improved`` likewise; anything else is ``unchanged`` ("not significant" is an
answer). Which way is worse comes from the metric table (an error rate rising, a
pass or hit rate dropping), and so do the words of the reason. What a share counts
is counted once, where history's points count it too: :func:`error_share` here,
:func:`~tokrate.analysis.quality_compare.pass_share`,
:func:`~tokrate.analysis.cache_compare.cache_share`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Final

import polars as pl

from tokrate.analysis.metrics import server_error_expr
from tokrate.analysis.stats import newcombe_interval
from tokrate.runfolder.comparison import CompareSettings, MetricResult, Verdict
from tokrate.spec.metric_table import Direction
from tokrate.spec.thresholds import Threshold

__all__ = ["ShareCount", "compare_shares", "error_share", "judge_share"]


@dataclass(frozen=True, slots=True)
class ShareCount:
    """One side's share: ``n`` what it is taken over (requests, checked answers) as
    the row reports it, ``rate`` the share (None: nothing to take it over), and the
    ``hits`` of ``trials`` Newcombe's interval weighs: plain counts, or effective
    counts where one observation is worth less than one request (the cache's
    token-weighted share, :func:`tokrate.analysis.cache_compare.cache_share`)."""

    n: int
    rate: float | None
    hits: float
    trials: float

    @classmethod
    def of_counts(cls, hits: int, n: int) -> ShareCount:
        """``hits`` of ``n`` plain counts."""
        return cls(n, hits / n if n else None, hits, n)


def error_share(group: pl.DataFrame) -> ShareCount:
    """The error rate of a group of :func:`tokrate.analysis.metrics.analysed` records:
    errors the server is answerable for over those and the ok requests (cancelled
    requests are the user's and unsent ones the client's,
    :func:`~tokrate.analysis.metrics.server_error_expr`)."""
    err = int(group.select(server_error_expr().sum()).item())
    return ShareCount.of_counts(err, err + int((group["status"] == "ok").sum()))


#: The words of a reason per direction: (past the threshold the worse way, the better way).
_WORDS: Final[dict[Direction, tuple[str, str]]] = {
    "lower_is_better": ("worse than", "better than"),
    "higher_is_better": ("dropped more than", "rose more than"),
}


def judge_share(change: float, ci: tuple[float, float], t: Threshold) -> tuple[Verdict, str]:
    """The verdict on a share's ``change`` (current - baseline) with ``ci``, the
    interval of that difference, against ``t`` (absolute: 0.01 = 1 percentage point;
    a change must also exceed ``t.floor``)."""
    worse_way, better_way = _WORDS[t.direction]
    if t.direction == "lower_is_better":
        worse, worse_ci = change, ci
    else:
        worse, worse_ci = -change, (-ci[1], -ci[0])
    if worse > t.limit and abs(change) > t.floor:
        if worse_ci[0] > 0:
            return "regressed", f"{worse_way} {t.describe()} and the interval excludes 0"
        return "unchanged", f"{worse_way} the threshold but not significant"
    if -worse > t.limit and abs(change) > t.floor:
        if worse_ci[1] < 0:
            return "improved", f"{better_way} the threshold and the interval excludes 0"
        return "unchanged", f"{better_way} the threshold but not significant"
    return "unchanged", f"within {t.describe()}"


def compare_shares(
    baseline: ShareCount,
    current: ShareCount,
    t: Threshold,
    s: CompareSettings,
    problem: str | None,
    empty: MetricResult,
    unjudged: str | None,
) -> MetricResult:
    """One share's row: ``empty`` (the caller's row so far) with both sides' counts
    and rates; as it is where the groups are not comparable (``problem``),
    ``inconclusive`` for the caller's reason ``unjudged`` (too few to count, a side
    that reports nothing), else the change, its Newcombe interval at
    ``s.confidence`` and :func:`judge_share`'s verdict."""
    out = replace(
        empty,
        n_baseline=baseline.n,
        n_current=current.n,
        baseline=baseline.rate,
        current=current.rate,
    )
    if problem is not None:
        return out
    if unjudged is not None:
        return replace(out, verdict="inconclusive", reason=unjudged)
    assert baseline.rate is not None and current.rate is not None
    change = current.rate - baseline.rate
    lo, hi = newcombe_interval(
        baseline.hits, baseline.trials, current.hits, current.trials, s.confidence
    )
    verdict, reason = judge_share(change, (lo, hi), t)
    return replace(out, change=change, ci=(lo, hi), verdict=verdict, reason=reason)
