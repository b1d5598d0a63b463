"""Stored runs as points: one value per run and series (endpoint, model, scenario, metric).

What ``tokrate history`` draws and what noise-fitted thresholds are fitted to
(:mod:`tokrate.analysis.noise`). :func:`read_points` reads every run folder under a
directory (any depth; a run's own ``confirm/`` folder is part of that run) through the
store: run.json and summary.json, one small file each, so hundreds of runs load in a
fraction of a second; a run without a readable summary is read from its records, with
the same definitions as compare. Folders it cannot read, and runs that did not
complete, are skipped with a one-line warning naming the folder; it never measures.

Each run also brings what its own baseline check recorded (comparison.json: the verdict
and the baseline it was judged against), so a history can tell a night that regressed
from noise, and judge it against the run it was judged against then.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Final

import polars as pl

from tokrate.analysis.cache_compare import cache_share
from tokrate.analysis.metrics import analysed
from tokrate.analysis.quality_compare import pass_share
from tokrate.analysis.share_compare import ShareCount, error_share
from tokrate.analysis.stats import sample_stat
from tokrate.errors import RunFolderError
from tokrate.runfolder.comparison import COMPARISON_FILE, comparison_from_json
from tokrate.runfolder.files import RunFileRefused, read_json
from tokrate.runfolder.loaded_run import LoadedRun, load_run
from tokrate.runfolder.run_info import RunInfo
from tokrate.runfolder.store import load_run_info, load_summary, read_acceptance, run_folders
from tokrate.runfolder.summary import SUMMARY_SCHEMA_VERSION, Summary
from tokrate.spec.thresholds import ABSOLUTE_METRICS, RUN_METRICS, SERIES, metric_column

__all__ = ["POINT_SCHEMA", "RunEntry", "read_points"]

#: Columns of a points frame (values in the metric's unit: s, tok/s or a rate).
POINT_SCHEMA: Final[dict[str, Any]] = {
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
class RunEntry:
    """One readable, complete run: its folder, run.json, start time, what its own
    baseline check recorded (``checked``: comparison.json's verdict, None when it was
    never checked; ``checked_against``: the run id of the baseline it names;
    ``flagged``: the (endpoint, model, scenario) groups whose first measurement
    regressed, confirmed or not) and ``accepted_at``: when the user accepted its level
    as the benchmark's new normal (accepted.json; None: never)."""

    folder: Path
    info: RunInfo
    started: datetime
    checked: str | None = None
    checked_against: str | None = None
    flagged: frozenset[tuple[str, str, str]] = frozenset()
    accepted_at: datetime | None = None

    @property
    def key(self) -> str:
        """The run's identity in a points frame: its folder."""
        return str(self.folder)


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
            elif metric == "pass_rate":
                value = None if g.quality is None else g.quality.rate
                n = 0 if g.quality is None else g.quality.n
            elif metric == "cache_hit_rate":
                value = None if g.cache is None else g.cache.hit_rate
                n = 0 if g.cache is None else g.cache.n
            else:
                series, stat = metric.rsplit("_", 1)
                dist = g.distribution(SERIES[series][0])
                value, n = dist.stat(stat), dist.n
            rows.append((g.endpoint, g.model, g.scenario, metric, value, n))
    return rows


#: How each share of a group is counted: the same functions compare judges by.
_SHARES: Final[dict[str, Callable[[pl.DataFrame], ShareCount]]] = {
    "error_rate": error_share,
    "pass_rate": pass_share,
    "cache_hit_rate": lambda g: cache_share(g).count,
}


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
            if metric in ABSOLUTE_METRICS:
                share = _SHARES[metric](g)
                rows.append((endpoint, model, scenario, metric, share.rate, share.n))
                continue
            column, q = metric_column(metric)
            values = g.filter((pl.col("status") == "ok") & pl.col(column).is_not_null())[column]
            arr = values.to_numpy().astype(float)
            value = float(sample_stat(arr, q)) if arr.size else None
            rows.append((endpoint, model, scenario, metric, value, int(arr.size)))
    return rows


def _reason(err: RunFolderError, folder: Path) -> str:
    """The error without the folder it starts with (the warning names the folder)."""
    text = str(err)
    prefix = f"{folder}/"
    return text[len(prefix) :] if text.startswith(prefix) else text


def _checked(
    folder: Path,
) -> tuple[str | None, str | None, frozenset[tuple[str, str, str]]]:
    """What the run's own baseline check recorded: (verdict, baseline run id, flagged
    groups). A missing or unreadable comparison.json is "never checked" (it is advice
    here, not data: the run's numbers stand without it)."""
    try:
        doc = read_json(folder / COMPARISON_FILE)
    except RunFolderError:
        return None, None, frozenset()
    if not isinstance(doc, dict) or doc.get("kind") != "tokrate-comparison":
        return None, None, frozenset()
    verdict = doc.get("verdict")
    if verdict == "no_baseline":
        return "no_baseline", None, frozenset()
    try:
        comparison = comparison_from_json(doc, str(folder / COMPARISON_FILE))
    except RunFolderError:
        return None, None, frozenset()
    flagged = frozenset(
        r.group
        for r in comparison.results
        if r.verdict == "regressed" or r.confirmation is not None
    )
    return comparison.verdict, comparison.baseline.run_id or None, flagged


def _accepted(folder: Path, warnings: list[str]) -> datetime | None:
    try:
        acceptance = read_acceptance(folder)
    except RunFolderError as err:
        warnings.append(f"{err}; the run is not counted as accepted")
        return None
    return None if acceptance is None else acceptance.accepted_datetime


def read_run(
    folder: Path, metrics: Sequence[str], warnings: list[str]
) -> tuple[RunEntry, list[tuple[Any, ...]]] | None:
    """(entry, rows) of one run folder, or None (with a one-line warning in
    ``warnings``). Rows are (endpoint, model, scenario, metric, value, n)."""
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
    entry = RunEntry(folder, info, started, *_checked(folder), _accepted(folder, warnings))
    summary: Summary | None = None
    try:
        summary = load_summary(folder)
    except RunFileRefused as err:  # not what tokrate wrote: the run is left out
        warnings.append(f"skipping {folder}: {_reason(err, folder)}")
        return None
    except RunFolderError as err:
        warnings.append(f"{err}; using records instead")
    # An older summary.json counted buffered streams in the per-token figures: read
    # its records instead, so every point follows today's definition (and compare's).
    if summary is not None and summary.schema_version == SUMMARY_SCHEMA_VERSION:
        return entry, _from_summary(summary, metrics)
    try:
        return entry, _from_records(load_run(folder), metrics)
    except RunFolderError as err:
        if summary is not None:
            return entry, _from_summary(summary, metrics)
        warnings.append(f"skipping {folder}: {_reason(err, folder)}")
        return None


def read_points(
    root: Path, metrics: Sequence[str], models: Iterable[str] = ()
) -> tuple[pl.DataFrame, dict[str, RunEntry], list[str]]:
    """Every complete run under ``root``: (points, entries by folder, warnings).

    ``points`` has :data:`POINT_SCHEMA`, one row per run x group x metric with a value,
    sorted by start time; ``models`` keeps only those model names (all when empty)."""
    warnings: list[str] = []
    rows: list[tuple[Any, ...]] = []
    entries: dict[str, RunEntry] = {}
    for folder in run_folders(root):
        got = read_run(folder, metrics, warnings)
        if got is None:
            continue
        entry, run_rows = got
        entries[entry.key] = entry
        info = entry.info
        rows.extend((info.run_id, info.name, entry.key, entry.started, *r) for r in run_rows)
    points = pl.DataFrame(rows, schema=POINT_SCHEMA, orient="row").drop_nulls("value")
    model_set = set(models)
    if model_set:
        points = points.filter(pl.col("model").is_in(sorted(model_set)))
    return points.sort(["started_at", "folder"]), entries, warnings
