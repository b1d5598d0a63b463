"""Run history: every stored run under a folder as trend points, split into segments of
comparable runs, each point with the band compare judges it by and compare's verdict.

Reading is :func:`tokrate.analysis.points.read_points` (run.json and summary.json per
run folder; unreadable or incomplete runs are skipped with a one-line warning).

Per series (endpoint, model, scenario, metric), in time order (run.json ``started_at``):

- **segment**: runs that compare would call not comparable never share a trend line.
  A run starts a new segment when it is not comparable with the run before it
  (:func:`tokrate.analysis.comparability.run_problem`: other load settings, prompts or
  simulator clock) or its scenario of that name is defined otherwise (another
  concurrency or rate); ``segment`` numbers them from 0 and ``segment_reason`` says
  why on the first point of each new one.
- **baseline**: the run compare judges this run against: the baseline its own check
  recorded in comparison.json (``tokrate run --baseline``), when that is an earlier run
  of the same segment; otherwise the latest earlier run of the segment this history
  did not mark regressed and whose client was fit to measure a baseline
  (:func:`tokrate.analysis.health.unfit_baseline`; what ``latest-good`` would have
  been). The first run of a segment has none.
- **threshold**: the one ``tokrate run --baseline`` judges by at that point: the
  configured threshold, widened to the noise of the segment's earlier runs, each
  value as its run's own check judged it (:mod:`tokrate.analysis.noise`, the same
  functions).
- **band**: the values compare would not call a change against that baseline with
  that threshold: ``[b / (1 + L), b x (1 + L)]`` for a latency (L the threshold),
  ``[b x (1 - L), b / (1 - L)]`` for tokens/s, ``b ± L`` for an error rate, at least
  the threshold's floor either side of b, never below 0.
- **verdict**: compare's verdict of the row against that baseline
  (:func:`tokrate.analysis.compare.compare_loaded`, with the run's confirmation
  re-measurement where it has one), computed for every point outside its band; a
  point inside its band is ``unchanged`` (compare: "within" its threshold) without
  resampling.
- **outside** (``change`` holds its verdict): the points the pages mark, exactly those
  outside their band: ▼ regressed, ▲ improved, ◆ outside but not a verdict
  (not significant, inconclusive, or not confirmed by the re-measurement).

Values are in the metric's unit: seconds for latencies, tok/s, rate (0..1).
The pages (``tokrate.report.history_pages.build_history``) only render a History.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Final

import polars as pl

from tokrate.analysis.comparability import run_problem
from tokrate.analysis.compare import better_limit, compare_loaded, load_confirmation, samples_needed
from tokrate.analysis.health import unfit_baseline
from tokrate.analysis.noise import NOISE_WINDOW, as_judged, noise_threshold, value_as_judged
from tokrate.analysis.points import RunEntry, read_points
from tokrate.errors import UsageError
from tokrate.fileio import path_is_dir
from tokrate.runfolder.comparison import CompareSettings
from tokrate.runfolder.loaded_run import LoadedRun, load_run
from tokrate.spec.thresholds import (
    ABSOLUTE_METRICS,
    DEFAULT_THRESHOLDS,
    METRICS,
    RUN_METRICS,
    Threshold,
    ThresholdSet,
)

__all__ = ["DEFAULT_HISTORY_METRICS", "History", "band", "load_history"]

DEFAULT_HISTORY_METRICS: Final[tuple[str, ...]] = tuple(t.metric for t in DEFAULT_THRESHOLDS)

_KEYS: Final = ["endpoint", "model", "scenario", "metric"]
_EXTRA_SCHEMA: Final[dict[str, Any]] = {
    "segment": pl.Int64,
    "segment_reason": pl.String,
    "vs_run": pl.String,
    "baseline": pl.Float64,
    "threshold": pl.Float64,
    "threshold_source": pl.String,
    "band_low": pl.Float64,
    "band_high": pl.Float64,
    "verdict": pl.String,
    "outside": pl.Boolean,
}


@dataclass(frozen=True, slots=True)
class History:
    """Every point of every series, with its segment, band and verdict (module doc).

    ``points`` columns: run_id, run_name (label or id), folder, started_at (UTC
    datetime), endpoint, model, scenario, metric, value, n (samples behind the value),
    segment, segment_reason, vs_run (the baseline's run id), baseline (its value),
    threshold (the limit judged by) and threshold_source, band_low/band_high (null for
    the first run of a segment), verdict (compare's, against vs_run), outside (the
    value lies outside its band) and change (the verdict of an outside point, else
    null).
    """

    root: str
    points: pl.DataFrame
    runs: int
    warnings: tuple[str, ...]
    window: int
    thresholds: tuple[Threshold, ...]

    @property
    def changes(self) -> pl.DataFrame:
        """The marked points: those outside their band."""
        return self.points.filter(pl.col("outside"))

    @property
    def segment_starts(self) -> pl.DataFrame:
        """The first point of every segment after a series' first, with its reason."""
        return self.points.filter(pl.col("segment_reason").is_not_null())


def _run_segments(entries: Sequence[RunEntry]) -> tuple[dict[str, int], dict[int, str]]:
    """Run-level segments in time order: each run's number, and why each segment after
    the first starts (compare's reason against the run before it)."""
    number_of: dict[str, int] = {}
    reasons: dict[int, str] = {}
    previous: RunEntry | None = None
    number = 0
    for e in sorted(entries, key=lambda e: (e.started, e.key)):
        reason = None if previous is None else run_problem(previous.info, e.info)
        if reason is not None:
            number += 1
            reasons[number] = reason
        number_of[e.key] = number
        previous = e
    return number_of, reasons


def band(base: float, t: Threshold) -> tuple[float, float]:
    """The values compare would not call a change against ``base`` with ``t`` (module
    doc): never below 0."""
    if t.metric in ABSOLUTE_METRICS:
        low, high = base - t.limit, base + t.limit
    elif t.direction == "lower_is_better":
        low, high = base / (1.0 + t.limit), base * (1.0 + t.limit)
    else:
        better = better_limit(t)
        low = base * (1.0 - t.limit)
        high = base * (1.0 + better) if math.isfinite(better) else math.inf
    return max(0.0, min(low, base - t.floor)), max(high, base + t.floor)


@dataclass(slots=True)
class _Walk:
    """One series' state while its points are walked in time order: its segment (the
    run-level one and the scenario definition), the segment's runs so far with their
    values, and the ones this walk marked regressed."""

    number: int = -1
    run_segment: int = -1
    definition: Any = None
    runs: list[tuple[RunEntry, float, int]] = field(default_factory=list)
    regressed: set[str] = field(default_factory=set)


class _Judge:
    """compare_loaded for a (baseline, run, group) with the point's threshold; runs are
    loaded lazily and a few kept (history reads records only for points outside their
    band)."""

    def __init__(self, settings: CompareSettings) -> None:
        self.settings = settings
        self._runs: dict[str, LoadedRun] = {}
        self._confirms: dict[str, LoadedRun | None] = {}
        self._done: dict[tuple[str, str, tuple[str, str, str], Threshold], str] = {}

    def _load(self, e: RunEntry) -> LoadedRun:
        if e.key not in self._runs:
            if len(self._runs) > 6:
                self._runs.clear()
            self._runs[e.key] = load_run(e.folder)
        return self._runs[e.key]

    def verdict(
        self, base: RunEntry, cur: RunEntry, group: tuple[str, str, str], t: Threshold
    ) -> str:
        key = (base.key, cur.key, group, t)
        if key not in self._done:
            if cur.key not in self._confirms:
                self._confirms[cur.key] = load_confirmation(cur.folder)
            comparison = compare_loaded(
                self._load(base),
                self._load(cur),
                ThresholdSet((t,)),
                settings=self.settings,
                only={group},
                confirm=self._confirms[cur.key],
            )
            row = comparison.result(*group, t.metric)
            self._done[key] = row.verdict if row is not None else "not_comparable"
        return self._done[key]


def _baseline(
    runs: Sequence[tuple[RunEntry, float, int]], regressed: set[str], cur: RunEntry
) -> tuple[RunEntry, float, int]:
    """The run ``cur`` is judged against (module doc): its recorded baseline when that
    is an earlier run of the segment, else the latest one not marked regressed and fit
    to be a baseline (the first of the segment when none is)."""
    if cur.checked_against is not None:
        for found in reversed(runs):
            if found[0].info.run_id == cur.checked_against:
                return found
    for found in reversed(runs):
        if found[0].key not in regressed and unfit_baseline(found[0].info) is None:
            return found
    return runs[0]


def _walk(
    points: pl.DataFrame,
    entries: Mapping[str, RunEntry],
    ths: Mapping[str, Threshold],
    window: int,
    settings: CompareSettings,
) -> pl.DataFrame:
    """Segment, baseline, threshold, band and verdict of every point (module doc)."""
    run_segment, segment_reasons = _run_segments(list(entries.values()))
    judge = _Judge(settings)
    judged_runs: dict[str, dict[tuple[str, str, str, str], float | None]] = {}

    def judged(e: RunEntry) -> dict[tuple[str, str, str, str], float | None]:
        if e.key not in judged_runs:
            judged_runs[e.key] = as_judged(e.folder)
        return judged_runs[e.key]

    extra: list[tuple[Any, ...]] = []
    ordered = points.sort([*_KEYS, "started_at", "folder"])
    state: dict[tuple[str, str, str, str], _Walk] = {}
    for row in ordered.iter_rows(named=True):
        key = (row["endpoint"], row["model"], row["scenario"], row["metric"])
        ids = (row["folder"], *key)
        e = entries[row["folder"]]
        value, n = float(row["value"]), int(row["n"] or 0)
        walk = state.setdefault(key, _Walk())
        seg = run_segment[e.key]
        scenario = e.info.scenario(row["scenario"])
        definition = None if scenario is None else scenario.definition
        if not walk.runs or seg != walk.run_segment or definition != walk.definition:
            reason = None
            if walk.runs:
                last = walk.runs[-1][0]
                reason = (
                    run_problem(last.info, e.info)
                    or (segment_reasons.get(seg) if seg != walk.run_segment else None)
                    or "different load (scenario definition)"
                )
            walk.number += 1
            walk.run_segment, walk.definition = seg, definition
            walk.runs, walk.regressed = [(e, value, n)], set()
            extra.append((*ids, walk.number, reason, *(None,) * 7, False))
            continue
        base_entry, base_value, base_n = _baseline(walk.runs, walk.regressed, e)
        t = ths.get(row["metric"])
        if t is None:
            extra.append(
                (*ids, walk.number, None, base_entry.info.run_id, base_value, *(None,) * 5, False)
            )
            walk.runs.append((e, value, n))
            continue
        counted = (
            value_as_judged(judged(r), key, v) for r, v, _ in walk.runs if r.checked != "regressed"
        )
        earlier = [v for v in counted if v is not None][-window:]
        fitted = noise_threshold(t, earlier)
        low, high = band(base_value, fitted)
        outside = not low <= value <= high
        need = samples_needed(t.metric, settings.min_samples, settings.tail_confidence)
        verdict = "unchanged" if min(n, base_n) >= need else "inconclusive"
        if outside:
            group = (row["endpoint"], row["model"], row["scenario"])
            verdict = judge.verdict(base_entry, e, group, fitted)
        if verdict == "regressed":
            walk.regressed.add(e.key)
        extra.append(
            (
                *ids,
                walk.number,
                None,
                base_entry.info.run_id,
                base_value,
                fitted.limit,
                fitted.source,
                low,
                high,
                verdict,
                outside,
            )
        )
        walk.runs.append((e, value, n))
    schema = {"folder": pl.String, **{k: pl.String for k in _KEYS}, **_EXTRA_SCHEMA}
    frame = pl.DataFrame(extra, schema=schema, orient="row")
    return ordered.join(frame, on=["folder", *_KEYS], how="left").with_columns(
        pl.when(pl.col("outside")).then(pl.col("verdict")).alias("change")
    )


def load_history(
    root: Path | str,
    *,
    models: Iterable[str] = (),
    metrics: Iterable[str] = (),
    window: int = NOISE_WINDOW,
    thresholds: Sequence[Threshold] = DEFAULT_THRESHOLDS,
    settings: CompareSettings | None = None,
) -> History:
    """Read every run folder under ``root``: segments, bands and verdicts (module doc).

    ``models`` keeps only those model names (all when empty); ``metrics`` defaults to
    DEFAULT_HISTORY_METRICS; ``window``: the earlier runs a noise fit uses (newest).
    A metric without a threshold gets a line but no band and no verdict. Raises
    UsageError for a missing root, an unknown metric or ``window < 2``.
    """
    root = Path(root)
    if not path_is_dir(root):
        raise UsageError(f"{root}: no such directory")
    metric_list = tuple(metrics) or DEFAULT_HISTORY_METRICS
    for m in metric_list:
        if m not in METRICS or m in RUN_METRICS:
            known = ", ".join(x for x in METRICS if x not in RUN_METRICS)
            raise UsageError(f"--metric {m!r}: unknown metric (known: {known})")
    if window < 2:
        raise UsageError(f"--window must be >= 2, got {window}")
    points, entries, warnings = read_points(root, metric_list, models)
    judged = {t.metric: t for t in thresholds if t.metric in metric_list}
    s = replace(settings or CompareSettings(), intervals=False)
    points = _walk(points, entries, judged, window, s)
    return History(
        root=str(root),
        points=points.sort(["started_at", "folder", *_KEYS]),
        runs=len(entries),
        warnings=tuple(warnings),
        window=window,
        thresholds=tuple(thresholds),
    )
