"""MLPerf LoadGen's early-stopping criterion (tokrate.analysis.early_stopping): the
minimum samples LoadGen itself names, the binomial tail it rests on, and the coverage
its estimate promises."""

from __future__ import annotations

import math
import random

import pytest

from tokrate.analysis.early_stopping import (
    CONFIDENCE,
    binomial_cdf,
    certified_rank,
    estimate,
    min_samples,
)


def test_minimum_samples_are_loadgens() -> None:
    # LoadGen's figures at 99% confidence: p90 64, p95 130, p99 662.
    assert min_samples(0.90) == 64
    assert min_samples(0.95) == 130
    assert min_samples(0.99) == 662
    assert min_samples(0.50) == 11
    # A lower tail needs as many as the upper one.
    assert min_samples(0.05) == min_samples(0.95)
    with pytest.raises(ValueError):
        min_samples(1.0)


@pytest.mark.parametrize("n", [1, 5, 17, 40])
@pytest.mark.parametrize("p", [0.01, 0.05, 0.3, 0.5])
def test_binomial_cdf_matches_the_sum_of_terms(n: int, p: float) -> None:
    for t in range(-1, n + 2):
        exact = sum(math.comb(n, k) * p**k * (1 - p) ** (n - k) for k in range(min(t, n) + 1))
        assert binomial_cdf(t, n, p) == pytest.approx(exact, rel=1e-9, abs=1e-300)


def test_rank_is_the_largest_certified_count() -> None:
    assert certified_rank(129, 0.95) is None
    assert certified_rank(130, 0.95) == 1  # the largest sample
    for n in (130, 200, 1000, 5000):
        t = certified_rank(n, 0.95)
        assert t is not None
        assert binomial_cdf(t, n, 0.05) < 1 - CONFIDENCE <= binomial_cdf(t + 1, n, 0.05)
    ranks = [certified_rank(n, 0.99) or 0 for n in range(600, 3000, 7)]
    assert ranks == sorted(ranks)


def test_estimate_is_the_t_th_largest_and_none_below_the_minimum() -> None:
    values = [float(v) for v in range(1000)]
    t = certified_rank(1000, 0.95)
    assert t is not None
    assert estimate(reversed(values), 0.95) == values[-t]
    assert estimate(values[:129], 0.95) is None
    assert estimate([*values[:130], math.nan], 0.95) == 129.0


def test_estimate_covers_the_true_percentile_at_99_percent() -> None:
    # Uniform samples: the true p95 is 0.95. The estimate lies below it in at most 1%
    # of runs (the criterion is conservative by one order statistic, so fewer).
    rng = random.Random(7)
    runs, below = 2000, 0
    for _ in range(runs):
        value = estimate([rng.random() for _ in range(300)], 0.95)
        assert value is not None
        below += value < 0.95
    assert below <= 0.01 * runs + 3 * math.sqrt(0.01 * runs)
