"""The pass-rate row of a comparison (docs/quality.md, docs/regressions.md).

A provider that silently swaps a model for a smaller one can get faster and answer
worse: the share of checked answers that passed (``check_passed`` of the final attempts
:func:`tokrate.analysis.metrics.analysed` keeps) is compared like the error rate
(:func:`tokrate.analysis.share_compare.compare_shares`), as an absolute difference in percentage points with Newcombe's hybrid-score interval of the
difference. A drop is ``regressed`` only when it is larger than the threshold (default
5 points) *and* the interval excludes 0; with a few dozen prompts a drop of 10 points
is often "unchanged (not significant)", which is the honest answer.
"""

from __future__ import annotations

import polars as pl

from tokrate.analysis.share_compare import ShareCount, compare_shares
from tokrate.runfolder.comparison import CompareSettings, MetricResult
from tokrate.spec.thresholds import Threshold

__all__ = ["compare_pass_rate", "has_checks", "pass_share"]


def has_checks(records: pl.DataFrame) -> bool:
    """Whether any record of a run carries a check's verdict."""
    return "check_passed" in records.columns and records["check_passed"].is_not_null().any()


def pass_share(group: pl.DataFrame) -> ShareCount:
    """The pass rate of a group's checked answers (``check_passed`` not null)."""
    judged = group["check_passed"].drop_nulls()
    return ShareCount.of_counts(int(judged.sum()), judged.len())


def compare_pass_rate(
    gb: pl.DataFrame,
    gc: pl.DataFrame,
    t: Threshold,
    s: CompareSettings,
    problem: str | None,
    empty: MetricResult,
) -> MetricResult:
    """One pass-rate row from two groups of analysed records (module docstring)."""
    b, c = pass_share(gb), pass_share(gc)
    unjudged = None
    if min(b.n, c.n) < s.min_samples:
        unjudged = f"too few checked answers (baseline {b.n}, current {c.n}; need {s.min_samples})"
    return compare_shares(b, c, t, s, problem, empty, unjudged)
