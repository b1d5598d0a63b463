"""Thresholds fitted to the night-to-night spread of a benchmark's history: the part of a
verdict that sees the noise *between* runs (batch composition, machine load, provider
drift), which the interval of one comparison cannot see.

**Which nights.** The history of a run R is its benchmark's (run.json ``benchmark``:
the same load settings, scenario levels, prompts, targets and client settings, one
fingerprint; :class:`tokrate.runfolder.run_info.BenchmarkInfo`): the complete runs of
that fingerprint that started before R, wherever they lie under the history folder, so
runs of other benchmarks there change nothing. Per series (endpoint, model, scenario,
metric) the fit uses the newest :data:`NOISE_WINDOW` of those nights whose client was
healthy while it measured that scenario (:func:`tokrate.analysis.health.unhealthy_scenario`:
no event-loop lag p99 far past the threshold), each with the value it measured
(summary.json). Nothing else: not what any night's own check decided. A fit that left
out the nights that regressed could never learn a host that really is that noisy (its
wide nights would all be flagged against the narrow fit, and stay out), so which nights
count must not depend on the verdicts the fit produced.

**Robust spread.** Nights in time order, log values (plain values for the rates of
ABSOLUTE_METRICS): the differences between every two nights at most :data:`PAIR_LAG`
apart, those more than :data:`OUTLIER_Z` robust standard deviations (median absolute
difference / 0.6745) from 0 left out, and s = the root mean square of the rest /
sqrt 2 (:func:`robust_spread`). Why differences of nearby nights and not the spread of
the values: a lasting change of level (a real regression nobody accepted yet) adds only
the few differences across it, so it does not widen the threshold that keeps flagging
it, however many nights it lasts; a one-night stall adds a few large differences the
cut leaves out (a stall the client saw is not even a fit night: the health rule above);
and nights up to four apart still see a busy spell of the host that lasts a few nights.
A rate that is exactly the same on most nights (an error rate of 0) has no spread: the
differences that are not 0 are all cut, s = 0, and the configured threshold and the
interval judge it alone.

**Noise limit.** The change one unchanged night passes about once in a thousand
(:data:`NOISE_QUANTILE`, one-sided) against a reference that is the median of n nights
(n = 1 for a single baseline run): ``k(m) x s x sqrt(1 + v(n))`` with m the nights
used, k(m) the 99.9% quantile of Z / s for normal nights (it grows as m shrinks: a
spread from few nights is itself uncertain) and v(n) the variance of the median of n
standard normal values. Both tables come from simulation
(``benchmarks/noise_calibration.py`` prints them and checks the whole rule: 0.1% of
unchanged nights over the limit). As a ratio for latencies (``exp(..) - 1``), a drop
for tokens/s (``1 - exp(-..)``), points for a rate. A row is judged by the larger of
that and its configured threshold: the configured one says what change matters, the
noise limit what change can be told apart from noise. It is also the *smallest
detectable change* comparison.md and ``--quiet`` state per series. A series with fewer
than :data:`MIN_NOISE_RUNS` such nights keeps its configured threshold (the first
nights), with the confirmation re-measurement against one-off noise.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import Final

import numpy as np
import polars as pl

from tokrate.analysis.health import unhealthy_scenario
from tokrate.analysis.points import RunEntry, read_points
from tokrate.runfolder.comparison import NoiseSource
from tokrate.runfolder.run_info import RunInfo
from tokrate.runfolder.store import load_run_info
from tokrate.spec.thresholds import (
    ABSOLUTE_METRICS,
    RUN_METRICS,
    SeriesKey,
    Threshold,
    ThresholdSet,
)

__all__ = [
    "FALLBACK",
    "MIN_NOISE_RUNS",
    "NOISE_QUANTILE",
    "NOISE_WINDOW",
    "OUTLIER_Z",
    "PAIR_LAG",
    "NoiseFit",
    "SeriesNoise",
    "benchmark_nights",
    "fit_from_points",
    "fit_thresholds",
    "fitted",
    "noise_limit",
    "noise_threshold",
    "noise_width",
    "robust_spread",
    "robust_spreads",
    "series_noise",
]

#: Earlier healthy nights of a series that a spread is fitted to (the newest this many).
NOISE_WINDOW: Final = 20
#: Fewer such nights: no fit, the configured threshold (the fallback).
MIN_NOISE_RUNS: Final = 5
#: One-sided quantile of the change between an unchanged night and its reference that
#: the noise limit sits at.
NOISE_QUANTILE: Final = 0.999
# Not lowered although a regression is now measured twice (the confirmation pass)
# before it is reported: the re-measurement is judged against the same reference, so
# the reference's own deviation is shared by both measurements and the chances of the
# two stages do not multiply.
#: Nights at most this far apart (in night order) are paired in the spread.
PAIR_LAG: Final = 4
#: Differences more than this many robust standard deviations from 0 are left out
#: (Iglewicz and Hoaglin's 3.5). A looser cut would suit the first nights better (their
#: few differences have a noisy median, so ordinary ones are cut now and then: k(5) is
#: 12.0 at 3.5, 10.0 at 4.5), but lets through some differences across a lasting
#: shift of 10 standard deviations (3.5% of the shifted nights passed at 4.5, 0.1% at
#: 3.5: benchmarks/noise_calibration.py).
OUTLIER_Z: Final = 3.5
#: The normal distribution's 0.75 quantile: the median absolute value of normal data
#: is this many standard deviations.
_MAD_NORMAL: Final = 0.6745
#: k(m), the 99.9% quantile of Z / s (module doc) for m = MIN_NOISE_RUNS..NOISE_WINDOW
#: nights, by simulation: ``benchmarks/noise_calibration.py --replicates 400000 --seed 0``.
_K999: Final = {
    5: 11.995, 6: 7.333, 7: 6.057, 8: 5.266, 9: 4.754, 10: 4.596, 11: 4.330, 12: 4.217,
    13: 4.063, 14: 3.991, 15: 3.879, 16: 3.820, 17: 3.818, 18: 3.749, 19: 3.714, 20: 3.702,
}  # fmt: skip
#: v(n), the variance of the median of n standard normal values, n = 1..10, by the same
#: simulation (the exact values are 1 and 0.5 for n = 1 and 2).
_MEDIAN_VAR: Final = {
    1: 1.0, 2: 0.5, 3: 0.4489, 4: 0.2966, 5: 0.2885,
    6: 0.2137, 7: 0.2105, 8: 0.1681, 9: 0.1658, 10: 0.1383,
}  # fmt: skip
#: How a comparison says what judged the series without enough history.
FALLBACK: Final = (
    f"series with fewer than {MIN_NOISE_RUNS} earlier healthy nights of the benchmark: the"
    " configured threshold, and a confirmation re-measurement of a regression"
)


def _pairs(m: int) -> tuple[np.ndarray, np.ndarray]:
    """Index pairs (i, j) of nights with 1 <= j - i <= PAIR_LAG."""
    pairs = [(i, j) for i in range(m) for j in range(i + 1, min(m, i + PAIR_LAG + 1))]
    return (
        np.asarray([i for i, _ in pairs], dtype=np.intp),
        np.asarray([j for _, j in pairs], dtype=np.intp),
    )


def robust_spreads(nights: np.ndarray) -> np.ndarray:
    """The robust spread s (module doc) of every row of ``nights`` (rows: series, columns:
    nights in time order, in log units or a rate's plain units), vectorised."""
    rows, m = nights.shape
    if m < 2:
        return np.full(rows, np.nan)
    first, second = _pairs(m)
    d = nights[:, second] - nights[:, first]
    scale = np.median(np.abs(d), axis=1) / _MAD_NORMAL
    keep = np.where((scale > 0)[:, None], np.abs(d) <= OUTLIER_Z * scale[:, None], d == 0.0)
    kept = np.maximum(keep.sum(axis=1), 1)
    spreads: np.ndarray = np.sqrt((np.where(keep, d, 0.0) ** 2).sum(axis=1) / kept / 2.0)
    return spreads


def robust_spread(values: Sequence[float]) -> float:
    """The robust spread of one series' nights (time order, in log or rate units)."""
    return float(robust_spreads(np.asarray(values, dtype=np.float64)[None, :])[0])


def noise_width(s: float | np.ndarray, m: int, reference_nights: int = 1) -> float | np.ndarray:
    """``k(m) x s x sqrt(1 + v(n))`` (module doc), in the units of ``s``."""
    k = _K999[min(max(m, MIN_NOISE_RUNS), NOISE_WINDOW)]
    v = _MEDIAN_VAR[min(max(reference_nights, 1), max(_MEDIAN_VAR))]
    return k * s * math.sqrt(1.0 + v)


def _usable(values: Sequence[float], metric: str) -> np.ndarray:
    """Finite values in the units the spread is taken in: logs of positive values for
    latencies and tokens/s, plain values for a rate."""
    arr = np.asarray(values, dtype=np.float64)
    arr = arr[np.isfinite(arr)]
    if metric in ABSOLUTE_METRICS:
        return arr
    return np.log(arr[arr > 0])


def noise_limit(values: Sequence[float], metric: str, reference_nights: int = 1) -> float | None:
    """The noise limit (module doc) of ``metric`` from its earlier nights' values (time
    order, the metric's unit) against a reference of ``reference_nights`` nights, or
    None with fewer than MIN_NOISE_RUNS usable values (finite; positive for a latency)."""
    arr = _usable(values, metric)
    if arr.size < MIN_NOISE_RUNS:
        return None
    width = float(noise_width(robust_spread(arr.tolist()), int(arr.size), reference_nights))
    if metric in ABSOLUTE_METRICS:
        return width
    if metric.startswith("decode_tps"):
        return 1.0 - math.exp(-width)
    return math.expm1(width)


@dataclass(frozen=True, slots=True)
class SeriesNoise:
    """One series' history: ``nights`` earlier healthy nights with a value (at most
    NOISE_WINDOW) and the ``limit`` they give (None with fewer than MIN_NOISE_RUNS)."""

    nights: int
    limit: float | None


def series_noise(
    values: Sequence[float], metric: str, reference_nights: int = 1, *, window: int = NOISE_WINDOW
) -> SeriesNoise:
    """The noise of one series from its earlier healthy nights' values (time order),
    the newest ``window`` of them."""
    kept = list(values)[-window:]
    return SeriesNoise(len(kept), noise_limit(kept, metric, reference_nights))


def noise_threshold(base: Threshold, noise: SeriesNoise) -> Threshold:
    """``base`` widened to ``noise``'s limit when that is larger (source ``"noise"``);
    ``base`` itself otherwise or without a limit."""
    limit = noise.limit
    if limit is None or not math.isfinite(limit) or limit <= base.limit:
        return base
    return replace(base, limit=limit, source="noise")


def _before(e: RunEntry, started: datetime | None, here: Path) -> bool:
    """Whether ``e`` started before the run in folder ``here`` that ``started`` then;
    runs that started in the same instant are ordered by their folders' paths."""
    if started is None or e.started != started:
        return started is None or e.started < started
    return str(e.folder.resolve()) < str(here)


def benchmark_nights(entries: Sequence[RunEntry], current: RunInfo, folder: Path) -> list[RunEntry]:
    """The earlier nights of ``current``'s benchmark (module doc), oldest first:
    ``entries`` (any order) with its fingerprint that started before it, outside its
    ``folder`` (its own confirmation measurement is part of it)."""
    started = current.started_datetime
    here = folder.resolve()
    fingerprint = current.fingerprint
    return sorted(
        (
            e
            for e in entries
            if e.info.fingerprint == fingerprint
            and _before(e, started, here)
            and e.folder.resolve() != here
            and here not in e.folder.resolve().parents
        ),
        key=lambda e: (e.started, e.key),
    )


def _night_values(points: pl.DataFrame, nights: Sequence[RunEntry]) -> dict[SeriesKey, list[float]]:
    """Per series, the values of ``nights`` (oldest first) whose client was healthy in
    the series' scenario."""
    order = {e.key: i for i, e in enumerate(nights)}
    unhealthy = {
        (e.key, s.name)
        for e in nights
        for s in e.info.scenarios
        if unhealthy_scenario(e.info, s.name) is not None
    }
    keep = points.filter(pl.col("folder").is_in(list(order)))
    out: dict[SeriesKey, list[float]] = {}
    rows = sorted(keep.iter_rows(named=True), key=lambda row: order[row["folder"]])
    for row in rows:
        if (row["folder"], row["scenario"]) in unhealthy:
            continue
        key = (row["endpoint"], row["model"], row["scenario"], row["metric"])
        out.setdefault(key, []).append(float(row["value"]))
    return out


@dataclass(frozen=True, slots=True)
class NoiseFit:
    """Thresholds fitted to a history (module doc): ``thresholds`` (the configured ones,
    widened per series where the noise limit is larger), ``source`` (where from, for
    comparison.json) and ``series``: every judged series' nights and noise limit."""

    thresholds: ThresholdSet
    source: NoiseSource
    series: Mapping[SeriesKey, SeriesNoise] = field(default_factory=dict)


def fitted(
    base: ThresholdSet,
    values: Mapping[SeriesKey, Sequence[float]],
    folder: str,
    reference_nights: Mapping[tuple[str, str, str], int] | None = None,
) -> NoiseFit:
    """``base`` with a per-series threshold for every series whose earlier nights give a
    noise limit above its threshold; ``reference_nights`` per (endpoint, model,
    scenario) group: how many nights its reference is the median of (1 when absent)."""
    per_series = dict(base.per_series)
    found: dict[SeriesKey, SeriesNoise] = {}
    for key, vals in values.items():
        metric = key[3]
        if metric in RUN_METRICS or not any(t.metric == metric for t in base.metrics):
            continue
        n_ref = (reference_nights or {}).get(key[:3], 1)
        noise = series_noise(vals, metric, n_ref)
        found[key] = noise
        t = base.for_series(*key)
        widened = noise_threshold(t, noise)
        if widened is not t:
            per_series[key] = widened
    counts = [n.nights for n in found.values()]
    source = NoiseSource(
        folder=folder,
        runs=(min(counts, default=0), max(counts, default=0)),
        fitted=sum(1 for k in found if k in per_series and per_series[k].source == "noise"),
        fallback=FALLBACK,
    )
    return NoiseFit(ThresholdSet(base.metrics, per_series), source, found)


def fit_from_points(
    points: pl.DataFrame,
    entries: Mapping[str, RunEntry],
    current: RunInfo,
    current_dir: Path,
    base: ThresholdSet,
    folder: str,
    reference_nights: Mapping[tuple[str, str, str], int] | None = None,
) -> NoiseFit:
    """:func:`fit_thresholds` on a history already read (:func:`read_points`)."""
    nights = benchmark_nights(list(entries.values()), current, current_dir)
    return fitted(base, _night_values(points, nights), folder, reference_nights)


def fit_thresholds(
    history: Path | str,
    current_dir: Path | str,
    base: ThresholdSet,
    reference_nights: Mapping[tuple[str, str, str], int] | None = None,
) -> NoiseFit:
    """``base`` fitted to the history of the run in ``current_dir``'s benchmark under
    ``history`` (module doc); ``reference_nights``: per (endpoint, model, scenario)
    group, how many nights its reference is the median of (1 when absent: one baseline
    run). Reads run.json and summary.json of every run folder there (records only where
    a summary is missing). Raises RunFolderError when ``current_dir`` is not a readable
    run folder."""
    root = Path(history)
    current = load_run_info(current_dir)
    metrics = [t.metric for t in base.metrics if t.metric not in RUN_METRICS]
    points, entries, _ = read_points(root, metrics)
    return fit_from_points(
        points, entries, current, Path(current_dir), base, str(root), reference_nights
    )
