"""Regression verdicts: one stored run against a baseline run.

The one set of comparison functions: ``tokrate compare``, ``tokrate run --baseline``,
the report's "runs side by side" and ``tokrate history``'s change markers all call
:func:`compare_loaded`, so the same pair of runs gets the same verdict everywhere.

Targets match by endpoint + model name and scenarios by name. For every metric with a
threshold a row reports the baseline value, the current value, the change, a seeded
95% bootstrap confidence interval of that change, and a verdict:

- ``regressed``: the change is worse than the threshold *and* its interval excludes zero
  (and, where the run was re-measured, the re-measurement regressed too);
- ``improved``: the change is better than the threshold *and* its interval excludes zero;
- ``unchanged``: anything else ("not significant" is an answer);
- ``inconclusive``: the row cannot be judged: too few samples for its statistic (a
  percentile needs MLPerf LoadGen's early-stopping minimum at 99% confidence:
  :func:`tokrate.analysis.early_stopping.samples_needed`, 130 for a p95), or a change past its threshold that an
  overloaded client could have made (:mod:`tokrate.analysis.health`);
- ``not_comparable``: the target or scenario is missing on one side, or the prompts or
  the load differ.

A *confirmation*: ``tokrate run --baseline`` re-measures the scenarios with a regressed
row once, into ``<run>/confirm/`` (a run folder of its own); where that folder exists,
a regressed row stands only when the re-measurement regressed against the same
baseline too (``MetricResult.confirmation``), and groups with a regressed row that
were not re-measured are listed in ``Comparison.unconfirmed``.

Values are computed from the per-request records :func:`tokrate.analysis.metrics.analysed`
keeps (final attempts of measured requests; status ok for latencies), the same rows
that are resampled for the interval, so a value and its interval always agree and
equal summary.json's. Percentiles use linear interpolation. The interval is a circular
block bootstrap in send order with blocks as long as the number of requests in flight
together (:func:`tokrate.analysis.stats.block_bootstrap`); error rates and the pass rate
of checked answers (:mod:`tokrate.analysis.quality_compare`) use Newcombe's interval,
and so does the prompt-cache hit rate (:mod:`tokrate.analysis.cache_compare`).

The result's types and its JSON document (schema history included) live in
:mod:`tokrate.runfolder.comparison` (their one home).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import polars as pl

from tokrate.analysis.cache_compare import compare_cache_hit_rate, has_cached_tokens
from tokrate.analysis.capacity_compare import compare_capacities
from tokrate.analysis.checks import with_verdicts
from tokrate.analysis.comparability import group_problem, run_problem
from tokrate.analysis.early_stopping import ES_QUANTILES, certified_rank, samples_needed
from tokrate.analysis.health import Overload, overload_reason, scenario_overload
from tokrate.analysis.metrics import analysed
from tokrate.analysis.noise import SeriesNoise
from tokrate.analysis.quality_compare import compare_pass_rate, has_checks
from tokrate.analysis.share_compare import compare_shares, error_share
from tokrate.analysis.stats import block_length, relative_change_ci, sample_stat
from tokrate.fileio import path_is_dir
from tokrate.runfolder.comparison import (
    CONFIRM_FOLDER,
    ComparedRun,
    CompareSettings,
    Comparison,
    Confirmation,
    MetricResult,
    NoiseSource,
    ReferenceInfo,
    SeriesGroup,
    Verdict,
)
from tokrate.runfolder.loaded_run import LoadedRun, load_run
from tokrate.spec.thresholds import (
    ABSOLUTE_METRICS,
    RUN_METRICS,
    SeriesKey,
    Threshold,
    ThresholdSet,
    metric_column,
    metric_unit,
)

__all__ = [
    "Baseline",
    "compare_loaded",
    "compare_runs",
    "load_confirmation",
]


def _es(values: np.ndarray, q: float | None) -> float | None:
    """The early-stopping estimate of a tail percentile of ``values`` (None for other
    statistics and below the samples it needs)."""
    if q is None or q not in {tail for _, tail in ES_QUANTILES}:
        return None
    rank = certified_rank(int(values.size), q)
    return None if rank is None else float(np.sort(values)[values.size - rank])


def _in_flight(group: pl.DataFrame) -> float | None:
    """Requests in flight together: the closed-loop concurrency, or for open loop
    rate x median E2E."""
    conc = group["concurrency"].drop_nulls()
    if conc.len():
        return float(conc.max())  # type: ignore[arg-type]
    rate = group["rate_rps"].drop_nulls()
    e2e = group["e2e_s"].drop_nulls()
    if rate.len() and e2e.len():
        return float(rate.max()) * float(e2e.median())  # type: ignore[arg-type]
    return None


def better_limit(t: Threshold) -> float:
    """How much *better* a change must be to count as an improvement, in the orientation
    of :func:`judge` (positive is better): the threshold's ratio the other way, so a
    +10% latency threshold means 1.10x slower or 1.10x faster (-9.1%), and a -5%
    tokens/s threshold -5% or +5.3%. Error rates (absolute): the same difference."""
    if t.metric in ABSOLUTE_METRICS:
        return t.limit
    if t.direction == "lower_is_better":
        return t.limit / (1.0 + t.limit)
    return math.inf if t.limit >= 1.0 else t.limit / (1.0 - t.limit)


def judge(
    change: float, ci: tuple[float, float] | None, abs_change: float, t: Threshold
) -> tuple[Verdict, str]:
    """Verdict from a change expressed so that positive is *worse*; ``ci`` (same
    orientation) is only consulted when the change passes the threshold."""
    if change > t.limit and abs_change > t.floor:
        assert ci is not None
        if ci[0] > 0:
            return "regressed", f"worse than {t.describe()} and the interval excludes 0"
        return "unchanged", "worse than the threshold but not significant"
    if -change > better_limit(t) and abs_change > t.floor:
        assert ci is not None
        if ci[1] < 0:
            return "improved", "better than the threshold and the interval excludes 0"
        return "unchanged", "better than the threshold but not significant"
    return "unchanged", f"within {t.describe()}"


def _passes(change: float, abs_change: float, t: Threshold) -> bool:
    """Whether a change (positive is worse) passes its threshold either way."""
    return abs_change > t.floor and (change > t.limit or -change > better_limit(t))


def _decode_gaps(group: pl.DataFrame) -> float | None:
    tokens = group.filter(pl.col("status") == "ok")["output_tokens"].drop_nulls()
    return float(tokens.median()) - 1.0 if tokens.len() else None  # type: ignore[arg-type]


def _night_values(gb: pl.DataFrame, column: str) -> tuple[pl.DataFrame, np.ndarray]:
    """A night's ok values of ``column`` in send order (wall clock at t0), so that the
    bootstrap's blocks are neighbours in time."""
    ok = gb.filter((pl.col("status") == "ok") & pl.col(column).is_not_null()).sort("started_at")
    return ok, ok[column].to_numpy().astype(float)


def compare_metric(
    nights: pl.DataFrame | Sequence[pl.DataFrame],
    gc: pl.DataFrame,
    t: Threshold,
    s: CompareSettings,
    problem: str | None,
    key: str,
    overloads: tuple[Overload | None, Overload | None] = (None, None),
) -> MetricResult:
    """One row from groups of :func:`tokrate.analysis.metrics.analysed` records: the
    baseline's (one run, or a reference's nights: their statistics' median, each night
    with enough samples; a rate over their pooled requests) and the current run's
    (endpoint/model/scenario/label are filled in by the caller). ``overloads``: the
    baseline's (worst night's) and the current run's client overload in this scenario
    (:func:`tokrate.analysis.health.scenario_overload`)."""
    nights = [nights] if isinstance(nights, pl.DataFrame) else list(nights)
    gb = nights[0] if len(nights) == 1 else pl.concat(nights)
    metric = t.metric
    empty = MetricResult(
        endpoint="",
        model="",
        scenario="",
        metric=metric,
        unit=metric_unit(metric),
        threshold=t.describe(),
        threshold_source=t.source,
        verdict="not_comparable",
        reason=problem or "",
        baseline_runs=len(nights),
    )
    if metric == "error_rate":
        return _compare_error_rate(gb, gc, t, s, problem, empty)
    if metric == "pass_rate":
        return compare_pass_rate(gb, gc, t, s, problem, empty)
    if metric == "cache_hit_rate":
        return compare_cache_hit_rate(gb, gc, t, s, problem, empty)
    column, q = metric_column(metric)
    need = samples_needed(metric, s.min_samples, s.tail_confidence)
    measured = [_night_values(g, column) for g in nights]
    # A night with too few samples for the statistic says nothing about it; a single
    # baseline run is judged (inconclusive) as it is.
    used = [m for m in measured if m[1].size >= need] or [max(measured, key=lambda m: m[1].size)]
    oc, vc = _night_values(gc, column)
    sizes = [int(v.size) for _, v in used]
    n_base = sum(sizes) if len(used) > 1 else sizes[0]
    out = replace(
        empty,
        n_baseline=n_base,
        n_current=int(vc.size),
        baseline=_median_of(float(sample_stat(v, q)) for _, v in used if v.size),
        current=float(sample_stat(vc, q)) if vc.size else None,
        baseline_es=_median_of(x for _, v in used if (x := _es(v, q)) is not None),
        current_es=_es(vc, q),
        baseline_runs=len(used),
    )
    if problem is not None:
        return out
    if min(max(sizes), vc.size) < need:
        return replace(out, verdict="inconclusive", reason=_too_few(metric, n_base, vc.size, need))
    assert out.baseline is not None and out.current is not None
    if out.baseline <= 0:
        return replace(out, verdict="inconclusive", reason="baseline value is 0")
    change = out.current / out.baseline - 1.0
    sign = -1.0 if t.direction == "higher_is_better" else 1.0
    abs_change = abs(out.current - out.baseline)
    if not (s.intervals or _passes(sign * change, abs_change, t)):
        verdict, reason = judge(sign * change, None, abs_change, t)
        return replace(out, change=change, verdict=verdict, reason=reason)
    lo, hi = relative_change_ci(
        [v for _, v in used],
        vc,
        q,
        (
            [block_length(_in_flight(ob), int(v.size)) for ob, v in used],
            block_length(_in_flight(oc), int(vc.size)),
        ),
        confidence=s.confidence,
        resamples=s.resamples,
        seed=s.seed,
        key=f"{key}|{metric}",
    )
    if math.isnan(lo):
        return replace(
            out, change=change, verdict="inconclusive", reason="bootstrap interval undefined"
        )
    worse_ci = (sign * lo, sign * hi) if sign > 0 else (sign * hi, sign * lo)
    verdict, reason = judge(sign * change, worse_ci, abs_change, t)
    if verdict in ("regressed", "improved"):
        overload = overload_reason(metric, out.baseline, out.current, overloads, _decode_gaps(gc))
        if overload is not None:
            verdict, reason = "inconclusive", overload
    return replace(out, change=change, ci=(lo, hi), verdict=verdict, reason=reason)


def _median_of(values: Iterable[float]) -> float | None:
    """The median of ``values`` (one night: its value), None when there are none."""
    kept = sorted(values)
    if not kept:
        return None
    return float(np.median(kept))


def _too_few(metric: str, n_base: int, n_cur: int, need: int) -> str:
    stat = metric.rsplit("_", 1)[-1] if metric != "error_rate" else "an error rate"
    what = f"a {stat}" if stat.startswith("p") else stat if stat != "mean" else "a mean"
    return f"too few samples (baseline {n_base}, current {n_cur}; {what} needs {need})"


def _compare_error_rate(
    gb: pl.DataFrame,
    gc: pl.DataFrame,
    t: Threshold,
    s: CompareSettings,
    problem: str | None,
    empty: MetricResult,
) -> MetricResult:
    """Error rate = error / (ok + error); cancelled requests are the user's and unsent
    ones the client's (:func:`~tokrate.analysis.metrics.server_error_expr`), not the
    endpoint's, and are left out. Judged as a share
    (:func:`tokrate.analysis.share_compare.compare_shares`)."""
    b, c = error_share(gb), error_share(gc)
    unjudged = None
    if min(b.n, c.n) < s.min_samples:
        unjudged = _too_few("error_rate", b.n, c.n, s.min_samples)
    return compare_shares(b, c, t, s, problem, empty, unjudged)


# --- the comparison -----------------------------------------------------------------


def _row_label(endpoint: str, model: str, scenario: str, ambiguous: set[str]) -> str:
    target = f"{endpoint}/{model}" if model in ambiguous else model
    return f"{target} {scenario}"


def _groups(frame: pl.DataFrame) -> dict[tuple[str, str, str], pl.DataFrame]:
    if frame.height == 0:
        return {}
    parts = frame.partition_by(["endpoint", "model", "scenario"], as_dict=True)
    return {(str(k[0]), str(k[1]), str(k[2])): v for k, v in parts.items()}


@dataclass(frozen=True, slots=True)
class Baseline:
    """What a run is judged against: one run, or a nightly reference's nights
    (tokrate.analysis.reference). ``runs`` oldest first; ``groups`` maps an (endpoint,
    model, scenario) group to the indices of the runs its reference uses (None: every
    run, for every group); ``window`` the reference window (None for one baseline
    run); ``accepted`` the run id of the acceptance the window starts at; ``notes``
    what the reference had to make do with (said in the comparison's warnings)."""

    runs: tuple[LoadedRun, ...]
    groups: Mapping[tuple[str, str, str], tuple[int, ...]] | None = None
    window: int | None = None
    accepted: str | None = None
    notes: tuple[str, ...] = ()
    #: The runs' :func:`~tokrate.analysis.metrics.analysed` records, when the caller
    #: has them already (tokrate history judges many points against the same nights).
    frames: tuple[pl.DataFrame, ...] | None = None

    def analysed_frames(self) -> tuple[pl.DataFrame, ...]:
        return (
            self.frames
            if self.frames is not None
            else tuple(analysed(r.records) for r in self.runs)
        )

    @classmethod
    def of(cls, base: LoadedRun | Baseline) -> Baseline:
        return base if isinstance(base, Baseline) else cls((base,))

    @property
    def newest(self) -> LoadedRun:
        return self.runs[-1]

    def nights(self, group: tuple[str, str, str]) -> tuple[LoadedRun, ...]:
        """The runs ``group`` is judged against (newest last)."""
        if self.groups is None:
            return self.runs
        return tuple(self.runs[i] for i in self.groups.get(group, ()))


def _judge_groups(
    base: Baseline,
    frames_b: Sequence[pl.DataFrame],
    cur: LoadedRun,
    frame_c: pl.DataFrame,
    ths: ThresholdSet,
    s: CompareSettings,
    keys: Sequence[tuple[str, str, str]],
    problem_all: str | None,
    labels: Mapping[tuple[str, str, str], str],
) -> list[MetricResult]:
    """Every metric row of ``keys`` (endpoint, model, scenario) groups, base vs cur
    (``frames_b``, ``frame_c``: their analysed records)."""
    groups_b = [_groups(frame) for frame in frames_b]
    by_run = {id(run): i for i, run in enumerate(base.runs)}
    groups_c = _groups(frame_c)
    targets_b = {(e, m) for parts in groups_b for e, m, _ in parts}
    targets_c = {(e, m) for e, m, _ in groups_c}
    empty = frame_c.head(0)
    results: list[MetricResult] = []
    for endpoint, model, scenario in keys:
        key = (endpoint, model, scenario)
        runs = base.nights(key) or (base.newest,)
        nights = [(run, groups_b[by_run[id(run)]].get(key, empty)) for run in runs]
        frames = [g for _, g in nights if g.height] or [empty]
        pooled = frames[0] if len(frames) == 1 else pl.concat(frames)
        gc = groups_c.get(key, empty)
        problem = problem_all or group_problem(
            runs[-1].info, cur.info, key, pooled, gc, targets_b, targets_c
        )
        night_overloads = [
            o for run, g in nights if (o := scenario_overload(run.info, scenario, g))
        ]
        overloads = (
            max(night_overloads, key=lambda o: o.lateness_s, default=None),
            scenario_overload(cur.info, scenario, gc),
        )
        label = labels[key]
        for metric in (t.metric for t in ths.metrics if t.metric not in RUN_METRICS):
            t = ths.for_series(endpoint, model, scenario, metric)
            row = compare_metric(frames, gc, t, s, problem, "|".join(key), overloads)
            results.append(
                replace(row, endpoint=endpoint, model=model, scenario=scenario, label=label)
            )
    return results


def _confirm(
    rows: list[MetricResult],
    base: Baseline,
    frames_b: Sequence[pl.DataFrame],
    confirm: LoadedRun,
    ths: ThresholdSet,
    s: CompareSettings,
    labels: Mapping[tuple[str, str, str], str],
) -> tuple[list[MetricResult], set[tuple[str, str, str]]]:
    """Each regressed row judged again with the re-measurement in ``confirm``: it stands
    when the re-measurement regressed too; otherwise it is ``unchanged`` (not confirmed)
    or ``inconclusive`` (the re-measurement could not be judged). Returns the rows and
    the groups the re-measurement did not cover."""
    flagged = sorted({r.group for r in rows if r.verdict == "regressed"})
    frame_c = analysed(confirm.records)
    measured = {
        (str(e), str(m), str(sc))
        for e, m, sc in frame_c.select("endpoint", "model", "scenario").unique().iter_rows()
    }
    covered = [g for g in flagged if g in measured]
    problem = run_problem(base.newest.info, confirm.info)
    again = {
        r.key: r
        for r in _judge_groups(base, frames_b, confirm, frame_c, ths, s, covered, problem, labels)
    }
    out: list[MetricResult] = []
    for r in rows:
        second = again.get(r.key) if r.verdict == "regressed" else None
        if second is None:
            out.append(r)
            continue
        confirmation = Confirmation(
            current=second.current,
            change=second.change,
            ci=second.ci,
            n_current=second.n_current,
            verdict=second.verdict,
            reason=second.reason,
        )
        if second.verdict == "regressed":
            verdict, reason = r.verdict, f"{r.reason}; confirmed by the re-measurement"
        elif second.verdict == "inconclusive":
            verdict, reason = "inconclusive", f"re-measurement inconclusive: {second.reason}"
        else:
            verdict, reason = "unchanged", f"not confirmed: the re-measurement was {second.verdict}"
        out.append(replace(r, verdict=verdict, reason=reason, confirmation=confirmation))
    return out, {g for g in flagged if g not in measured}


def compare_loaded(
    base: LoadedRun | Baseline,
    cur: LoadedRun,
    thresholds: ThresholdSet | Sequence[Threshold] | Mapping[str, str] | None = None,
    *,
    settings: CompareSettings | None = None,
    only: set[tuple[str, str, str]] | None = None,
    confirm: LoadedRun | None = None,
    noise: NoiseSource | None = None,
    series_noise: Mapping[SeriesKey, SeriesNoise] | None = None,
    current_frame: pl.DataFrame | None = None,
) -> Comparison:
    """Compare a run against a baseline run or a reference's nights (:class:`Baseline`;
    see the module doc); ``only`` limits the rows to those (endpoint, model, scenario)
    groups; ``confirm`` is the current run's confirmation measurement (its
    ``confirm/`` folder), ``noise`` where fitted thresholds came from and
    ``series_noise`` each series' history (its nights and noise limit, on the row: the
    smallest change it lets the gate detect); ``current_frame`` the current run's
    analysed records when the caller has them already (as Baseline.frames).
    Never raises for a missing model, other prompts or other load: those rows are
    ``not_comparable``."""
    b = Baseline.of(base)
    newest = b.newest
    s = settings or CompareSettings()
    ths = ThresholdSet.of(thresholds)
    if not (any(has_checks(r.records) for r in b.runs) or has_checks(cur.records)):
        # No answer was checked on either side: no pass-rate row (docs/quality.md).
        ths = ThresholdSet(tuple(t for t in ths.metrics if t.metric != "pass_rate"), ths.per_series)
    if not (any(has_cached_tokens(r.records) for r in b.runs) or has_cached_tokens(cur.records)):
        # No server reported cached tokens on either side: no cache row
        # (tokrate.analysis.cache_compare).
        ths = ThresholdSet(
            tuple(t for t in ths.metrics if t.metric != "cache_hit_rate"), ths.per_series
        )
    warnings = [
        f"{side} run {run.path.name} is {run.info.status}"
        for side, run in (*(("baseline", r) for r in b.runs), ("current", cur))
        if run.info.interrupted
    ]
    warnings += b.notes
    frames_b = b.analysed_frames()
    frame_c = analysed(cur.records) if current_frame is None else current_frame
    if only is not None:
        # Judge only those groups: the others' records are not needed (history asks
        # for one group at a time).
        wanted = pl.struct("endpoint", "model", "scenario").is_in(
            [{"endpoint": e, "model": m, "scenario": sc} for e, m, sc in only]
        )
        frames_b = tuple(f.filter(wanted) for f in frames_b)
        frame_c = frame_c.filter(wanted)
    all_keys = {
        (str(e), str(m), str(sc))
        for frame in (*frames_b, frame_c)
        for e, m, sc in frame.select("endpoint", "model", "scenario").unique().iter_rows()
    }
    keys = sorted(all_keys)
    if only is not None:
        keys = [k for k in keys if k in only]
    if newest.summary and newest.summary.capacity and cur.summary and cur.summary.capacity:
        keys = []  # two searches: the capacities are the result, not their probes
    endpoints_of: dict[str, set[str]] = {}
    for e, m, _ in all_keys:
        endpoints_of.setdefault(m, set()).add(e)
    ambiguous = {m for m, eps in endpoints_of.items() if len(eps) > 1}
    labels = {k: _row_label(*k, ambiguous) for k in all_keys}
    problem = run_problem(newest.info, cur.info)
    results = _judge_groups(b, frames_b, cur, frame_c, ths, s, keys, problem, labels)
    unconfirmed = {r.group for r in results if r.verdict == "regressed"}
    if confirm is not None:
        results, unconfirmed = _confirm(results, b, frames_b, confirm, ths, s, labels)
    if series_noise is not None:
        results = [_with_noise(r, series_noise.get(r.key)) for r in results]
    results += _capacity_rows(newest, cur, ths)
    return Comparison(
        baseline=ComparedRun(
            str(newest.path), newest.info.run_id, newest.info.label, newest.info.warnings
        ),
        current=ComparedRun(str(cur.path), cur.info.run_id, cur.info.label, cur.info.warnings),
        thresholds=ths.metrics,
        settings=s,
        warnings=tuple(warnings),
        confirmed=confirm is not None,
        unconfirmed=tuple(SeriesGroup(*g) for g in sorted(unconfirmed)),
        noise=noise,
        reference=None
        if b.window is None
        else ReferenceInfo(
            tuple(r.info.run_id for r in b.runs),
            tuple(r.info.name for r in b.runs),
            b.window,
            b.accepted,
        ),
        results=tuple(results),
    )


def _with_noise(row: MetricResult, noise: SeriesNoise | None) -> MetricResult:
    if noise is None:
        return row
    return replace(row, noise_nights=noise.nights, noise_limit=noise.limit)


def load_confirmation(run_dir: Path | str) -> LoadedRun | None:
    """The confirmation measurement inside a run folder (``<run>/confirm/``), or None
    when there is none or it did not complete (an interrupted re-measurement confirms
    nothing). Raises RunFolderError when it is there but cannot be read."""
    folder = Path(run_dir) / CONFIRM_FOLDER
    if not (path_is_dir(folder) and (folder / "run.json").is_file()):
        return None
    run = load_run(folder)
    return run if run.info.complete else None


def _capacity_rows(base: LoadedRun, cur: LoadedRun, ths: ThresholdSet) -> list[MetricResult]:
    """Capacity searches' rows (tokrate.analysis.capacity_compare), scenario "capacity"."""
    if (t := next((x for x in ths.metrics if x.metric == "capacity"), None)) is None:
        return []  # capacity=off, or thresholds given without it
    b, c = (r.summary.capacity if r.summary else None for r in (base, cur))
    changes = compare_capacities(b, c, t.limit)
    return [
        MetricResult(
            endpoint=c.endpoint,
            model=c.model,
            scenario="capacity",
            label=f"{c.model} capacity",
            metric="capacity",
            unit=c.unit,
            baseline=c.baseline,
            current=c.current,
            change=c.change,
            threshold=t.describe(),
            threshold_source=t.source,
            verdict=c.verdict,
            reason=c.reason,
        )
        for c in changes
    ]


def compare_runs(
    baseline: Path | str,
    current: Path | str,
    thresholds: ThresholdSet | Sequence[Threshold] | Mapping[str, str] | None = None,
    *,
    settings: CompareSettings | None = None,
    noise: NoiseSource | None = None,
    series_noise: Mapping[SeriesKey, SeriesNoise] | None = None,
) -> Comparison:
    """Compare ``current`` against ``baseline`` (two run folders; reads only), with the
    current run's confirmation measurement where it has one (``<current>/confirm``).

    ``thresholds``: None for DEFAULT_THRESHOLDS; a sequence of Threshold replaces them
    (``merge_thresholds`` starts from the defaults); a mapping of CLI-style texts, e.g.
    ``{"ttft_p95": "+20%", "e2e_p95": "off"}``, is applied on top of the defaults; a
    ThresholdSet (e.g. fitted to history's noise) as is.
    Raises RunFolderError (one line) when a folder cannot be read.
    """
    # A killed run's answers are judged here (its finishing step never ran).
    return compare_loaded(
        with_verdicts(load_run(Path(baseline))),
        with_verdicts(load_run(Path(current))),
        thresholds,
        settings=settings,
        confirm=load_confirmation(current),
        noise=noise,
        series_noise=series_noise,
    )
