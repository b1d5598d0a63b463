"""Pure statistics: distributions, bootstrap intervals (plain and block), proportions,
power-law fits, stability warnings. The one home of every statistical rule; compare,
history and the report all call these.

Every function here is pure (no I/O, no clock) and seeded where it draws random numbers,
so the same input always gives the same output. An empty input gives ``None`` values,
never 0: a missing p95 is unknown, not zero milliseconds.

Percentiles use linear interpolation between closest ranks (numpy's default,
``interpolation="linear"`` in polars), so p50 of [1, 2, 3, 4] is 2.5.
"""

from __future__ import annotations

import functools
import math
import zlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from statistics import NormalDist
from typing import Any, Final

import numpy as np
import polars as pl

from tokrate.analysis.early_stopping import ES_QUANTILES, certified_rank
from tokrate.analysis.student_t import t_quantile_975
from tokrate.runfolder.proportions import wilson_bounds
from tokrate.runfolder.summary import DIST_KEYS, Group

__all__ = [
    "MIN_STABLE_N",
    "PowerLawFit",
    "block_bootstrap",
    "block_length",
    "bootstrap_ci",
    "newcombe_interval",
    "relative_change_ci",
    "sample_stat",
    "dist_exprs",
    "distribution",
    "empty_distribution",
    "es_of_series",
    "fit_power_law",
    "row_to_distribution",
    "stability_warnings",
]

#: Below this many ok requests a p95 moves by more than its own spread from run to run
#: (the 95th percentile of 30 samples rests on the top one or two), so we warn.
MIN_STABLE_N: Final = 30

_QUANTILES: Final = (("p50", 0.50), ("p90", 0.90), ("p95", 0.95), ("p99", 0.99))


def empty_distribution() -> dict[str, Any]:
    """The distribution of no values: n = 0 and every statistic None."""
    return {k: (0 if k == "n" else None) for k in DIST_KEYS}


def es_of_series(values: pl.Series, q: float) -> float | None:
    """The early-stopping estimate of the ``q`` percentile of ``values`` (no nulls or
    NaNs): their t*-th largest (tokrate.analysis.early_stopping), None below the
    samples it needs."""
    rank = certified_rank(values.len(), q)
    if rank is None:
        return None
    return float(values.sort(descending=True)[rank - 1])


def dist_exprs(column: str | pl.Expr, prefix: str | None = None) -> list[pl.Expr]:
    """Polars aggregation expressions for :data:`DIST_KEYS` of ``column``.

    ``column`` is a column name or an expression (e.g. a filtered column). Nulls and
    NaNs are ignored (a request without a TTFT does not count in n). Output columns are
    named ``<prefix>__<key>``; prefix defaults to the column name and is required for an
    expression. Use inside ``group_by(...).agg(...)`` or ``select``.
    """
    if isinstance(column, str):
        base, name = pl.col(column), prefix or column
    else:
        if prefix is None:
            raise ValueError("dist_exprs needs a prefix for an expression")
        base, name = column, prefix
    col = base.drop_nulls().drop_nans()
    exprs = [
        col.count().alias(f"{name}__n"),
        col.mean().alias(f"{name}__mean"),
    ]
    exprs += [
        col.quantile(q, interpolation="linear").alias(f"{name}__{key}") for key, q in _QUANTILES
    ]
    exprs += [col.min().alias(f"{name}__min"), col.max().alias(f"{name}__max")]
    exprs += [
        col.map_batches(
            functools.partial(es_of_series, q=q), return_dtype=pl.Float64, returns_scalar=True
        ).alias(f"{name}__{key}_es")
        for key, q in ES_QUANTILES
    ]
    return exprs


def distribution(values: pl.Series | Sequence[float | None]) -> dict[str, Any]:
    """n, mean, p50, p90, p95, p99, min and max of ``values`` (nulls/NaNs ignored).

    Returns :func:`empty_distribution` when no value remains.
    """
    series = values if isinstance(values, pl.Series) else pl.Series(values, dtype=pl.Float64)
    frame = pl.DataFrame({"v": series.cast(pl.Float64)}).select(dist_exprs("v"))
    return row_to_distribution(frame.row(0, named=True), "v")


def row_to_distribution(row: Mapping[str, Any], prefix: str) -> dict[str, Any]:
    """Pick ``<prefix>__<key>`` out of an aggregated row into a distribution dict."""
    n = row.get(f"{prefix}__n") or 0
    if n == 0:
        return empty_distribution()
    out: dict[str, Any] = {"n": int(n)}
    for key in DIST_KEYS[1:]:
        value = row.get(f"{prefix}__{key}")
        out[key] = None if value is None else float(value)
    return out


def bootstrap_ci(
    values: Sequence[float] | np.ndarray | pl.Series,
    *,
    statistic: str = "median",
    level: float = 0.95,
    resamples: int = 2000,
    seed: int = 0,
    max_cells: int = 4_000_000,
) -> tuple[float, float] | None:
    """Percentile-bootstrap confidence interval of a statistic ("median" or "mean").

    Vectorised: resamples are drawn as one index matrix, processed in blocks so that no
    block holds more than ``max_cells`` numbers (memory stays bounded for large n).
    Seeded: the same input and seed give the same interval. Returns None for fewer
    than 2 values (no spread to resample).
    """
    arr = np.asarray(
        values.drop_nulls().to_numpy() if isinstance(values, pl.Series) else values,
        dtype=np.float64,
    )
    arr = arr[~np.isnan(arr)]
    n = arr.size
    if n < 2:
        return None
    if statistic not in ("median", "mean"):
        raise ValueError(f"statistic must be 'median' or 'mean', got {statistic!r}")
    reducer = np.median if statistic == "median" else np.mean
    rng = np.random.default_rng(seed)
    block = max(1, max_cells // n)
    stats_out = np.empty(resamples, dtype=np.float64)
    for start in range(0, resamples, block):
        stop = min(resamples, start + block)
        idx = rng.integers(0, n, size=(stop - start, n))
        stats_out[start:stop] = reducer(arr[idx], axis=1)
    alpha = (1.0 - level) / 2.0
    low, high = np.quantile(stats_out, [alpha, 1.0 - alpha])
    return float(low), float(high)


#: Block-bootstrap work is done in chunks of at most this many drawn values (8 bytes
#: each for the indices and the values): bounded memory for runs of any size.
_BLOCK_ELEMENTS: Final = 2_000_000


def sample_stat(
    values: np.ndarray, q: float | None, axis: int | None = None, *, scratch: bool = False
) -> Any:
    """The mean (``q`` None) or the ``q`` quantile (linear interpolation, as
    summary.json) of ``values``. ``scratch``: ``values`` is the caller's to lose, so
    the quantile partitions it in place rather than a copy (same result; the
    bootstrap's replicates are drawn into a fresh array each time)."""
    if q is None:
        return np.mean(values, axis=axis)
    return np.quantile(values, q, axis=axis, overwrite_input=scratch)


def block_bootstrap(
    values: np.ndarray, q: float | None, resamples: int, block: int, rng: np.random.Generator
) -> np.ndarray:
    """``resamples`` circular-block-bootstrap replicates of the statistic.

    ``values`` are in send order. Each replicate strings together random runs of
    ``block`` consecutive requests (wrapping around) until it has n values. Requests in
    flight together share the server's and the client machine's state, so one stall
    slows all of them at once; resampling them as a block keeps that correlation, where
    an i.i.d. bootstrap would count one stall ``block`` times as independent evidence.
    ``block == 1`` is the ordinary bootstrap. Vectorised, in chunks of bounded memory.
    Each replicate is the one :func:`sample_stat` gives its drawn values, bit for bit
    (a quantile is read off the replicate's sorted ranks: :class:`_RankedValues`).
    """
    n = values.size
    block = max(1, min(block, n))
    n_blocks = -(-n // block)
    per_chunk = max(1, _BLOCK_ELEMENTS // max(n_blocks * block, 1))
    ranked = _RankedValues.of(values, q)
    drawn_from = values if ranked is None else ranked.ranks
    # The first block - 1 values again after the last: a block that wraps around is a
    # plain slice of this, with no modulo per drawn value.
    circular = np.concatenate([drawn_from, drawn_from[: block - 1]])
    offsets = np.arange(block)
    out = np.empty(resamples)
    done = 0
    while done < resamples:
        k = min(per_chunk, resamples - done)
        starts = rng.integers(0, n, size=(k, n_blocks, 1))
        # A fancy index copies: the replicates are this function's to sort or partition.
        drawn = circular[(starts + offsets).reshape(k, n_blocks * block)[:, :n]]
        if ranked is None:
            out[done : done + k] = sample_stat(drawn, q, axis=1, scratch=True)
        else:
            out[done : done + k] = ranked.row_quantiles(drawn)
        done += k
    return out


@dataclass(frozen=True, slots=True)
class _RankedValues:
    """``values`` as 16-bit ranks (their positions in ``ordered``, ties apart), so that
    the ``q`` quantile of many replicates comes from sorting their ranks, a radix sort
    about three times faster than partitioning the floats. Linear interpolation between
    the two order statistics around ``(n - 1) q`` exactly as :func:`numpy.quantile`
    does it, so every replicate is the same float."""

    ranks: np.ndarray
    ordered: np.ndarray
    below: int
    gamma: float

    @classmethod
    def of(cls, values: np.ndarray, q: float | None) -> _RankedValues | None:
        """None where ranks do not apply, and the caller takes numpy's own path: the
        mean, values that are not float64 or hold a NaN, more values than 16 bits
        count, or a quantile at the top end (no order statistic above it)."""
        n = values.size
        if q is None or values.dtype != np.float64 or not 1 < n <= _MAX_RANKED:
            return None
        virtual = (n - 1) * q
        below = math.floor(virtual)
        if not 0 <= below < n - 1 or np.isnan(values).any():
            return None
        order = np.argsort(values, kind="stable")
        ranks = np.empty(n, dtype=np.int16)
        ranks[order] = np.arange(n, dtype=np.int16)
        return cls(ranks, values[order], below, virtual - below)

    def row_quantiles(self, drawn_ranks: np.ndarray) -> np.ndarray:
        """The quantile of each row of ``drawn_ranks`` (sorted in place)."""
        drawn_ranks.sort(axis=1, kind="stable")
        a = self.ordered[drawn_ranks[:, self.below]]
        b = self.ordered[drawn_ranks[:, self.below + 1]]
        # numpy's lerp: from the nearer end, so gamma 1 gives b exactly.
        diff = b - a
        quantiles: np.ndarray = (
            b - diff * (1 - self.gamma) if self.gamma >= 0.5 else a + diff * self.gamma
        )
        return quantiles


#: The most values :class:`_RankedValues` ranks (int16).
_MAX_RANKED: Final = 32_767


def block_length(in_flight: float | None, n: int) -> int:
    """Bootstrap block length: the requests in flight together (closed-loop
    concurrency, or open-loop rate x median E2E), capped so that a replicate has at
    least 5 blocks."""
    block = 1 if in_flight is None else round(in_flight)
    return max(1, min(block, n // 5))


def relative_change_ci(
    base: np.ndarray | Sequence[np.ndarray],
    cur: np.ndarray,
    q: float | None,
    blocks: tuple[int | Sequence[int], int],
    *,
    confidence: float,
    resamples: int,
    seed: int,
    key: str,
) -> tuple[float, float]:
    """Percentile bootstrap interval of stat(cur) / stat(base) - 1.

    Both samples are resampled independently (they are independent runs), each in
    blocks of its own length; the seed mixes ``seed`` with a CRC of ``key`` (the row),
    so each row is reproducible and rows are independent. ``base`` may be several
    nights (a reference, tokrate.analysis.reference) with a block length each: then
    the baseline's statistic is the median of the nights' own, in every replicate
    too. (nan, nan) when no replicate ratio is finite.
    """
    rng = np.random.default_rng([seed, zlib.crc32(key.encode())])
    nights = [base] if isinstance(base, np.ndarray) else list(base)
    night_blocks = [blocks[0]] * len(nights) if isinstance(blocks[0], int) else list(blocks[0])
    b = np.median(
        np.stack(
            [
                block_bootstrap(v, q, resamples, blk, rng)
                for v, blk in zip(nights, night_blocks, strict=True)
            ]
        ),
        axis=0,
    )
    c = block_bootstrap(cur, q, resamples, blocks[1], rng)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = c / b - 1.0
    ratio = ratio[np.isfinite(ratio)]
    if ratio.size == 0:
        return (math.nan, math.nan)
    alpha = (1.0 - confidence) / 2.0
    lo, hi = np.quantile(ratio, [alpha, 1.0 - alpha])
    return float(lo), float(hi)


def newcombe_interval(
    k_base: float, n_base: float, k_cur: float, n_cur: float, confidence: float = 0.95
) -> tuple[float, float]:
    """Newcombe's hybrid-score interval of p_cur - p_base (two proportions).

    Built from the two Wilson intervals, it stays sensible at 0 errors and small n,
    where the normal approximation collapses to a zero-width interval.
    Requires n_base > 0 and n_cur > 0 (effective, fractional counts are allowed:
    :mod:`tokrate.analysis.cache_compare`).
    """
    z = NormalDist().inv_cdf(0.5 + confidence / 2.0)
    p1, p2 = k_base / n_base, k_cur / n_cur
    l1, u1 = wilson_bounds(k_base, n_base, z)
    l2, u2 = wilson_bounds(k_cur, n_cur, z)
    d = p2 - p1
    return (
        d - math.sqrt((p2 - l2) ** 2 + (u1 - p1) ** 2),
        d + math.sqrt((u2 - p2) ** 2 + (p1 - l1) ** 2),
    )


@dataclass(frozen=True, slots=True)
class PowerLawFit:
    """``y = coef * x ** exponent`` fitted by least squares in log-log space.

    ``k = -exponent`` is the docs/definitions.md reading "tokens/s ~ params^-k".
    ``exponent_ci`` is the 95% t-interval of the slope (None with only 2 points, where
    a line through two points has no residual to estimate spread from).
    """

    exponent: float
    coef: float
    exponent_ci: tuple[float, float] | None
    r2: float | None
    n: int

    @property
    def k(self) -> float:
        return -self.exponent

    def predict(self, x: np.ndarray | float) -> np.ndarray:
        """The fitted y at ``x`` (same units as the fit input)."""
        return self.coef * np.power(np.asarray(x, dtype=np.float64), self.exponent)


def fit_power_law(x: Iterable[float], y: Iterable[float]) -> PowerLawFit | None:
    """Fit ``y = a * x^b`` on the points with x > 0 and y > 0.

    Returns None with fewer than 2 usable points or when all x are equal (no slope).
    """
    xs = np.asarray(list(x), dtype=np.float64)
    ys = np.asarray(list(y), dtype=np.float64)
    keep = np.isfinite(xs) & np.isfinite(ys) & (xs > 0) & (ys > 0)
    lx, ly = np.log(xs[keep]), np.log(ys[keep])
    n = lx.size
    if n < 2 or np.ptp(lx) == 0:
        return None
    mx, my = lx.mean(), ly.mean()
    sxx = float(((lx - mx) ** 2).sum())
    slope = float(((lx - mx) * (ly - my)).sum() / sxx)
    intercept = my - slope * mx
    resid = ly - (intercept + slope * lx)
    ss_res = float((resid**2).sum())
    ss_tot = float(((ly - my) ** 2).sum())
    r2 = None if ss_tot == 0 else 1.0 - ss_res / ss_tot
    ci: tuple[float, float] | None = None
    if n > 2:
        se = math.sqrt(ss_res / (n - 2) / sxx)
        half = t_quantile_975(n - 2) * se
        ci = (slope - half, slope + half)
    return PowerLawFit(exponent=slope, coef=math.exp(intercept), exponent_ci=ci, r2=r2, n=n)


def stability_warnings(groups: Sequence[Group], *, min_n: int = MIN_STABLE_N) -> list[str]:
    """One-line warnings for summary groups whose numbers are not stable.

    Each warning names the group and ends with what to do. Checks: fewer than
    ``min_n`` ok requests (p95 unstable); no ok request at all; more than 10% errors.
    """
    out: list[str] = []
    for g in groups:
        where = f"{g.model} {g.level}"
        if g.endpoint:
            where = f"{g.endpoint}/{where}"
        ok, scheduled, errors = g.counts.ok, g.counts.scheduled, g.counts.error
        if scheduled and ok == 0:
            out.append(
                f"no ok requests for {where}: every request failed; see the errors table "
                "and check the endpoint before comparing numbers"
            )
            continue
        if 0 < ok < min_n:
            out.append(
                f"only {ok} ok requests for {where}: run with --requests >= {min_n} "
                "for a stable p95"
            )
        if scheduled and errors / scheduled > 0.10:
            out.append(
                f"{errors} of {scheduled} requests failed for {where}: latency numbers "
                "describe only the survivors; fix the errors or lower the load"
            )
    return out
