"""The constants of the nightly gate's noise limit (tokrate.analysis.noise), by simulation.

Run by hand (not a test)::

    .venv/bin/python benchmarks/noise_calibration.py [--replicates 400000] [--seed 0]

The noise limit of a series is ``k(m) x s x f(n)``: ``s`` the robust night-to-night
spread of the m earlier healthy nights (tokrate.analysis.noise.robust_spread: the
trimmed root mean square of the differences between nights at most 4 apart, / sqrt 2),
``f(n) = sqrt(1 + v(n))`` for a reference that is the median of n nights (v(n): the
variance of the median of n standard normal values), and ``k(m)`` the 99.9% quantile of
Z / s for Z standard normal and independent of s: the limit one unchanged night passes
once in a thousand when nights are independent and normal (in log terms).

Prints ``k(m)`` for m = 5..20 and ``v(n)`` for n = 1..10 as the tables noise.py holds,
then checks the whole rule the way noise.py applies it: for m earlier nights and a
reference of the newest n of them, how often a new unchanged night passes the limit
(the target is 0.1%) and how often a night shifted by 3 s would; and that a lasting
shift nobody accepted stays flagged: the spread is fitted to the newest 20 nights,
the last k of them already shifted by 10 s, the reference is the median of the 10
nights before the shift (the shifted nights regressed, so they are no reference).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tokrate.analysis.noise import (
    MIN_NOISE_RUNS,
    NOISE_QUANTILE,
    NOISE_WINDOW,
    noise_width,
    robust_spreads,
)

CHUNK = 50_000


def k_table(replicates: int, rng: np.random.Generator) -> dict[int, float]:
    out = {}
    for m in range(MIN_NOISE_RUNS, NOISE_WINDOW + 1):
        ratios = []
        for start in range(0, replicates, CHUNK):
            k = min(CHUNK, replicates - start)
            s = robust_spreads(rng.standard_normal((k, m)))
            z = rng.standard_normal(k)
            ratios.append(z / s)
        out[m] = float(np.quantile(np.concatenate(ratios), NOISE_QUANTILE))
    return out


def v_table(replicates: int, rng: np.random.Generator) -> dict[int, float]:
    return {
        n: float(np.var(np.median(rng.standard_normal((replicates, n)), axis=1)))
        for n in range(1, 11)
    }


def check(replicates: int, rng: np.random.Generator) -> None:
    print("\nwhole rule: unchanged nights over the limit (target 0.10%); shifted by 3 sd")
    print("| earlier nights m | reference nights n | unchanged over | 3 sd over |")
    print("|---:|---:|---:|---:|")
    for m, n in ((5, 1), (5, 5), (8, 1), (8, 8), (12, 10), (20, 1), (20, 10)):
        nights = rng.standard_normal((replicates, m))
        width = noise_width(robust_spreads(nights), m, n)
        ref = np.median(nights[:, m - n :], axis=1)
        new = rng.standard_normal(replicates)
        over = float(np.mean(new - ref > width))
        shifted = float(np.mean(new + 3.0 - ref > width))
        print(f"| {m} | {n} | {over:.2%} | {shifted:.1%} |")
    print("\nlasting shift of 10 sd, k nights old: share of shifted nights still flagged")
    print("| k | flagged |")
    print("|---:|---:|")
    for k in (1, 5, 10, 15, 19):
        nights = rng.standard_normal((replicates, 20))
        nights[:, 20 - k :] += 10.0
        width = noise_width(robust_spreads(nights), 20, 10)
        ref = np.median(nights[:, 20 - k - 10 : 20 - k], axis=1) if k <= 10 else None
        if ref is None:  # fewer than 10 nights before the shift in the window
            ref = np.median(nights[:, : 20 - k], axis=1)
        new = rng.standard_normal(replicates) + 10.0
        print(f"| {k} | {float(np.mean(new - ref > width)):.1%} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--replicates", type=int, default=400_000)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    rng = np.random.default_rng(args.seed)
    started = time.perf_counter()
    k = k_table(args.replicates, rng)
    print("k(m), 99.9% quantile of Z / s:")
    print("    " + ", ".join(f"{m}: {v:.3f}" for m, v in k.items()))
    v = v_table(args.replicates, rng)
    print("v(n), variance of the median of n standard normal values:")
    print("    " + ", ".join(f"{n}: {x:.4f}" for n, x in v.items()))
    check(args.replicates, rng)
    print(
        f"\n{args.replicates:,} replicates per entry, seed {args.seed},"
        f" {time.perf_counter() - started:.0f} s"
    )


if __name__ == "__main__":
    main()
