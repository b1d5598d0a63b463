"""Regression verdicts: one stored run against a baseline run.

The one set of comparison functions: ``tokrate compare``, ``tokrate run --baseline``,
the report's "runs side by side" and ``tokrate history``'s change markers all call
:func:`compare_loaded`, so the same pair of runs gets the same verdict everywhere.

Targets match by endpoint + model name and scenarios by name. For every metric with a
threshold a row reports the baseline value, the current value, the change, a seeded
95% bootstrap confidence interval of that change, and a verdict:

- ``regressed``: the change is worse than the threshold *and* its interval excludes zero;
- ``improved``: the change is better than the threshold *and* its interval excludes zero;
- ``unchanged``: anything else ("not significant" is an answer);
- ``not_comparable``: the target or scenario is missing on one side, the prompts or the
  load differ, or one side has fewer than ``min_samples`` values.

Values are computed from the per-request records :func:`tokrate.analysis.metrics.analysed`
keeps (final attempts of measured requests; status ok for latencies), the same rows
that are resampled for the interval, so a value and its interval always agree and
equal summary.json's. Percentiles use linear interpolation. The interval is a circular
block bootstrap in send order with blocks as long as the number of requests in flight
together (:func:`tokrate.analysis.stats.block_bootstrap`); error rates use Newcombe's interval.

Comparison JSON schema history (bump COMPARISON_SCHEMA_VERSION and add a line):

    1: first version.
    (later, optional: baseline/current "label", threshold "source")
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Final, Literal

import polars as pl

from tokrate.analysis.capacity_compare import compare_capacities
from tokrate.analysis.comparability import group_problem, run_problem
from tokrate.analysis.metrics import analysed
from tokrate.analysis.stats import block_length, newcombe_interval, relative_change_ci, sample_stat
from tokrate.runfolder.store import LoadedRun, load_run
from tokrate.spec.thresholds import (
    RUN_METRICS,
    Direction,
    SeriesKey,
    Threshold,
    ThresholdSet,
    metric_column,
    metric_unit,
)

__all__ = [
    "COMPARISON_SCHEMA_VERSION",
    "CompareSettings",
    "Comparison",
    "MetricResult",
    "Verdict",
    "compare_loaded",
    "compare_runs",
]

COMPARISON_SCHEMA_VERSION: Final = 1
COMPARISON_SCHEMA_HISTORY: Final[dict[int, str]] = {1: "first version"}

Verdict = Literal["improved", "unchanged", "regressed", "not_comparable"]

_VERDICTS: Final = ("regressed", "improved", "unchanged", "not_comparable")


@dataclass(frozen=True, slots=True)
class CompareSettings:
    """Statistics knobs. ``resamples`` bootstrap draws at ``confidence``, seeded by
    ``seed`` (plus a stable hash of each row's key, so rows are independent but every
    rerun gives the same interval). ``min_samples``: fewer values on either side make
    a row not comparable. ``intervals`` False skips the bootstrap where the verdict
    does not depend on it (a change within its threshold): history does, the verdict
    is the same."""

    confidence: float = 0.95
    resamples: int = 2000
    seed: int = 0
    min_samples: int = 10
    intervals: bool = True


@dataclass(frozen=True, slots=True)
class MetricResult:
    """One (target, scenario, metric) verdict.

    ``change`` is relative (current / baseline - 1) for every metric but ``error_rate``,
    where it is the absolute difference of the rates; ``ci_low``/``ci_high`` bound the
    same quantity. Values are in ``unit``. Unknown is ``None``. ``label`` names the row
    ("sim-7b c=4", or "endpoint/model c=4" where a model name is ambiguous).
    """

    endpoint: str
    model: str
    scenario: str
    metric: str
    unit: str
    direction: Direction
    threshold: Threshold | None
    verdict: Verdict
    reason: str
    baseline: float | None = None
    current: float | None = None
    change: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    n_baseline: int = 0
    n_current: int = 0
    label: str = ""

    @property
    def key(self) -> SeriesKey:
        return (self.endpoint, self.model, self.scenario, self.metric)

    def to_dict(self) -> dict[str, Any]:
        return {
            "endpoint": self.endpoint,
            "model": self.model,
            "scenario": self.scenario,
            "label": self.label,
            "metric": self.metric,
            "unit": self.unit,
            "direction": self.direction,
            "baseline": self.baseline,
            "current": self.current,
            "change": self.change,
            "change_kind": "absolute" if self.metric == "error_rate" else "relative",
            "ci": None if self.ci_low is None else [self.ci_low, self.ci_high],
            "threshold": None if self.threshold is None else self.threshold.describe(),
            "threshold_source": None if self.threshold is None else self.threshold.source,
            "n_baseline": self.n_baseline,
            "n_current": self.n_current,
            "verdict": self.verdict,
            "reason": self.reason,
        }


@dataclass(frozen=True, slots=True)
class Comparison:
    """Everything a comparison found; render with ``tokrate.report.comparison``."""

    baseline_dir: str
    current_dir: str
    baseline_run_id: str
    current_run_id: str
    results: tuple[MetricResult, ...]
    thresholds: ThresholdSet
    settings: CompareSettings
    warnings: tuple[str, ...] = ()
    baseline_label: str | None = None
    current_label: str | None = None

    @property
    def baseline_name(self) -> str:
        return self.baseline_label or self.baseline_run_id

    @property
    def current_name(self) -> str:
        return self.current_label or self.current_run_id

    @property
    def regressed(self) -> bool:
        return any(r.verdict == "regressed" for r in self.results)

    @property
    def comparable(self) -> bool:
        """Whether at least one row could be judged."""
        return any(r.verdict != "not_comparable" for r in self.results)

    @property
    def verdict(self) -> str:
        """``regressed``, ``not_comparable`` (nothing could be compared) or ``ok``."""
        if self.regressed:
            return "regressed"
        if not self.comparable:
            return "not_comparable"
        return "ok"

    @property
    def counts(self) -> dict[str, int]:
        out = dict.fromkeys(_VERDICTS, 0)
        for r in self.results:
            out[r.verdict] += 1
        return out

    @property
    def exit_code(self) -> int:
        """0 no regression, 1 at least one regression, 2 nothing was comparable."""
        if self.regressed:
            return 1
        return 0 if self.comparable else 2

    def result(self, endpoint: str, model: str, scenario: str, metric: str) -> MetricResult | None:
        for r in self.results:
            if r.key == (endpoint, model, scenario, metric):
                return r
        return None

    def to_dict(self) -> dict[str, Any]:
        """The documented JSON document (docs/regressions.md), schema_version 1."""
        s = self.settings
        return {
            "schema_version": COMPARISON_SCHEMA_VERSION,
            "kind": "tokrate-comparison",
            "verdict": self.verdict,
            "counts": self.counts,
            "baseline": {
                "path": self.baseline_dir,
                "run_id": self.baseline_run_id,
                "label": self.baseline_label,
            },
            "current": {
                "path": self.current_dir,
                "run_id": self.current_run_id,
                "label": self.current_label,
            },
            "thresholds": [
                {
                    "metric": t.metric,
                    "limit": t.limit,
                    "floor": t.floor,
                    "text": t.describe(),
                    "source": t.source,
                }
                for t in self.thresholds.metrics
            ],
            "settings": {
                "confidence": s.confidence,
                "resamples": s.resamples,
                "seed": s.seed,
                "min_samples": s.min_samples,
            },
            "warnings": list(self.warnings),
            "results": [r.to_dict() for r in self.results],
        }


# --- one row ------------------------------------------------------------------------


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
    if -change > t.limit and abs_change > t.floor:
        assert ci is not None
        if ci[1] < 0:
            return "improved", "better than the threshold and the interval excludes 0"
        return "unchanged", "better than the threshold but not significant"
    return "unchanged", f"within {t.describe()}"


def _needs_interval(change: float, abs_change: float, t: Threshold, s: CompareSettings) -> bool:
    return s.intervals or (abs(change) > t.limit and abs_change > t.floor)


def compare_metric(
    gb: pl.DataFrame,
    gc: pl.DataFrame,
    t: Threshold,
    s: CompareSettings,
    problem: str | None,
    key: str,
) -> MetricResult:
    """One row from two groups of :func:`tokrate.analysis.metrics.analysed` records
    (endpoint/model/scenario/label are filled in by the caller)."""
    metric = t.metric
    empty = MetricResult(
        endpoint="",
        model="",
        scenario="",
        metric=metric,
        unit=metric_unit(metric),
        direction=t.direction,
        threshold=t,
        verdict="not_comparable",
        reason=problem or "",
    )
    if metric == "error_rate":
        return _compare_error_rate(gb, gc, t, s, problem, empty)
    column, q = metric_column(metric)
    # Send order (wall clock at t0) so that the bootstrap's blocks are neighbours in time.
    ob = gb.filter((pl.col("status") == "ok") & pl.col(column).is_not_null()).sort("started_at")
    oc = gc.filter((pl.col("status") == "ok") & pl.col(column).is_not_null()).sort("started_at")
    vb = ob[column].to_numpy().astype(float)
    vc = oc[column].to_numpy().astype(float)
    out = replace(
        empty,
        n_baseline=int(vb.size),
        n_current=int(vc.size),
        baseline=float(sample_stat(vb, q)) if vb.size else None,
        current=float(sample_stat(vc, q)) if vc.size else None,
    )
    if problem is not None:
        return out
    if min(vb.size, vc.size) < s.min_samples:
        return replace(
            out,
            reason=f"too few samples (baseline {vb.size}, current {vc.size}; need {s.min_samples})",
        )
    assert out.baseline is not None and out.current is not None
    if out.baseline <= 0:
        return replace(out, reason="baseline value is 0")
    change = out.current / out.baseline - 1.0
    sign = -1.0 if t.direction == "higher_is_better" else 1.0
    abs_change = abs(out.current - out.baseline)
    if not _needs_interval(change, abs_change, t, s):
        verdict, reason = judge(sign * change, None, abs_change, t)
        return replace(out, change=change, verdict=verdict, reason=reason)
    blocks = (
        block_length(_in_flight(ob), int(vb.size)),
        block_length(_in_flight(oc), int(vc.size)),
    )
    lo, hi = relative_change_ci(
        vb,
        vc,
        q,
        blocks,
        confidence=s.confidence,
        resamples=s.resamples,
        seed=s.seed,
        key=f"{key}|{metric}",
    )
    if math.isnan(lo):
        return replace(out, change=change, reason="bootstrap interval undefined")
    worse_ci = (sign * lo, sign * hi) if sign > 0 else (sign * hi, sign * lo)
    verdict, reason = judge(sign * change, worse_ci, abs_change, t)
    return replace(out, change=change, ci_low=lo, ci_high=hi, verdict=verdict, reason=reason)


def _compare_error_rate(
    gb: pl.DataFrame,
    gc: pl.DataFrame,
    t: Threshold,
    s: CompareSettings,
    problem: str | None,
    empty: MetricResult,
) -> MetricResult:
    """Error rate = error / (ok + error); cancelled requests are the user's, not the
    endpoint's, and are left out. Interval: Newcombe hybrid score."""

    def counts(g: pl.DataFrame) -> tuple[int, int]:
        err = int((g["status"] == "error").sum())
        return err, err + int((g["status"] == "ok").sum())

    kb, nb = counts(gb)
    kc, nc = counts(gc)
    out = replace(
        empty,
        n_baseline=nb,
        n_current=nc,
        baseline=kb / nb if nb else None,
        current=kc / nc if nc else None,
    )
    if problem is not None:
        return out
    if min(nb, nc) < s.min_samples:
        return replace(
            out, reason=f"too few samples (baseline {nb}, current {nc}; need {s.min_samples})"
        )
    assert out.baseline is not None and out.current is not None
    change = out.current - out.baseline
    lo, hi = newcombe_interval(kb, nb, kc, nc, s.confidence)
    verdict, reason = judge(change, (lo, hi), abs(change), t)
    return replace(out, change=change, ci_low=lo, ci_high=hi, verdict=verdict, reason=reason)


# --- the comparison -----------------------------------------------------------------


def _row_label(endpoint: str, model: str, scenario: str, ambiguous: set[str]) -> str:
    target = f"{endpoint}/{model}" if model in ambiguous else model
    return f"{target} {scenario}"


def _groups(frame: pl.DataFrame) -> dict[tuple[str, str, str], pl.DataFrame]:
    if frame.height == 0:
        return {}
    parts = frame.partition_by(["endpoint", "model", "scenario"], as_dict=True)
    return {(str(k[0]), str(k[1]), str(k[2])): v for k, v in parts.items()}


def compare_loaded(
    base: LoadedRun,
    cur: LoadedRun,
    thresholds: ThresholdSet | Sequence[Threshold] | Mapping[str, str] | None = None,
    *,
    settings: CompareSettings | None = None,
    only: set[tuple[str, str, str]] | None = None,
) -> Comparison:
    """Compare two loaded runs (see the module doc); ``only`` limits the rows to those
    (endpoint, model, scenario) groups. Never raises for a missing model, other
    prompts or other load: those rows are ``not_comparable``."""
    s = settings or CompareSettings()
    ths = ThresholdSet.of(thresholds)
    warnings = [
        f"{side} run {run.path.name} is {run.info.status}"
        for side, run in (("baseline", base), ("current", cur))
        if run.info.interrupted
    ]
    problem_all = run_problem(base.info, cur.info)
    groups_b = _groups(analysed(base.records))
    groups_c = _groups(analysed(cur.records))
    keys = sorted(groups_b.keys() | groups_c.keys())
    if only is not None:
        keys = [k for k in keys if k in only]
    if base.summary and base.summary.capacity and cur.summary and cur.summary.capacity:
        keys = []  # two searches: the capacities are the result, not their probes
    targets_b = {(e, m) for e, m, _ in groups_b}
    targets_c = {(e, m) for e, m, _ in groups_c}
    endpoints_of: dict[str, set[str]] = {}
    for e, m, _ in groups_b.keys() | groups_c.keys():
        endpoints_of.setdefault(m, set()).add(e)
    ambiguous = {m for m, eps in endpoints_of.items() if len(eps) > 1}
    empty = analysed(base.records).head(0)
    results: list[MetricResult] = []
    for endpoint, model, scenario in keys:
        gb = groups_b.get((endpoint, model, scenario), empty)
        gc = groups_c.get((endpoint, model, scenario), empty)
        problem = problem_all or group_problem(
            base.info, cur.info, (endpoint, model, scenario), gb, gc, targets_b, targets_c
        )
        label = _row_label(endpoint, model, scenario, ambiguous)
        for metric in (t.metric for t in ths.metrics if t.metric not in RUN_METRICS):
            t = ths.for_series(endpoint, model, scenario, metric)
            row = compare_metric(gb, gc, t, s, problem, f"{endpoint}|{model}|{scenario}")
            results.append(
                replace(row, endpoint=endpoint, model=model, scenario=scenario, label=label)
            )
    results += _capacity_rows(base, cur, ths)
    return Comparison(
        baseline_dir=str(base.path),
        current_dir=str(cur.path),
        baseline_run_id=base.info.run_id,
        current_run_id=cur.info.run_id,
        results=tuple(results),
        thresholds=ths,
        settings=s,
        warnings=tuple(warnings),
        baseline_label=base.info.label,
        current_label=cur.info.label,
    )


def _capacity_rows(base: LoadedRun, cur: LoadedRun, ths: ThresholdSet) -> list[MetricResult]:
    """Capacity searches' rows (tokrate.analysis.capacity_compare), scenario "capacity"."""
    if (t := next((x for x in ths.metrics if x.metric == "capacity"), None)) is None:
        return []  # capacity=off, or thresholds given without it
    b, c = (r.summary.capacity if r.summary else None for r in (base, cur))
    changes = compare_capacities(b, c, t.limit)
    return [
        MetricResult(c.endpoint, c.model, "capacity", "capacity", c.unit, "higher_is_better", t,
                     c.verdict, c.reason, c.baseline, c.current, c.change, label=f"{c.model} capacity")
        for c in changes
    ]  # fmt: skip


def compare_runs(
    baseline: Path | str,
    current: Path | str,
    thresholds: ThresholdSet | Sequence[Threshold] | Mapping[str, str] | None = None,
    *,
    settings: CompareSettings | None = None,
) -> Comparison:
    """Compare ``current`` against ``baseline`` (two run folders; reads only).

    ``thresholds``: None for DEFAULT_THRESHOLDS; a sequence of Threshold replaces them
    (``merge_thresholds`` starts from the defaults); a mapping of CLI-style texts, e.g.
    ``{"ttft_p95": "+20%", "e2e_p95": "off"}``, is applied on top of the defaults; a
    ThresholdSet (e.g. fitted to history's noise) as is.
    Raises RunFolderError (one line) when a folder cannot be read.
    """
    return compare_loaded(
        load_run(Path(baseline)), load_run(Path(current)), thresholds, settings=settings
    )
