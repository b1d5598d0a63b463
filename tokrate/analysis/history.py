"""Run history: every stored run under a folder as trend points, with change markers
that are compare's verdicts and a noise band fitted to the run-to-run spread.

``load_history`` reads every run folder under a directory (any depth) through the
store (:func:`tokrate.runfolder.store.load_run_info`: run.json and summary.json, one small file
each, so hundreds of runs load in a few seconds; a run without a readable summary is
read from its records). Folders it cannot read, and runs that did not complete, are
skipped with a one-line warning naming the folder; it never measures.

Per series (endpoint, model, scenario, metric), in time order:

- ``change`` is the verdict of :func:`tokrate.analysis.compare.compare_loaded` between the run
  that last had the series and this run — the same functions, thresholds and
  minimum-sample rule as ``tokrate compare``, so history marks a night exactly when
  ``tokrate compare previous tonight`` says "regressed" or "improved". (Only pairs whose
  change passes its threshold are resampled; any other pair is "unchanged" for compare
  too.)
- the *noise band* is the median of the previous ``window`` runs ± the larger of the
  metric's floor and :data:`NOISE_SIGMAS` standard deviations of those runs (at least
  3 of them): what two runs of an unchanged endpoint scatter over. The same spread,
  relative, is what :func:`noise_thresholds` turns into per-series thresholds for
  ``compare --thresholds-from-history`` and ``run --baseline``.

Values are in the metric's unit: seconds for latencies, tok/s, rate (0..1).
The pages (``tokrate.report.history_pages.build_history``) only render a History.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path
from typing import Any, Final

import polars as pl

from tokrate.analysis.compare import CompareSettings, compare_loaded
from tokrate.analysis.metrics import analysed
from tokrate.analysis.stats import sample_stat
from tokrate.errors import RunFolderError, UsageError
from tokrate.fileio import path_is_dir
from tokrate.runfolder.run_info import RunInfo
from tokrate.runfolder.store import LoadedRun, load_run, load_run_info, load_summary, run_folders
from tokrate.runfolder.summary import SUMMARY_SCHEMA_VERSION, Summary
from tokrate.spec.thresholds import (
    DEFAULT_THRESHOLDS,
    METRICS,
    RUN_METRICS,
    SERIES,
    SeriesKey,
    Threshold,
    ThresholdSet,
    metric_column,
)

__all__ = [
    "DEFAULT_HISTORY_METRICS",
    "NOISE_SIGMAS",
    "History",
    "load_history",
    "noise_thresholds",
]

#: Width of the noise band (and of noise-fitted thresholds), in standard deviations
#: of the previous runs.
NOISE_SIGMAS: Final = 3.0
#: Runs a noise estimate needs (fewer: no band, no fitted threshold).
MIN_NOISE_RUNS: Final = 3

DEFAULT_HISTORY_METRICS: Final[tuple[str, ...]] = tuple(t.metric for t in DEFAULT_THRESHOLDS)

_POINT_SCHEMA: Final[dict[str, Any]] = {
    "run_id": pl.String,
    "run_name": pl.String,
    "folder": pl.String,
    "started_at": pl.Datetime("us", "UTC"),
    "endpoint": pl.String,
    "model": pl.String,
    "scenario": pl.String,
    "metric": pl.String,
    "value": pl.Float64,
    "n": pl.Int64,
}


@dataclass(frozen=True, slots=True)
class History:
    """Every point of every series, with its noise band and change verdict.

    ``points`` columns: run_id, run_name (label or id), folder, started_at (UTC
    datetime), endpoint, model, scenario, metric, value, n (samples behind the value),
    baseline (median of the previous ``window`` runs), band_low/band_high (null until
    MIN_NOISE_RUNS previous runs), change ("regressed" | "improved" | null: compare's
    verdict against the series' previous run), vs_run (that run's id).
    """

    root: str
    points: pl.DataFrame
    runs: int
    warnings: tuple[str, ...]
    window: int
    thresholds: tuple[Threshold, ...]

    @property
    def changes(self) -> pl.DataFrame:
        return self.points.filter(pl.col("change").is_not_null())


# --- reading -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Run:
    folder: Path
    info: RunInfo
    started: datetime


def _error_rate(ok: int, error: int) -> float | None:
    return error / (ok + error) if ok + error else None


def _from_summary(summary: Summary, metrics: Sequence[str]) -> list[tuple[Any, ...]]:
    rows: list[tuple[Any, ...]] = []
    for g in summary.groups:
        for metric in metrics:
            if metric in RUN_METRICS:
                continue  # a capacity search is no series of requests
            if metric == "error_rate":
                value = _error_rate(g.counts.ok, g.counts.error)
                n = g.counts.ok + g.counts.error
            else:
                series, stat = metric.rsplit("_", 1)
                dist = g.distribution(SERIES[series][0])
                value, n = dist.stat(stat), dist.n
            rows.append((g.endpoint, g.model, g.scenario, metric, value, n))
    return rows


def _from_records(run: LoadedRun, metrics: Sequence[str]) -> list[tuple[Any, ...]]:
    """The same values from the records, computed as compare computes them."""
    rows: list[tuple[Any, ...]] = []
    frame = analysed(run.records)
    if frame.height == 0:
        return rows
    for key, g in frame.partition_by(["endpoint", "model", "scenario"], as_dict=True).items():
        endpoint, model, scenario = (str(k) for k in key)
        for metric in metrics:
            if metric in RUN_METRICS:
                continue  # a capacity search is no series of requests
            if metric == "error_rate":
                ok = int((g["status"] == "ok").sum())
                err = int((g["status"] == "error").sum())
                rows.append((endpoint, model, scenario, metric, _error_rate(ok, err), ok + err))
                continue
            column, q = metric_column(metric)
            values = g.filter((pl.col("status") == "ok") & pl.col(column).is_not_null())[column]
            arr = values.to_numpy().astype(float)
            value = float(sample_stat(arr, q)) if arr.size else None
            rows.append((endpoint, model, scenario, metric, value, int(arr.size)))
    return rows


def _read_folder(
    folder: Path, metrics: Sequence[str], warnings: list[str]
) -> tuple[_Run, list[tuple[Any, ...]]] | None:
    """(run, rows) of one run folder, or None (with a one-line warning)."""
    try:
        info = load_run_info(folder)
    except RunFolderError as err:
        warnings.append(f"skipping {folder}: {_reason(err, folder)}")
        return None
    if not info.complete:
        # A partial run's percentiles are not those of the benchmark; as a trend point
        # it would only draw false markers.
        warnings.append(f"skipping {folder}: run status is {info.status!r}, not 'complete'")
        return None
    started = info.started_datetime
    if started is None:
        warnings.append(f"skipping {folder}: run.json has no valid started_at")
        return None
    run = _Run(folder, info, started)
    summary: Summary | None = None
    try:
        summary = load_summary(folder)
    except RunFolderError as err:
        warnings.append(f"{err}; using records instead")
    # An older summary.json counted buffered streams in the per-token figures: read
    # its records instead, so every point follows today's definition (and compare's).
    if summary is not None and summary.schema_version == SUMMARY_SCHEMA_VERSION:
        return run, _from_summary(summary, metrics)
    try:
        return run, _from_records(load_run(folder), metrics)
    except RunFolderError as err:
        if summary is not None:
            return run, _from_summary(summary, metrics)
        warnings.append(f"skipping {folder}: {_reason(err, folder)}")
        return None


def _reason(err: RunFolderError, folder: Path) -> str:
    """The error without the folder it starts with (the warning names the folder)."""
    text = str(err)
    prefix = f"{folder}/"
    return text[len(prefix) :] if text.startswith(prefix) else text


# --- noise -----------------------------------------------------------------------------


def _with_bands(points: pl.DataFrame, window: int, floors: dict[str, float]) -> pl.DataFrame:
    """Add baseline (rolling median of the previous ``window`` runs) and the noise band
    (± max(floor, NOISE_SIGMAS x their standard deviation)), per series."""
    keys = ["endpoint", "model", "scenario", "metric"]
    min_periods = min(MIN_NOISE_RUNS, window)
    previous = pl.col("value").shift(1)
    out = points.sort([*keys, "started_at", "run_id"]).with_columns(
        previous.rolling_median(window_size=window, min_samples=min_periods)
        .over(keys)
        .alias("baseline"),
        previous.rolling_std(window_size=window, min_samples=min_periods)
        .over(keys)
        .alias("_spread"),
    )
    floor = pl.col("metric").replace_strict(floors, default=0.0, return_dtype=pl.Float64)
    half = pl.max_horizontal(floor, NOISE_SIGMAS * pl.col("_spread").fill_null(0.0))
    has_band = pl.col("baseline").is_not_null()
    return out.with_columns(
        pl.when(has_band).then(pl.col("baseline") - half).alias("band_low"),
        pl.when(has_band).then(pl.col("baseline") + half).alias("band_high"),
    ).drop("_spread")


def noise_thresholds(history: History, base: Sequence[Threshold] | None = None) -> ThresholdSet:
    """Per-series thresholds fitted to the run-to-run spread of the newest ``window``
    runs of each series: limit = NOISE_SIGMAS x their standard deviation, relative to
    their median (absolute for error_rate), never below the metric's floor; a series
    with fewer than MIN_NOISE_RUNS runs keeps ``base``'s threshold. Every metric of
    ``base`` (default: the history's thresholds) is judged."""
    metrics = tuple(base) if base is not None else history.thresholds
    by_metric = {t.metric: t for t in metrics}
    per_series: dict[SeriesKey, Threshold] = {}
    keys = ["endpoint", "model", "scenario", "metric"]
    for key, g in history.points.sort("started_at").group_by(keys, maintain_order=True):
        endpoint, model, scenario, metric = (str(k) for k in key)
        t = by_metric.get(metric)
        values = g["value"].drop_nulls().tail(history.window)
        if t is None or values.len() < MIN_NOISE_RUNS:
            continue
        spread = float(values.cast(pl.Float64).std() or 0.0)  # type: ignore[arg-type]
        centre = float(values.cast(pl.Float64).median() or 0.0)  # type: ignore[arg-type]
        if metric == "error_rate":
            limit = NOISE_SIGMAS * spread
        elif centre > 0:
            limit = NOISE_SIGMAS * spread / centre
        else:
            continue
        if not math.isfinite(limit):
            continue
        per_series[(endpoint, model, scenario, metric)] = replace(t, limit=limit, source="noise")
    return ThresholdSet(metrics, per_series)


# --- change markers ----------------------------------------------------------------------


def _passes(prev: float, cur: float, t: Threshold) -> bool:
    """Whether compare would need more than "within threshold" for this change."""
    if t.metric == "error_rate":
        change = cur - prev
    elif prev > 0:
        change = cur / prev - 1.0
    else:
        return True  # compare decides (baseline value 0)
    return abs(change) > t.limit and abs(cur - prev) > t.floor


def _verdicts(
    points: pl.DataFrame, runs: dict[str, _Run], ths: ThresholdSet, settings: CompareSettings
) -> pl.DataFrame:
    """``change`` and ``vs_run`` per point: compare's verdict against the series'
    previous run, resampling only the pairs whose change passes its threshold."""
    keys = ["endpoint", "model", "scenario", "metric"]
    ordered = points.sort([*keys, "started_at", "run_id"]).with_columns(
        pl.col("run_id").shift(1).over(keys).alias("vs_run"),
        pl.col("value").shift(1).over(keys).alias("_prev"),
        pl.col("n").shift(1).over(keys).alias("_prev_n"),
    )
    wanted: dict[tuple[str, str], set[tuple[str, str, str]]] = {}
    for row in ordered.filter(pl.col("vs_run").is_not_null()).iter_rows(named=True):
        if row["value"] is None or row["_prev"] is None:
            continue
        if min(row["n"], row["_prev_n"]) < settings.min_samples:
            continue  # compare: too few samples, not comparable
        t = ths.for_series(row["endpoint"], row["model"], row["scenario"], row["metric"])
        if _passes(row["_prev"], row["value"], t):
            pair = (row["vs_run"], row["run_id"])
            wanted.setdefault(pair, set()).add((row["endpoint"], row["model"], row["scenario"]))
    marks: list[tuple[str, str, str, str, str, str]] = []
    cache: dict[str, LoadedRun] = {}

    def loaded(run_id: str) -> LoadedRun:
        if run_id not in cache:
            if len(cache) > 4:
                cache.clear()
            cache[run_id] = load_run(runs[run_id].folder)
        return cache[run_id]

    for (prev_id, cur_id), groups in sorted(wanted.items(), key=lambda kv: kv[0][1]):
        comparison = compare_loaded(
            loaded(prev_id), loaded(cur_id), ths, settings=settings, only=groups
        )
        for r in comparison.results:
            if r.verdict in ("regressed", "improved"):
                marks.append((cur_id, r.endpoint, r.model, r.scenario, r.metric, r.verdict))
    mark_frame = pl.DataFrame(
        marks,
        schema={k: pl.String for k in ("run_id", *keys, "change")},
        orient="row",
    )
    return ordered.drop("_prev", "_prev_n").join(
        mark_frame, on=["run_id", *keys], how="left", nulls_equal=True
    )


def load_history(
    root: Path | str,
    *,
    models: Iterable[str] = (),
    metrics: Iterable[str] = (),
    window: int = 10,
    thresholds: Sequence[Threshold] = DEFAULT_THRESHOLDS,
    settings: CompareSettings | None = None,
) -> History:
    """Read every run folder under ``root``; add noise bands and change verdicts.

    ``models`` keeps only those model names (all when empty); ``metrics`` defaults to
    DEFAULT_HISTORY_METRICS. A metric without a threshold gets a line and a band but
    no verdict. Raises UsageError for a missing root, an unknown metric or
    ``window < 1``.
    """
    root = Path(root)
    if not path_is_dir(root):
        raise UsageError(f"{root}: no such directory")
    metric_list = tuple(metrics) or DEFAULT_HISTORY_METRICS
    for m in metric_list:
        if m not in METRICS:
            raise UsageError(f"--metric {m!r}: unknown metric (known: {', '.join(METRICS)})")
    if window < 1:
        raise UsageError(f"--window must be >= 1, got {window}")
    warnings: list[str] = []
    rows: list[tuple[Any, ...]] = []
    runs: dict[str, _Run] = {}
    for folder in run_folders(root):
        got = _read_folder(folder, metric_list, warnings)
        if got is None:
            continue
        run, run_rows = got
        runs[run.info.run_id] = run
        rows.extend(
            (run.info.run_id, run.info.name, str(folder), run.started, *r) for r in run_rows
        )
    points = pl.DataFrame(rows, schema=_POINT_SCHEMA, orient="row").drop_nulls("value")
    model_set = set(models)
    if model_set:
        points = points.filter(pl.col("model").is_in(sorted(model_set)))
    judged = tuple(t for t in thresholds if t.metric in metric_list)
    floors = {t.metric: t.floor for t in thresholds}
    points = _with_bands(points, window, floors)
    s = replace(settings or CompareSettings(), intervals=False)
    points = _verdicts(points, runs, ThresholdSet(judged), s)
    return History(
        root=str(root),
        points=points.sort(["started_at", "run_id", "endpoint", "model", "scenario", "metric"]),
        runs=len(runs),
        warnings=tuple(warnings),
        window=window,
        thresholds=tuple(thresholds),
    )
