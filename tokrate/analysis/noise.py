"""Thresholds fitted to the run-to-run spread a history recorded: the part of a verdict
that sees the noise *between* runs (batch composition, machine load, provider drift),
which the interval of one pair of runs cannot see.

The runs that count for a run R (``tokrate run --baseline`` and ``tokrate compare``
fit in the folder ``latest-good`` lives in; ``tokrate history`` at every point) are the
earlier runs of R's *segment*: walking back from R, the complete runs that started
before it, up to the first one that compare would call not comparable with it
(:func:`tokrate.analysis.comparability.run_problem`: other load settings, prompts or
simulator clock), leaving out those whose own check recorded ``regressed`` (a
regression is not noise). Per series (endpoint, model, scenario, metric), the newest
:data:`NOISE_WINDOW` of them with a value give the spread s: the standard deviation of
the log values, after leaving out the values that lie more than :data:`OUTLIER_Z`
robust standard deviations (1.4826 x the median absolute deviation) from their median
(Iglewicz and Hoaglin's modified z-score); the plain values of ``error_rate``, all of
them (mostly exactly 0, so they have no robust scale). Why robust: on a shared
machine the client stalls now and then (a 450 ms event-loop stall put one night's p95
TTFT at 258 ms against 152-186 ms on the others), and the standard deviation of a
handful of log values is ruled by the one stall in them: the fitted limit of the next
twenty nights becomes as wide as the stall, and a real regression smaller than it
passes. The stall itself is what the confirmation re-measurement and the health gate
are for, not the threshold. The price, on normal data (simulated): a value of an
unstalled endpoint is left out now and then (about 2% of them with 10 runs, 0.6% with
20: the MAD of a few values is itself noisy), so two unchanged runs pass the limit
about 0.2-0.5% of the time instead of 0.1%; the confirmation re-measurement stands
behind a first flag. With the standard deviation, one stall among m runs widens the
limit without bound (as far as the stall is large); left out, a value widens it at
most as far as one at the edge of the kept region would (simulated: at most 2.7x, in
log terms, the limit the other 5-19 runs give with the standard deviation).

A run's value stands for the night as its own check judged it: where that check
re-measured the series (a regression the confirmation pass did not reproduce), the
re-measured value; where it called the series inconclusive because the client was
overloaded, no value. Both are stalls the verdict already handles by other means (the
re-measurement, the health gate); fitted into the spread they counted twice: one
night with a 450 ms stall of the client (p95 TTFT 258 ms, 169 ms re-measured, against
152-186 ms on every other night) widened sim-70b's p95 TTFT threshold to +783% for the
next runs, so that a doubled TTFT was no longer flagged.

The noise limit is the change that two runs of an unchanged endpoint exceed about
once in a thousand: with m runs (those left after the outliers), t(0.999, m - 1) x
sqrt(2) x s (Student's t, so a spread estimated from few runs gives a wider limit):
``exp(..) - 1`` for a latency, ``1 - exp(-..)`` for tokens/s, the plain value for an
error rate. The threshold a row
is judged by is the larger of that and its configured threshold (the default or
``--threshold``): the configured one says what change matters, the noise limit what
change can be told apart from noise. A series with fewer than
:data:`MIN_NOISE_RUNS` runs keeps its configured threshold: that is the fallback, with
a confirmation re-measurement (``tokrate run --baseline``) against one-off noise.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Final

import numpy as np
import polars as pl

from tokrate.analysis.comparability import run_problem
from tokrate.analysis.health import OVERLOAD_PREFIX
from tokrate.analysis.points import RunEntry, read_points
from tokrate.analysis.student_t import t_quantile
from tokrate.errors import RunFolderError
from tokrate.runfolder.comparison import COMPARISON_FILE, NoiseSource
from tokrate.runfolder.files import read_json
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
    "MIN_NOISE_RUNS",
    "NOISE_QUANTILE",
    "NOISE_WINDOW",
    "FALLBACK",
    "MAD_SCALE",
    "OUTLIER_Z",
    "as_judged",
    "fit_thresholds",
    "noise_limit",
    "noise_threshold",
    "segment_before",
    "value_as_judged",
    "without_outliers",
]

#: Earlier runs of a series that a spread is fitted to (the newest this many).
NOISE_WINDOW: Final = 20
#: Fewer earlier runs: no fit, the configured threshold (the fallback).
MIN_NOISE_RUNS: Final = 5
#: One-sided quantile of the change between two runs of an unchanged endpoint that the
#: noise limit sits at.
NOISE_QUANTILE: Final = 0.999
# Not lowered although a regression is now measured twice (the confirmation pass)
# before it is reported: the re-measurement is judged against the same baseline, so
# the baseline's own deviation, half the variance of a change, is shared by both
# measurements and the chances of the two stages do not multiply.
#: Modified z-score past which a value is left out of the spread (Iglewicz and
#: Hoaglin's rule for outliers: about one normal value in two thousand is past it).
OUTLIER_Z: Final = 3.5
#: 1 / the normal distribution's 0.75 quantile: the MAD times this estimates the
#: standard deviation of normal data.
MAD_SCALE: Final = 1.4826
#: How a comparison says what judged the series without enough history.
FALLBACK: Final = (
    f"series with fewer than {MIN_NOISE_RUNS} earlier comparable runs: the configured"
    " threshold, and a confirmation re-measurement of a regression"
)


def without_outliers(x: np.ndarray) -> np.ndarray:
    """``x`` without the values whose modified z-score passes OUTLIER_Z (module doc);
    all of ``x`` when its median absolute deviation is 0 (no scale to judge by)."""
    if x.size == 0:
        return x
    mid = float(np.median(x))
    robust_sd = MAD_SCALE * float(np.median(np.abs(x - mid)))
    if robust_sd <= 0.0:
        return x
    return x[np.abs(x - mid) <= OUTLIER_Z * robust_sd]


def noise_limit(values: Sequence[float], metric: str) -> float | None:
    """The noise limit (module doc) of ``metric`` from the values of its earlier runs
    (in the metric's unit), or None with fewer than MIN_NOISE_RUNS usable values (finite,
    positive for a latency or rate, not an outlier)."""
    arr = np.asarray(values, dtype=np.float64)
    arr = arr[np.isfinite(arr)]
    if metric not in ABSOLUTE_METRICS:
        arr = without_outliers(np.log(arr[arr > 0]))
    if arr.size < MIN_NOISE_RUNS:
        return None
    spread = float(np.std(arr, ddof=1))
    width = t_quantile(NOISE_QUANTILE, int(arr.size) - 1) * math.sqrt(2.0) * spread
    if metric in ABSOLUTE_METRICS:
        return width
    if metric.startswith("decode_tps"):
        return 1.0 - math.exp(-width)
    return math.expm1(width)


def noise_threshold(base: Threshold, values: Sequence[float]) -> Threshold:
    """``base`` widened to the noise limit of ``values`` when that is larger (source
    ``"noise"``); ``base`` itself otherwise or without enough values."""
    limit = noise_limit(values, base.metric)
    if limit is None or not math.isfinite(limit) or limit <= base.limit:
        return base
    return replace(base, limit=limit, source="noise")


def segment_before(entries: Sequence[RunEntry], current: RunInfo, folder: Path) -> list[RunEntry]:
    """The earlier runs of ``current``'s segment (module doc), oldest first, without the
    ones whose own check regressed. ``entries`` in any order; ``folder`` is the
    current run's, left out with everything inside it."""
    started = current.started_datetime
    here = folder.resolve()
    earlier = sorted(
        (
            e
            for e in entries
            if (started is None or e.started < started)
            and e.folder.resolve() != here
            and here not in e.folder.resolve().parents
        ),
        key=lambda e: (e.started, e.key),
    )
    segment: list[RunEntry] = []
    for e in reversed(earlier):
        if run_problem(e.info, current) is not None:
            break
        segment.append(e)
    return [e for e in reversed(segment) if e.checked != "regressed"]


def as_judged(folder: Path) -> dict[SeriesKey, float | None]:
    """The series whose value the run's own check replaced (module doc): the
    re-measured value, or None for a series it found inconclusive because the client
    was overloaded. Empty without a readable comparison.json (advice, not data)."""
    try:
        doc = read_json(folder / COMPARISON_FILE)
    except RunFolderError:
        return {}
    if not isinstance(doc, dict) or doc.get("kind") != "tokrate-comparison":
        return {}
    out: dict[SeriesKey, float | None] = {}
    for row in doc.get("results") or ():
        if not isinstance(row, dict):
            continue
        key = (
            str(row.get("endpoint")),
            str(row.get("model")),
            str(row.get("scenario")),
            str(row.get("metric")),
        )
        confirmation = row.get("confirmation")
        if isinstance(confirmation, dict) and isinstance(confirmation.get("current"), int | float):
            out[key] = float(confirmation["current"])
        elif row.get("verdict") == "inconclusive" and str(row.get("reason", "")).startswith(
            OVERLOAD_PREFIX
        ):
            out[key] = None
    return out


def value_as_judged(
    judged: Mapping[SeriesKey, float | None], series: SeriesKey, value: float
) -> float | None:
    """The value of ``series`` that counts in the spread (module doc): ``value`` as
    measured unless ``judged`` (:func:`as_judged` of its run) replaced it."""
    return judged.get(series, value)


def _values(points: pl.DataFrame, runs: Sequence[RunEntry]) -> dict[SeriesKey, list[float]]:
    """Per series, the values of ``runs`` as their checks judged them (oldest first),
    newest NOISE_WINDOW kept."""
    order = {e.key: i for i, e in enumerate(runs)}
    if not order:
        return {}
    judged = {e.key: as_judged(e.folder) for e in runs}
    keep = points.filter(pl.col("folder").is_in(list(order)))
    keep = keep.with_columns(
        pl.col("folder").replace_strict(order, return_dtype=pl.Int64).alias("_order")
    ).sort("_order")
    out: dict[SeriesKey, list[float]] = {}
    for key, g in keep.group_by(["endpoint", "model", "scenario", "metric"], maintain_order=True):
        series = (str(key[0]), str(key[1]), str(key[2]), str(key[3]))
        values = (
            value_as_judged(judged[str(folder)], series, float(value))
            for folder, value in zip(g["folder"], g["value"], strict=True)
        )
        out[series] = [v for v in values if v is not None][-NOISE_WINDOW:]
    return out


def fitted_set(
    base: ThresholdSet,
    values: Mapping[SeriesKey, Sequence[float]],
    scenarios_ok: Mapping[str, bool] | None = None,
) -> tuple[ThresholdSet, tuple[int, int], int]:
    """``base`` with a per-series threshold for every series whose earlier values give
    a noise limit above its threshold; also (fewest, most) runs over the series and
    how many series were widened."""
    per_series = dict(base.per_series)
    counts: list[int] = []
    widened_count = 0
    for key, vals in values.items():
        if scenarios_ok is not None and not scenarios_ok.get(key[2], True):
            continue
        metric = key[3]
        if metric in RUN_METRICS or not any(t.metric == metric for t in base.metrics):
            continue
        counts.append(len(vals))
        t = base.for_series(*key)
        widened = noise_threshold(t, vals)
        if widened is not t:
            per_series[key] = widened
            widened_count += 1
    runs = (min(counts), max(counts)) if counts else (0, 0)
    return ThresholdSet(base.metrics, per_series), runs, widened_count


def fit_thresholds(
    history: Path | str, current_dir: Path | str, base: ThresholdSet
) -> tuple[ThresholdSet, NoiseSource]:
    """``base`` fitted to the noise recorded under ``history`` for the run in
    ``current_dir`` (module doc). Reads run.json, summary.json and comparison.json of
    every run folder there (records only where a summary is missing). Raises
    RunFolderError when ``current_dir`` is not a readable run folder."""
    root = Path(history)
    current = load_run_info(current_dir)
    metrics = [t.metric for t in base.metrics if t.metric not in RUN_METRICS]
    points, entries, _ = read_points(root, metrics)
    runs = segment_before(list(entries.values()), current, Path(current_dir))
    # A scenario whose definition changed (another concurrency under the same name)
    # is a new series: its earlier values do not count.
    def_ok: dict[str, bool] = {}
    for s in current.scenarios:
        earlier = (e.info.scenario(s.name) for e in runs)
        def_ok[s.name] = all(x is None or x.definition == s.definition for x in earlier)
    fitted, (lo, hi), widened = fitted_set(base, _values(points, runs), def_ok)
    return fitted, NoiseSource(str(root), lo, hi, FALLBACK, widened)
