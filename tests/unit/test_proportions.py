"""The interval of a proportion: every k/n up to n = 500 keeps its invariants exactly,
in floating point (a rounding error of 1e-16 is a negative error bar in a chart)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tokrate.runfolder.jsondoc import to_json
from tokrate.runfolder.proportions import wilson_interval
from tokrate.runfolder.quality import Quality


def test_the_issue_cases_include_their_rate() -> None:
    # The formula alone: 19/19 -> upper end 0.9999999999999999, 0/5 -> lower end 2.8e-17.
    assert wilson_interval(19, 19)[1] == 1.0
    assert wilson_interval(38, 38)[1] == 1.0
    assert wilson_interval(0, 5)[0] == 0.0
    lo, _hi = wilson_interval(19, 19)
    assert 0.8 < lo < 1.0


def test_every_k_of_every_n_up_to_500() -> None:
    """0 <= lo <= k/n <= hi <= 1, the ends exact at k = 0 and k = n, both ends
    non-decreasing in k: exhaustively, 125,750 proportions."""
    for n in range(1, 501):
        previous = (0.0, 0.0)
        for k in range(n + 1):
            lo, hi = wilson_interval(k, n)
            rate = k / n
            assert 0.0 <= lo <= rate <= hi <= 1.0, (k, n, lo, hi)
            # What a chart draws: error bars below and above the point, never negative.
            assert rate - lo >= 0.0 and hi - rate >= 0.0, (k, n)
            assert lo >= previous[0] and hi >= previous[1], (k, n)
            previous = (lo, hi)
        assert wilson_interval(0, n)[0] == 0.0
        assert wilson_interval(n, n)[1] == 1.0


@given(
    n=st.integers(1, 500),
    data=st.data(),
    confidence=st.floats(0.5, 0.999),
)
def test_any_confidence_keeps_the_invariants(
    n: int, data: st.DataObject, confidence: float
) -> None:
    k = data.draw(st.integers(0, n))
    lo, hi = wilson_interval(k, n, confidence)
    assert 0.0 <= lo <= k / n <= hi <= 1.0


@given(n=st.integers(1, 500), data=st.data())
def test_a_stored_pass_rate_carries_the_same_interval(n: int, data: st.DataObject) -> None:
    """summary.json's rate_ci is this interval, around the rate it stores."""
    k = data.draw(st.integers(0, n))
    q = Quality(n=n, passed=k)
    stored = to_json(q)
    assert stored["rate_ci"] == list(wilson_interval(k, n))
    lo, hi = stored["rate_ci"]
    assert lo <= stored["rate"] <= hi


@pytest.mark.parametrize(("k", "n"), [(-1, 5), (6, 5), (0, 0)])
def test_an_impossible_proportion_is_refused(k: int, n: int) -> None:
    with pytest.raises(ValueError, match="0 <= k <= n"):
        wilson_interval(k, n)
