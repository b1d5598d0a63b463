"""The pass-rate row of a comparison (docs/quality.md, docs/regressions.md).

A provider that silently swaps a model for a smaller one can get faster and answer
worse: the share of checked answers that passed (``check_passed`` of the final attempts
:func:`tokrate.analysis.metrics.analysed` keeps) is compared like the error rate, as an
absolute difference in percentage points with Newcombe's hybrid-score interval of the
difference. A drop is ``regressed`` only when it is larger than the threshold (default
5 points) *and* the interval excludes 0; with a few dozen prompts a drop of 10 points
is often "unchanged (not significant)", which is the honest answer.
"""

from __future__ import annotations

from dataclasses import replace

import polars as pl

from tokrate.analysis.stats import newcombe_interval
from tokrate.runfolder.comparison import CompareSettings, MetricResult, Verdict
from tokrate.spec.thresholds import Threshold

__all__ = ["compare_pass_rate", "has_checks", "judge_share_change"]


def has_checks(records: pl.DataFrame) -> bool:
    """Whether any record of a run carries a check's verdict."""
    return "check_passed" in records.columns and records["check_passed"].is_not_null().any()


def _counts(group: pl.DataFrame) -> tuple[int, int]:
    judged = group["check_passed"].drop_nulls()
    return int(judged.sum()), judged.len()


def judge_share_change(drop: float, ci: tuple[float, float], t: Threshold) -> tuple[Verdict, str]:
    """The verdict on a change of a share (pass rate, cache hit rate): ``drop`` =
    baseline - current (positive is worse); ``ci`` the interval of current - baseline."""
    if drop > t.limit:
        if ci[1] < 0:
            return "regressed", f"dropped more than {t.describe()} and the interval excludes 0"
        return "unchanged", "dropped more than the threshold but not significant"
    if -drop > t.limit:
        if ci[0] > 0:
            return "improved", "rose more than the threshold and the interval excludes 0"
        return "unchanged", "rose more than the threshold but not significant"
    return "unchanged", f"within {t.describe()}"


def compare_pass_rate(
    gb: pl.DataFrame,
    gc: pl.DataFrame,
    t: Threshold,
    s: CompareSettings,
    problem: str | None,
    empty: MetricResult,
) -> MetricResult:
    """One pass-rate row from two groups of analysed records (module docstring)."""
    kb, nb = _counts(gb)
    kc, nc = _counts(gc)
    out = replace(
        empty,
        n_baseline=nb,
        n_current=nc,
        baseline=kb / nb if nb else None,
        current=kc / nc if nc else None,
    )
    if problem is not None:
        return out
    if min(nb, nc) < s.min_samples:
        return replace(
            out,
            verdict="inconclusive",
            reason=f"too few checked answers (baseline {nb}, current {nc}; need {s.min_samples})",
        )
    assert out.baseline is not None and out.current is not None
    change = out.current - out.baseline
    lo, hi = newcombe_interval(kb, nb, kc, nc, s.confidence)
    verdict, reason = judge_share_change(-change, (lo, hi), t)
    return replace(out, change=change, ci_low=lo, ci_high=hi, verdict=verdict, reason=reason)
