"""The one comparison of two shares (error rate, pass rate, cache hit rate):
tokrate.analysis.share_compare."""

from __future__ import annotations

import pytest

from tokrate.analysis.share_compare import ShareCount, compare_shares, judge_share
from tokrate.runfolder.comparison import CompareSettings, MetricResult
from tokrate.spec.thresholds import DEFAULT_COMPARE_THRESHOLDS, Threshold


@pytest.mark.parametrize(
    ("metric", "change", "ci", "expected"),
    [
        ("error_rate", 0.05, (0.02, 0.08), ("regressed", "worse than +1pp")),
        ("error_rate", 0.05, (-0.01, 0.08), ("unchanged", "worse than the threshold")),
        ("error_rate", -0.05, (-0.08, -0.02), ("improved", "better than the threshold")),
        ("error_rate", 0.005, (-0.01, 0.02), ("unchanged", "within +1pp")),
        ("pass_rate", -0.10, (-0.15, -0.05), ("regressed", "dropped more than -5pp")),
        ("pass_rate", -0.10, (-0.20, 0.01), ("unchanged", "dropped more than the threshold")),
        ("pass_rate", 0.10, (0.05, 0.15), ("improved", "rose more than the threshold")),
        ("cache_hit_rate", -0.30, (-0.4, -0.2), ("regressed", "dropped more than -10pp")),
    ],
)
def test_a_share_is_judged_its_worse_way(
    metric: str, change: float, ci: tuple[float, float], expected: tuple[str, str]
) -> None:
    limit = next(t for t in DEFAULT_COMPARE_THRESHOLDS if t.metric == metric)
    verdict, reason = judge_share(change, ci, limit)
    assert (verdict, reason[: len(expected[1])]) == expected


def test_compare_shares_says_why_a_row_is_not_judged() -> None:
    t = Threshold("pass_rate", 0.05)
    empty = MetricResult(
        endpoint="e",
        model="m",
        scenario="s",
        metric="pass_rate",
        unit="rate",
        threshold=t.describe(),
        verdict="not_comparable",
        reason="",
    )
    b, c = ShareCount.of_counts(58, 60), ShareCount.of_counts(30, 60)
    s = CompareSettings()
    judged = compare_shares(b, c, t, s, None, empty, None)
    assert judged.verdict == "regressed" and judged.change == pytest.approx(-28 / 60)
    assert judged.ci_low is not None and judged.ci_high is not None and judged.ci_high < 0
    held = compare_shares(b, c, t, s, None, empty, "too few")
    assert (held.verdict, held.reason, held.baseline, held.n_current) == (
        "inconclusive",
        "too few",
        58 / 60,
        60,
    )
    apart = compare_shares(b, c, t, s, "prompts differ", empty, None)
    assert apart.verdict == "not_comparable" and apart.change is None
