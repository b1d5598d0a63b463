"""Run history: every stored run under a folder as trend points, one history per
benchmark, each point with the band the nightly gate judges it by and compare's
verdict.

Reading is :func:`tokrate.analysis.points.read_points` (run.json and summary.json per
run folder; unreadable or incomplete runs are skipped with a one-line warning).

**Benchmarks.** Runs are grouped by the fingerprint of their benchmark (run.json
``benchmark``: load settings, scenario levels, prompts, targets, client settings;
:class:`tokrate.runfolder.run_info.BenchmarkInfo`): each benchmark is a history of its
own, numbered in the order of its first run (``segment``; ``segment_reason`` on the
first point of each later one says how it differs from the one before), and the pages
draw one panel set per benchmark. A benchmark with a single run has no trend: it is
listed among the runs left out, with why, and not drawn. So a default ``tokrate run``
into a nightly folder changes nothing for the nightly series.

Per series (endpoint, model, scenario, metric), in time order (run.json ``started_at``),
history computes what ``tokrate run --baseline latest-good`` decided, or would have
decided, at every point:

- **reference**: the benchmark's recent good nights before it
  (:func:`tokrate.analysis.reference.select_reference`: since the last acceptance, the
  newest 10 good nights with a healthy client). A night's own check says which groups
  it flagged; for a night never checked, history's own verdicts of it do. ``vs_run``
  names the newest reference night, ``baseline`` is the reference value: the median
  of the reference nights' values (those with enough samples for the statistic), a
  rate over their pooled requests. The benchmark's first run has none.
- **threshold**: the configured threshold, widened to the noise of the benchmark's
  earlier healthy nights (:mod:`tokrate.analysis.noise`, the same functions: the
  newest ``window`` of them, against a reference of that many nights).
- **band**: the values compare would not call a change against that reference with
  that threshold: ``[b / (1 + L), b x (1 + L)]`` for a latency (L the threshold),
  ``[b x (1 - L), b / (1 - L)]`` for tokens/s, ``b ± L`` for a rate, at least the
  threshold's floor either side of b, never below 0.
- **verdict**: compare's verdict of the row against that reference
  (:func:`tokrate.analysis.compare.compare_loaded`, with the run's confirmation
  re-measurement where it has one), computed for every point outside its band; a
  point inside its band is ``unchanged`` (compare: "within" its threshold) without
  resampling.
- **outside** (``change`` holds its verdict): the points the pages mark, exactly those
  outside their band: ▼ regressed, ▲ improved, ◆ outside but not a verdict
  (not significant, inconclusive, or not confirmed by the re-measurement).

The prompt-cache hit rate's band centre is the requests-weighted mean of the nights'
shares (compare pools their tokens), so near the band's edge its mark may differ from
compare's verdict; every other metric's band is compare's own reference value.

Values are in the metric's unit: seconds for latencies, tok/s, rate (0..1).
The pages (``tokrate.report.history_pages.build_history``) only render a History.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Final

import numpy as np
import polars as pl

from tokrate.analysis.comparability import benchmark_difference
from tokrate.analysis.compare import (
    Baseline,
    better_limit,
    compare_loaded,
    load_confirmation,
)
from tokrate.analysis.early_stopping import samples_needed
from tokrate.analysis.health import unhealthy_scenario
from tokrate.analysis.metrics import analysed
from tokrate.analysis.noise import NOISE_WINDOW, noise_threshold, series_noise
from tokrate.analysis.points import RunEntry, read_points
from tokrate.analysis.reference import Reference, select_reference
from tokrate.errors import UsageError
from tokrate.fileio import path_is_dir
from tokrate.runfolder.comparison import CompareSettings, MetricResult
from tokrate.runfolder.loaded_run import LoadedRun, load_run
from tokrate.spec.thresholds import (
    ABSOLUTE_METRICS,
    DEFAULT_THRESHOLDS,
    METRICS,
    RUN_METRICS,
    Threshold,
    ThresholdSet,
)

__all__ = ["DEFAULT_HISTORY_METRICS", "BenchmarkHistory", "History", "band", "load_history"]

DEFAULT_HISTORY_METRICS: Final[tuple[str, ...]] = tuple(t.metric for t in DEFAULT_THRESHOLDS)

_KEYS: Final = ["endpoint", "model", "scenario", "metric"]
_EXTRA_SCHEMA: Final[dict[str, Any]] = {
    "benchmark": pl.String,
    "segment": pl.Int64,
    "segment_reason": pl.String,
    "vs_run": pl.String,
    "baseline": pl.Float64,
    "reference_nights": pl.Int64,
    "threshold": pl.Float64,
    "threshold_source": pl.String,
    "band_low": pl.Float64,
    "band_high": pl.Float64,
    "verdict": pl.String,
    "outside": pl.Boolean,
}

Group = tuple[str, str, str]


@dataclass(frozen=True, slots=True)
class BenchmarkHistory:
    """One benchmark of the folder: its number (``segment`` in the points), fingerprint,
    a description of what it measures, its runs and whether the pages draw it (a
    benchmark with one run has no trend)."""

    number: int
    fingerprint: str
    description: str
    runs: int
    drawn: bool


@dataclass(frozen=True, slots=True)
class History:
    """Every point of every series, with its benchmark, band and verdict (module doc).

    ``points`` columns: run_id, run_name (label or id), folder, started_at (UTC
    datetime), endpoint, model, scenario, metric, value, n (samples behind the value),
    benchmark (fingerprint), segment (the benchmark's number), segment_reason (on the
    first point of a later benchmark), vs_run (the newest reference night's run id),
    baseline (the reference value), reference_nights, threshold (the limit judged by)
    and threshold_source, band_low/band_high (null for the benchmark's first run),
    verdict (compare's, against the reference), outside (the value lies outside its
    band) and change (the verdict of an outside point, else null). ``benchmarks``
    lists the folder's benchmarks; ``left_out`` (run, why) the runs that are not a
    trend point or not a reference (skipped folders are in ``warnings``).
    """

    root: str
    points: pl.DataFrame
    runs: int
    warnings: tuple[str, ...]
    window: int
    thresholds: tuple[Threshold, ...]
    benchmarks: tuple[BenchmarkHistory, ...] = ()
    left_out: tuple[tuple[str, str], ...] = ()

    @property
    def changes(self) -> pl.DataFrame:
        """The marked points: those outside their band."""
        return self.points.filter(pl.col("outside"))

    @property
    def segment_starts(self) -> pl.DataFrame:
        """The first point of every benchmark after the first, with its reason."""
        return self.points.filter(pl.col("segment_reason").is_not_null())


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


class _Judge:
    """compare_loaded for a (reference, run, group) with the point's threshold; runs
    are loaded lazily and a few kept (history reads records only for points outside
    their band)."""

    def __init__(self, settings: CompareSettings) -> None:
        self.settings = settings
        self._runs: dict[str, tuple[LoadedRun, pl.DataFrame]] = {}
        self._confirms: dict[str, LoadedRun | None] = {}
        self._done: dict[tuple[tuple[str, ...], str, Group, Threshold], MetricResult | None] = {}

    def _load(self, e: RunEntry) -> tuple[LoadedRun, pl.DataFrame]:
        """The run and its analysed records (computed once: the same nights are the
        reference of many points)."""
        if e.key not in self._runs:
            if len(self._runs) > 24:
                self._runs.clear()
            run = load_run(e.folder)
            self._runs[e.key] = (run, analysed(run.records))
        return self._runs[e.key]

    def row(
        self, nights: Sequence[RunEntry], cur: RunEntry, group: Group, t: Threshold
    ) -> MetricResult | None:
        key = (tuple(e.key for e in nights), cur.key, group, t)
        if key not in self._done:
            if cur.key not in self._confirms:
                self._confirms[cur.key] = load_confirmation(cur.folder)
            loaded = [self._load(e) for e in nights]
            base = Baseline(
                tuple(run for run, _ in loaded),
                window=len(nights),
                frames=tuple(frame for _, frame in loaded),
            )
            run, frame = self._load(cur)
            comparison = compare_loaded(
                base,
                run,
                ThresholdSet((t,)),
                settings=self.settings,
                only={group},
                confirm=self._confirms[cur.key],
                current_frame=frame,
            )
            self._done[key] = comparison.result(*group, t.metric)
        return self._done[key]


def _reference_value(
    values: Mapping[str, tuple[float, int]], nights: Sequence[RunEntry], metric: str, need: int
) -> float | None:
    """compare's reference value (module doc) from the nights' points: (value, n) per
    night key."""
    got = [values[e.key] for e in nights if e.key in values]
    if not got:
        return None
    if metric in ABSOLUTE_METRICS:
        total = sum(n for _, n in got)
        return sum(v * n for v, n in got) / total if total else None
    enough = [v for v, n in got if n >= need] or [max(got, key=lambda vn: vn[1])[0]]
    return float(np.median(enough))


@dataclass(slots=True)
class _Benchmark:
    """One benchmark's state while its runs are walked in time order."""

    number: int
    reason: str | None
    runs: list[RunEntry] = field(default_factory=list)
    #: Per series, (night key -> (value, n)) of the runs so far.
    values: dict[tuple[str, str, str, str], dict[str, tuple[float, int]]] = field(
        default_factory=dict
    )
    #: Per series, the values of the healthy nights so far (time order): the noise fit.
    healthy: dict[tuple[str, str, str, str], list[float]] = field(default_factory=dict)
    #: Groups history itself found regressed, for nights their own check never judged.
    flags: dict[str, set[Group]] = field(default_factory=dict)


def _walk(
    points: pl.DataFrame,
    entries: Mapping[str, RunEntry],
    ths: Mapping[str, Threshold],
    window: int,
    settings: CompareSettings,
) -> tuple[pl.DataFrame, list[_Benchmark]]:
    """Benchmark, reference, threshold, band and verdict of every point (module doc)."""
    judge = _Judge(settings)
    ordered = sorted(entries.values(), key=lambda e: (e.started, e.key))
    benchmarks: dict[str, _Benchmark] = {}
    last_entry: RunEntry | None = None
    by_run = points.partition_by("folder", as_dict=True)
    extra: list[tuple[Any, ...]] = []
    for e in ordered:
        fp = e.info.fingerprint
        if fp not in benchmarks:
            reason = None
            if last_entry is not None:
                reason = benchmark_difference(last_entry.info, e.info)
            benchmarks[fp] = _Benchmark(len(benchmarks), reason)
        b = benchmarks[fp]
        rows = by_run.get((e.key,))
        if rows is not None:
            extra += _judge_run(b, e, rows, ths, window, settings, judge)
        b.runs.append(e)
        last_entry = e
    schema = {"folder": pl.String, **{k: pl.String for k in _KEYS}, **_EXTRA_SCHEMA}
    frame = pl.DataFrame(extra, schema=schema, orient="row")
    joined = points.join(frame, on=["folder", *_KEYS], how="left").with_columns(
        pl.when(pl.col("outside")).then(pl.col("verdict")).alias("change")
    )
    return joined, list(benchmarks.values())


def _judge_run(
    b: _Benchmark,
    e: RunEntry,
    rows: pl.DataFrame,
    ths: Mapping[str, Threshold],
    window: int,
    settings: CompareSettings,
    judge: _Judge,
) -> list[tuple[Any, ...]]:
    """The points of one run ``e`` of benchmark ``b`` (module doc), in the schema of
    _EXTRA_SCHEMA after folder and the series keys; updates ``b`` with the run."""

    def flagged(night: RunEntry) -> frozenset[Group]:
        if night.checked is not None:
            return night.flagged
        return frozenset(b.flags.get(night.key, ()))

    series_rows = list(rows.iter_rows(named=True))
    groups = sorted({(r["endpoint"], r["model"], r["scenario"]) for r in series_rows})
    reference: Reference | None = None
    if b.runs:
        reference = select_reference(b.runs, e.started, groups, flagged)
    first = not b.runs
    out: list[tuple[Any, ...]] = []
    for row in series_rows:
        key = (row["endpoint"], row["model"], row["scenario"], row["metric"])
        group: Group = key[:3]
        value, n = float(row["value"]), int(row["n"] or 0)
        ids = (row["folder"], *key)
        head = (e.info.fingerprint, b.number, b.reason if first else None)
        ref = None if reference is None else reference.groups.get(group)
        t = ths.get(row["metric"])
        earlier = b.values.get(key, {})
        if ref is None:
            out.append((*ids, *head, *(None,) * 8, False))
        else:
            need = samples_needed(row["metric"], settings.min_samples, settings.tail_confidence)
            centre = _reference_value(earlier, ref.nights, row["metric"], need)
            vs = ref.nights[-1].info.run_id
            if t is None or centre is None:
                out.append((*ids, *head, vs, centre, len(ref.nights), *(None,) * 5, False))
            else:
                noise = series_noise(
                    b.healthy.get(key, []), row["metric"], len(ref.nights), window=window
                )
                fitted = noise_threshold(t, noise)
                low, high = band(centre, fitted)
                outside = not low <= value <= high
                verdict = "unchanged"
                most = max((earlier[x.key][1] for x in ref.nights if x.key in earlier), default=0)
                if outside and min(n, most) < need:
                    verdict = "inconclusive"  # compare's own rule: too few samples
                elif outside:
                    found = judge.row(ref.nights, e, group, fitted)
                    verdict = "not_comparable" if found is None else found.verdict
                    if found is not None and (
                        found.verdict == "regressed" or found.confirmation is not None
                    ):
                        b.flags.setdefault(e.key, set()).add(group)
                elif n < need:
                    verdict = "inconclusive"
                judged = (vs, centre, len(ref.nights), fitted.limit, fitted.source)
                out.append((*ids, *head, *judged, low, high, verdict, outside))
        b.values.setdefault(key, {})[e.key] = (value, n)
        if unhealthy_scenario(e.info, key[2]) is None:
            b.healthy.setdefault(key, []).append(value)
    return out


def _left_out(benchmarks: Sequence[_Benchmark]) -> list[tuple[str, str]]:
    """The runs that are no trend point (their benchmark has one run) or no reference
    for some scenario (their client was unhealthy there), with why."""
    out: list[tuple[str, str]] = []
    for b in benchmarks:
        if len(b.runs) == 1:
            only = b.runs[0]
            out.append(
                (
                    only.info.name,
                    f"the only run of its benchmark ({only.info.fingerprint}:"
                    f" {only.info.benchmark_info.describe()}): no trend to draw",
                )
            )
            continue
        for e in b.runs:
            for s in e.info.scenarios:
                why = unhealthy_scenario(e.info, s.name)
                if why is not None:
                    out.append(
                        (
                            e.info.name,
                            f"{s.name}: no reference and no noise-fit night, since {why}",
                        )
                    )
    return out


def load_history(
    root: Path | str,
    *,
    models: Iterable[str] = (),
    metrics: Iterable[str] = (),
    window: int = NOISE_WINDOW,
    thresholds: Sequence[Threshold] = DEFAULT_THRESHOLDS,
    settings: CompareSettings | None = None,
) -> History:
    """Read every run folder under ``root``: benchmarks, bands and verdicts (module doc).

    ``models`` keeps only those model names (all when empty); ``metrics`` defaults to
    DEFAULT_HISTORY_METRICS; ``window``: the earlier nights a noise fit uses (newest).
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
    walked, benchmarks = _walk(points, entries, judged, window, s)
    described = tuple(
        BenchmarkHistory(
            b.number,
            b.runs[0].info.fingerprint,
            b.runs[0].info.benchmark_info.describe(),
            len(b.runs),
            len(b.runs) > 1,
        )
        for b in benchmarks
        if b.runs
    )
    return History(
        root=str(root),
        points=walked.sort(["started_at", "folder", *_KEYS]),
        runs=len(entries),
        warnings=tuple(warnings),
        window=window,
        thresholds=tuple(thresholds),
        benchmarks=described,
        left_out=tuple(_left_out(benchmarks)),
    )
