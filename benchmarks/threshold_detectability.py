"""How many requests make a threshold detectable, given the per-request spread.

tokrate compare calls a metric "regressed" when the change is worse than its threshold
*and* the 95% bootstrap interval of the change excludes zero. With too few requests a
real change the size of the threshold is called "unchanged" most of the time, and with
a noisy server a small threshold is mostly noise. This prints, for the median (p50) and
p95 of a per-request metric (TTFT, TPOT) whose values spread lognormally with
coefficient of variation CV:

1. the formula: requests per run n at which the threshold, not the noise, decides —
   the standard error of the change, sqrt(2) · k · CV / sqrt(n), is at most
   threshold / 1.96, so every observed change past the threshold is also significant:
   n ≈ 2 · (1.96 · k · CV / threshold)², with k = 1.25 for the median and about 2.1 for
   p95 (the standard error of a sample quantile relative to the quantile, lognormal).
   With that n a true change of 1.5x the threshold is flagged in about three run
   pairs of four, one of exactly the threshold in somewhat under half, no change in
   1-2%;
2. a check by simulation with tokrate's own interval (``tokrate.analysis.stats.relative_change_ci``,
   the function compare uses): the share of run pairs flagged regressed when the true
   change is 0 (false alarms) and when it is 1x and 1.5x the threshold.

    .venv/bin/python benchmarks/threshold_detectability.py [--pairs 100] [--resamples 400]

Independent requests (closed loop c=1); at higher concurrency compare resamples in
blocks as long as the requests in flight, which the formula ignores.
"""

from __future__ import annotations

import argparse
import math
import time

import numpy as np

from tokrate.analysis.stats import relative_change_ci

Z = 1.959964  # the 95% interval compare uses
K = {"p50": 1.2533, "p95": 2.1}
QUANTILE = {"p50": 0.5, "p95": 0.95}


def requests_needed(cv: float, threshold: float, stat: str) -> int:
    return math.ceil(2.0 * (Z * K[stat] * cv / threshold) ** 2)


def flagged_share(
    n: int, cv: float, threshold: float, change: float, stat: str, pairs: int, resamples: int
) -> float:
    """Share of simulated run pairs that compare's rule calls regressed."""
    sigma = math.sqrt(math.log1p(cv * cv))
    rng = np.random.default_rng(7)
    q = QUANTILE[stat]
    hits = 0
    for i in range(pairs):
        base = rng.lognormal(0.0, sigma, n)
        cur = rng.lognormal(0.0, sigma, n) * (1.0 + change)
        observed = float(np.quantile(cur, q) / np.quantile(base, q) - 1.0)
        lo, _hi = relative_change_ci(
            base, cur, q, (1, 1), confidence=0.95, resamples=resamples, seed=0, key=str(i)
        )
        hits += observed > threshold and lo > 0.0
    return hits / pairs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", type=int, default=100)
    ap.add_argument("--resamples", type=int, default=400)
    args = ap.parse_args()
    t0 = time.perf_counter()
    print("requests per run at which the threshold decides (n = 2 (1.96 k CV / threshold)^2)")
    print("| stat | CV | 2% | 5% | 10% | 20% |")
    print("|---|---|---|---|---|---|")
    for stat in ("p50", "p95"):
        for cv in (0.05, 0.1, 0.2, 0.5):
            cells = [f"{requests_needed(cv, t, stat):,}" for t in (0.02, 0.05, 0.10, 0.20)]
            print(f"| {stat} | {cv:g} | " + " | ".join(cells) + " |")
    print()
    print(f"simulated ({args.pairs} run pairs each, {args.resamples} bootstrap resamples):")
    print("| stat | CV | threshold | n | flagged at 0 | at 1x threshold | at 1.5x threshold |")
    print("|---|---|---|---|---|---|---|")
    for stat, cv, threshold in (("p50", 0.2, 0.05), ("p50", 0.5, 0.10), ("p95", 0.2, 0.10)):
        n_formula = requests_needed(cv, threshold, stat)
        for n in sorted({max(10, n_formula // 4), n_formula}):
            shares = [
                flagged_share(n, cv, threshold, c * threshold, stat, args.pairs, args.resamples)
                for c in (0.0, 1.0, 1.5)
            ]
            print(
                f"| {stat} | {cv:g} | {threshold:.0%} | {n} | "
                + " | ".join(f"{s:.0%}" for s in shares)
                + " |"
            )
    print(f"\n({time.perf_counter() - t0:.0f} s)")


if __name__ == "__main__":
    main()
