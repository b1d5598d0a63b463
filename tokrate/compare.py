"""Regression verdicts: compare one stored run against a baseline run.

``compare_runs`` reads two run folders (it never measures), matches targets by
endpoint + model name and scenarios by name, and for every metric that has a threshold
reports the baseline value, the current value, the relative change, a seeded 95%
bootstrap confidence interval of that change, and a verdict:

- ``regressed``: the change is worse than the threshold *and* its interval excludes zero;
- ``improved``: the change is better than the threshold *and* its interval excludes zero;
- ``unchanged``: anything else ("not significant" is an answer);
- ``not_comparable``: the target or scenario is missing on one side, the prompts or the
  load differ, or one side has too few samples.

All values are computed from the per-request records (status ``ok``, warm-up excluded),
the same rows that are resampled for the interval, so a value and its interval always
agree. Percentiles use linear interpolation (numpy's default, as summary.json). The
interval is a circular block bootstrap in send order with blocks as long as the number
of requests in flight together: concurrent requests share every stall, so they are
resampled together (see ``_bootstrap_stats``).

``check_baseline`` is the ``tokrate run --baseline REF`` step: it compares a finished run
against REF (a run folder or ``latest-good``), writes ``comparison.md`` and
``comparison.json`` into the run folder, and moves the ``latest-good`` pointer only when
the run passes.

Comparison JSON schema history (bump COMPARISON_SCHEMA_VERSION and add a line):

    1: first version.
"""

from __future__ import annotations

import math
import os
import re
import zlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Final, Literal

import numpy as np
import orjson
import polars as pl

from tokrate.errors import RunFolderError, UsageError

__all__ = [
    "COMPARISON_SCHEMA_VERSION",
    "DEFAULT_THRESHOLDS",
    "LATEST_GOOD",
    "METRICS",
    "Comparison",
    "CompareSettings",
    "MetricResult",
    "Threshold",
    "Verdict",
    "check_baseline",
    "compare_runs",
    "describe_change",
    "merge_thresholds",
    "metric_direction",
    "newcombe_interval",
    "parse_threshold",
    "render_json",
    "render_markdown",
    "render_table",
]

COMPARISON_SCHEMA_VERSION: Final = 1
COMPARISON_SCHEMA_HISTORY: Final[dict[int, str]] = {1: "first version"}

#: Name of the pointer file in the reports root. A plain text file holding the run
#: folder's name, not a symlink: it survives artefact stores, caches, zip files and
#: Windows checkouts, none of which keep symlinks reliably.
LATEST_GOOD: Final = "latest-good"

Verdict = Literal["improved", "unchanged", "regressed", "not_comparable"]
Direction = Literal["lower_is_better", "higher_is_better"]

#: Per-request series a metric can be built on: name -> (record-derived column, unit,
#: direction). ``decode_tps`` is 1 / tpot_s per request (DESIGN.md).
_SERIES: Final[dict[str, tuple[str, str, Direction]]] = {
    "ttft": ("ttft_s", "s", "lower_is_better"),
    "first_answer": ("first_answer_s", "s", "lower_is_better"),
    "tpot": ("tpot_s", "s", "lower_is_better"),
    "e2e": ("e2e_s", "s", "lower_is_better"),
    "decode_tps": ("decode_tps", "tok/s", "higher_is_better"),
}
_STATS: Final[dict[str, float | None]] = {
    "p50": 0.50,
    "p90": 0.90,
    "p95": 0.95,
    "p99": 0.99,
    "mean": None,
}

#: Every metric name ``compare`` understands: ``<series>_<stat>`` plus ``error_rate``.
METRICS: Final[tuple[str, ...]] = (
    *(f"{s}_{t}" for s in _SERIES for t in _STATS),
    "error_rate",
)


@dataclass(frozen=True, slots=True)
class Threshold:
    """How much worse a metric may get before it counts as a regression.

    ``limit`` is a fraction of the baseline value (0.10 = 10%) for every metric except
    ``error_rate``, where it is an absolute difference in rate (0.01 = 1 percentage
    point). ``floor`` is an absolute change (in the metric's unit) below which nothing is
    called a change, so sub-millisecond jitter on a fast endpoint is never news.
    Invariant: ``limit >= 0`` and ``floor >= 0``; the direction comes from the metric.
    """

    metric: str
    limit: float
    floor: float = 0.0

    def __post_init__(self) -> None:
        if self.metric not in METRICS:
            raise UsageError(f"unknown metric {self.metric!r} (known: {', '.join(METRICS)})")
        if not (self.limit >= 0 and self.floor >= 0):
            raise UsageError(f"threshold for {self.metric} must be >= 0")

    @property
    def direction(self) -> Direction:
        return metric_direction(self.metric)

    def describe(self) -> str:
        """``+10%`` / ``-5%`` / ``+1.0pp``: the sign shows which way is worse."""
        sign = "-" if self.direction == "higher_is_better" else "+"
        if self.metric == "error_rate":
            return f"+{self.limit * 100:g}pp"
        return f"{sign}{self.limit * 100:g}%"


#: Defaults: loose enough that two identical runs on a busy machine agree, tight enough
#: to catch a provider getting a tenth slower. Floors: 1 ms on latencies, 0.1 ms on TPOT.
DEFAULT_THRESHOLDS: Final[tuple[Threshold, ...]] = (
    Threshold("ttft_p95", 0.10, 0.001),
    Threshold("tpot_p50", 0.05, 0.0001),
    Threshold("e2e_p95", 0.10, 0.001),
    Threshold("decode_tps_p50", 0.05),
    Threshold("error_rate", 0.01),
)


@dataclass(frozen=True, slots=True)
class CompareSettings:
    """Statistics knobs. ``resamples`` bootstrap draws at ``confidence``, seeded by
    ``seed`` (plus a stable hash of each row's key, so rows are independent but every
    rerun gives the same interval). ``min_samples``: fewer ok requests on either side
    make a row not comparable."""

    confidence: float = 0.95
    resamples: int = 2000
    seed: int = 0
    min_samples: int = 10


@dataclass(frozen=True, slots=True)
class MetricResult:
    """One (target, scenario, metric) verdict.

    ``change`` is relative (current / baseline - 1) for every metric but ``error_rate``,
    where it is the absolute difference of the rates; ``ci_low``/``ci_high`` bound the
    same quantity. Values are in ``unit``. Unknown is ``None``.
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
            "n_baseline": self.n_baseline,
            "n_current": self.n_current,
            "verdict": self.verdict,
            "reason": self.reason,
        }


@dataclass(frozen=True, slots=True)
class Comparison:
    """Everything ``compare_runs`` found; render with ``render_*``. Frozen."""

    baseline_dir: str
    current_dir: str
    baseline_run_id: str
    current_run_id: str
    results: tuple[MetricResult, ...]
    thresholds: tuple[Threshold, ...]
    settings: CompareSettings
    warnings: tuple[str, ...] = ()

    @property
    def regressed(self) -> bool:
        return any(r.verdict == "regressed" for r in self.results)

    @property
    def verdict(self) -> str:
        """``regressed``, ``not_comparable`` (nothing could be compared) or ``ok``."""
        if self.regressed:
            return "regressed"
        if not self.results or all(r.verdict == "not_comparable" for r in self.results):
            return "not_comparable"
        return "ok"

    @property
    def counts(self) -> dict[str, int]:
        out = {v: 0 for v in ("regressed", "improved", "unchanged", "not_comparable")}
        for r in self.results:
            out[r.verdict] += 1
        return out

    @property
    def exit_code(self) -> int:
        """0 no regression, 1 at least one regression (the CLI's contract)."""
        return 1 if self.regressed else 0

    def to_dict(self) -> dict[str, Any]:
        """The documented JSON document (docs/regressions.md), schema_version 1."""
        s = self.settings
        return {
            "schema_version": COMPARISON_SCHEMA_VERSION,
            "kind": "tokrate-comparison",
            "verdict": self.verdict,
            "counts": self.counts,
            "baseline": {"path": self.baseline_dir, "run_id": self.baseline_run_id},
            "current": {"path": self.current_dir, "run_id": self.current_run_id},
            "thresholds": [
                {"metric": t.metric, "limit": t.limit, "floor": t.floor, "text": t.describe()}
                for t in self.thresholds
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


# --- thresholds ----------------------------------------------------------------------

_THRESHOLD_RE = re.compile(r"^\s*([a-z0-9_]+)\s*=\s*([+-]?)\s*([0-9]*\.?[0-9]+)\s*(%|pp)?\s*$")


def metric_direction(metric: str) -> Direction:
    """Which way is better for a metric name from METRICS."""
    if metric == "error_rate":
        return "lower_is_better"
    return _SERIES[metric.rsplit("_", 1)[0]][2]


def parse_threshold(text: str) -> Threshold | str:
    """Parse ``METRIC=+10%`` / ``decode_tps_p50=-5%`` / ``error_rate=+1pp`` /
    ``METRIC=off``.

    Returns the Threshold, or the metric name alone for ``off`` (drop that metric).
    The sign is optional but, when given, must point the metric's worse way (``+`` for
    latencies and error rate, ``-`` for throughput). For ``error_rate`` both ``%`` and
    ``pp`` mean percentage points. The default absolute floor of the metric is kept.
    Raises UsageError (one line, naming the argument).
    """
    name, _, value = text.partition("=")
    name = name.strip()
    if value.strip().lower() == "off":
        if name not in METRICS:
            raise UsageError(f"--threshold {text!r}: unknown metric {name!r}")
        return name
    m = _THRESHOLD_RE.match(text)
    if m is None:
        raise UsageError(
            f"--threshold {text!r}: expected METRIC=+10% (or error_rate=+1pp, METRIC=off)"
        )
    metric, sign, number, unit = m.groups()
    if metric not in METRICS:
        raise UsageError(f"--threshold {text!r}: unknown metric {metric!r}")
    if unit == "pp" and metric != "error_rate":
        raise UsageError(f"--threshold {text!r}: 'pp' is only for error_rate")
    if unit is None and metric != "error_rate":
        raise UsageError(f"--threshold {text!r}: give a percentage, e.g. {metric}=+10%")
    worse = "-" if metric_direction(metric) == "higher_is_better" else "+"
    if sign and sign != worse:
        raise UsageError(
            f"--threshold {text!r}: {metric} gets worse when it goes {worse} "
            f"(write {metric}={worse}{number}{unit or ''})"
        )
    floor = next((t.floor for t in DEFAULT_THRESHOLDS if t.metric == metric), 0.0)
    return Threshold(metric, float(number) / 100.0, floor)


def merge_thresholds(
    overrides: Iterable[Threshold | str], base: Sequence[Threshold] = DEFAULT_THRESHOLDS
) -> tuple[Threshold, ...]:
    """Defaults with overrides applied in order (a str drops that metric)."""
    merged = {t.metric: t for t in base}
    for item in overrides:
        if isinstance(item, str):
            merged.pop(item, None)
        else:
            merged[item.metric] = item
    return tuple(merged.values())


# --- reading run folders -------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Run:
    path: Path
    run: dict[str, Any]
    records: pl.DataFrame


def _read_run(path: Path) -> _Run:
    """run.json and records of a run folder via ``tokrate.store.load_run`` (which reads
    records.jsonl for an interrupted run). Raises RunFolderError naming the folder."""
    from tokrate.store import load_run

    loaded = load_run(path)
    return _Run(Path(loaded.path), dict(loaded.run), loaded.records)


# --- grouping and comparability ------------------------------------------------------


def _measured(records: pl.DataFrame) -> pl.DataFrame:
    """Non-warm-up rows with the derived ``decode_tps`` column."""
    return records.filter(~pl.col("warmup").fill_null(False)).with_columns(
        pl.when(pl.col("tpot_s") > 0)
        .then(1.0 / pl.col("tpot_s"))
        .otherwise(None)
        .alias("decode_tps")
    )


def _scenario_defs(run: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for sc in run.get("scenarios") or ():
        if isinstance(sc, dict) and "name" in sc:
            out[str(sc["name"])] = {k: sc.get(k) for k in ("concurrency", "rate_rps", "arrival")}
    return out


#: Load settings outside the scenario list that change what a latency means.
_LOAD_KEYS: Final = ("mode", "burstiness", "ignore_eos", "targets", "arrival")


def _load_defs(run: Mapping[str, Any]) -> dict[str, Any]:
    config = run.get("config") or {}
    load = config.get("load") or {}
    out = {k: load.get(k) for k in _LOAD_KEYS if k in load}
    if any(isinstance(t, dict) and t.get("simulated") for t in run.get("targets") or ()):
        # The embedded simulator's clock speed changes every latency by design.
        out["simulator.time_scale"] = (config.get("simulator") or {}).get("time_scale")
    return out


def _prompt_defs(run: Mapping[str, Any]) -> dict[str, Any] | None:
    prompts = (run.get("config") or {}).get("prompts")
    return prompts if isinstance(prompts, dict) else None


def _task_mix(frame: pl.DataFrame) -> dict[str, float]:
    if frame.height == 0:
        return {}
    counts = frame.group_by("task").len()
    return {str(t): n / frame.height for t, n in counts.iter_rows()}


def _prompt_problem(base: pl.DataFrame, cur: pl.DataFrame) -> str | None:
    """Why the two groups' prompts differ, or None when they match.

    Runs draw prompts in a seeded order, so two comparable runs may not send exactly
    the same ids; they must share most of them (Jaccard >= 0.5) and the same task mix
    (total variation distance <= 0.2).
    """
    ids_b = set(base["prompt_id"].to_list())
    ids_c = set(cur["prompt_id"].to_list())
    if ids_b and ids_c:
        jaccard = len(ids_b & ids_c) / len(ids_b | ids_c)
        if jaccard < 0.5:
            return f"different prompts (only {jaccard:.0%} of prompt ids shared)"
    mix_b, mix_c = _task_mix(base), _task_mix(cur)
    tvd = 0.5 * sum(abs(mix_b.get(k, 0.0) - mix_c.get(k, 0.0)) for k in mix_b.keys() | mix_c.keys())
    if tvd > 0.2:
        return f"different task mix (total variation {tvd:.2f})"
    return None


# --- statistics ----------------------------------------------------------------------

#: Bootstrap work is done in blocks of at most this many drawn values (8 bytes each
#: for the indices and the values): bounded memory for runs of any size.
_BLOCK_ELEMENTS: Final = 2_000_000


def _stat(values: np.ndarray, q: float | None, axis: int | None = None) -> Any:
    if q is None:
        return np.mean(values, axis=axis)
    return np.quantile(values, q, axis=axis)


def _bootstrap_stats(
    values: np.ndarray, q: float | None, resamples: int, block: int, rng: np.random.Generator
) -> np.ndarray:
    """``resamples`` circular-block-bootstrap replicates of the statistic.

    ``values`` are in send order. Each replicate strings together random runs of
    ``block`` consecutive requests (wrapping around) until it has n values. Requests in
    flight together share the server's and the client machine's state, so one stall
    slows all of them at once; resampling them as a block keeps that correlation, where
    an i.i.d. bootstrap would count one stall ``block`` times as independent evidence.
    ``block == 1`` is the ordinary bootstrap. Vectorised, in chunks of bounded memory.
    """
    n = values.size
    block = max(1, min(block, n))
    n_blocks = -(-n // block)
    per_chunk = max(1, _BLOCK_ELEMENTS // max(n_blocks * block, 1))
    offsets = np.arange(block)
    out = np.empty(resamples)
    done = 0
    while done < resamples:
        k = min(per_chunk, resamples - done)
        starts = rng.integers(0, n, size=(k, n_blocks, 1))
        idx = ((starts + offsets) % n).reshape(k, n_blocks * block)[:, :n]
        out[done : done + k] = _stat(values[idx], q, axis=1)
        done += k
    return out


def _block_length(group: pl.DataFrame, n: int) -> int:
    """Requests in flight together: the closed-loop concurrency, or for open loop
    rate x median E2E; capped so that a replicate has at least 5 blocks."""
    conc = group["concurrency"].drop_nulls()
    if conc.len():
        block = int(conc.max())  # type: ignore[arg-type]
    else:
        rate = group["rate_rps"].drop_nulls()
        e2e = group["e2e_s"].drop_nulls()
        block = (
            round(float(rate.max()) * float(e2e.median()))  # type: ignore[arg-type]
            if rate.len() and e2e.len()
            else 1
        )
    return max(1, min(block, n // 5))


def _relative_change_ci(
    base: np.ndarray,
    cur: np.ndarray,
    q: float | None,
    blocks: tuple[int, int],
    s: CompareSettings,
    key: str,
) -> tuple[float, float]:
    """Percentile bootstrap interval of stat(cur) / stat(base) - 1.

    Both runs are resampled independently (they are independent samples), each in
    blocks of its own ``blocks`` length; the seed mixes the settings' seed with a CRC
    of the row key so each row is reproducible.
    """
    rng = np.random.default_rng([s.seed, zlib.crc32(key.encode())])
    b = _bootstrap_stats(base, q, s.resamples, blocks[0], rng)
    c = _bootstrap_stats(cur, q, s.resamples, blocks[1], rng)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = c / b - 1.0
    ratio = ratio[np.isfinite(ratio)]
    if ratio.size == 0:
        return (math.nan, math.nan)
    alpha = (1.0 - s.confidence) / 2.0
    lo, hi = np.quantile(ratio, [alpha, 1.0 - alpha])
    return float(lo), float(hi)


def _z(confidence: float) -> float:
    from statistics import NormalDist

    return NormalDist().inv_cdf(0.5 + confidence / 2.0)


def _wilson(k: int, n: int, z: float) -> tuple[float, float]:
    p = k / n
    denom = 1.0 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return centre - half, centre + half


def newcombe_interval(
    k_base: int, n_base: int, k_cur: int, n_cur: int, confidence: float = 0.95
) -> tuple[float, float]:
    """Newcombe's hybrid-score interval of p_cur - p_base (two proportions).

    Built from the two Wilson intervals, it stays sensible at 0 errors and small n,
    where the normal approximation collapses to a zero-width interval.
    Requires n_base > 0 and n_cur > 0.
    """
    z = _z(confidence)
    p1, p2 = k_base / n_base, k_cur / n_cur
    l1, u1 = _wilson(k_base, n_base, z)
    l2, u2 = _wilson(k_cur, n_cur, z)
    d = p2 - p1
    return (
        d - math.sqrt((p2 - l2) ** 2 + (u1 - p1) ** 2),
        d + math.sqrt((u2 - p2) ** 2 + (p1 - l1) ** 2),
    )


def _judge(
    change: float, ci: tuple[float, float], abs_change: float, t: Threshold
) -> tuple[Verdict, str]:
    """Verdict from a change expressed so that positive is *worse*."""
    lo, hi = ci
    if change > t.limit and abs_change > t.floor:
        if lo > 0:
            return "regressed", f"worse than {t.describe()} and the interval excludes 0"
        return "unchanged", "worse than the threshold but not significant"
    if -change > t.limit and abs_change > t.floor:
        if hi < 0:
            return "improved", "better than the threshold and the interval excludes 0"
        return "unchanged", "better than the threshold but not significant"
    return "unchanged", f"within {t.describe()}"


# --- the comparison ------------------------------------------------------------------


def _label(endpoint: str, model: str, scenario: str, ambiguous: set[str]) -> str:
    target = f"{endpoint}/{model}" if model in ambiguous else model
    return f"{target} {scenario}"


def compare_runs(
    baseline: Path | str,
    current: Path | str,
    thresholds: Sequence[Threshold] | Mapping[str, str] | None = None,
    *,
    settings: CompareSettings | None = None,
) -> Comparison:
    """Compare ``current`` against ``baseline`` (two run folders).

    ``thresholds``: None for DEFAULT_THRESHOLDS; a sequence of Threshold replaces them
    (``merge_thresholds`` starts from the defaults); a mapping of CLI-style texts, e.g.
    ``{"ttft_p95": "+20%", "e2e_p95": "off"}``, is applied on top of the defaults. Reads only; never raises for a missing model, other
    prompts or other load: those rows are ``not_comparable``.
    Raises RunFolderError (one line) when a folder cannot be read.
    """
    s = settings or CompareSettings()
    if thresholds is None:
        ths = DEFAULT_THRESHOLDS
    elif isinstance(thresholds, Mapping):
        ths = merge_thresholds(parse_threshold(f"{k}={v}") for k, v in thresholds.items())
    else:
        ths = tuple(thresholds)
    base_run = _read_run(Path(baseline))
    cur_run = _read_run(Path(current))
    base = _measured(base_run.records)
    cur = _measured(cur_run.records)
    warnings: list[str] = []
    for side, run in (("baseline", base_run), ("current", cur_run)):
        if run.run.get("status") not in (None, "complete"):
            warnings.append(f"{side} run {run.path.name} is {run.run.get('status')}")

    run_problem: str | None = None
    load_b, load_c = _load_defs(base_run.run), _load_defs(cur_run.run)
    for k in sorted(load_b.keys() | load_c.keys()):
        if load_b.get(k) != load_c.get(k):
            name = k if k.startswith("simulator.") else f"load.{k}"
            run_problem = (
                f"different load settings ({name}: {load_b.get(k)!r} vs {load_c.get(k)!r})"
            )
            break
    pb, pc = _prompt_defs(base_run.run), _prompt_defs(cur_run.run)
    if run_problem is None and pb is not None and pc is not None and pb != pc:
        run_problem = "different prompts (config.prompts)"
    sc_base, sc_cur = _scenario_defs(base_run.run), _scenario_defs(cur_run.run)

    keys_b = set(base.select("endpoint", "model", "scenario").unique().iter_rows())
    keys_c = set(cur.select("endpoint", "model", "scenario").unique().iter_rows())
    targets_b = {(e, m) for e, m, _ in keys_b}
    targets_c = {(e, m) for e, m, _ in keys_c}
    models: dict[str, set[str]] = {}
    for e, m, _ in keys_b | keys_c:
        models.setdefault(m, set()).add(e)
    ambiguous = {m for m, eps in models.items() if len(eps) > 1}

    results: list[MetricResult] = []
    for endpoint, model, scenario in sorted(keys_b | keys_c):
        label = _label(endpoint, model, scenario, ambiguous)
        gb = base.filter(
            (pl.col("endpoint") == endpoint)
            & (pl.col("model") == model)
            & (pl.col("scenario") == scenario)
        )
        gc = cur.filter(
            (pl.col("endpoint") == endpoint)
            & (pl.col("model") == model)
            & (pl.col("scenario") == scenario)
        )
        problem = run_problem
        if problem is None:
            if (endpoint, model) not in targets_b:
                problem = "model missing in baseline"
            elif (endpoint, model) not in targets_c:
                problem = "model missing in current run"
            elif gb.height == 0:
                problem = "scenario missing in baseline"
            elif gc.height == 0:
                problem = "scenario missing in current run"
            elif sc_base.get(scenario) != sc_cur.get(scenario):
                problem = "different load (scenario definition)"
            else:
                problem = _prompt_problem(gb, gc)
        for t in ths:
            results.append(
                replace(
                    _compare_metric(gb, gc, t, s, problem, f"{endpoint}|{model}|{scenario}"),
                    endpoint=endpoint,
                    model=model,
                    scenario=scenario,
                    label=label,
                )
            )
    return Comparison(
        baseline_dir=str(baseline),
        current_dir=str(current),
        baseline_run_id=str(base_run.run.get("run_id") or Path(baseline).name),
        current_run_id=str(cur_run.run.get("run_id") or Path(current).name),
        results=tuple(results),
        thresholds=ths,
        settings=s,
        warnings=tuple(warnings),
    )


def _compare_metric(
    gb: pl.DataFrame,
    gc: pl.DataFrame,
    t: Threshold,
    s: CompareSettings,
    problem: str | None,
    key: str,
) -> MetricResult:
    """One row (endpoint/model/scenario/label are filled in by the caller)."""
    metric = t.metric
    empty = MetricResult(
        endpoint="",
        model="",
        scenario="",
        metric=metric,
        unit="rate" if metric == "error_rate" else _SERIES[metric.rsplit("_", 1)[0]][1],
        direction=t.direction,
        threshold=t,
        verdict="not_comparable",
        reason=problem or "",
    )
    if metric == "error_rate":
        return _compare_error_rate(gb, gc, t, s, problem, empty)
    series, stat = metric.rsplit("_", 1)
    column = _SERIES[series][0]
    # Send order (wall clock at t0) so that the bootstrap's blocks are neighbours in time.
    ob = gb.filter((pl.col("status") == "ok") & pl.col(column).is_not_null()).sort("started_at")
    oc = gc.filter((pl.col("status") == "ok") & pl.col(column).is_not_null()).sort("started_at")
    vb = ob[column].to_numpy().astype(float)
    vc = oc[column].to_numpy().astype(float)
    q = _STATS[stat]
    out = replace(
        empty,
        n_baseline=int(vb.size),
        n_current=int(vc.size),
        baseline=float(_stat(vb, q)) if vb.size else None,
        current=float(_stat(vc, q)) if vc.size else None,
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
    blocks = (_block_length(ob, vb.size), _block_length(oc, vc.size))
    lo, hi = _relative_change_ci(vb, vc, q, blocks, s, f"{key}|{metric}")
    if math.isnan(lo):
        return replace(out, reason="bootstrap interval undefined")
    sign = -1.0 if t.direction == "higher_is_better" else 1.0
    worse_ci = (sign * lo, sign * hi) if sign > 0 else (sign * hi, sign * lo)
    verdict, reason = _judge(sign * change, worse_ci, abs(out.current - out.baseline), t)
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
    verdict, reason = _judge(change, (lo, hi), abs(change), t)
    return replace(out, change=change, ci_low=lo, ci_high=hi, verdict=verdict, reason=reason)


# --- rendering -----------------------------------------------------------------------


def _fmt_value(value: float | None, unit: str) -> str:
    if value is None:
        return "–"
    if unit == "s":
        # Three significant digits, like the run report: 1,515 ms / 45.0 ms / 0.043 ms.
        ms = value * 1000.0
        if abs(ms) >= 100:
            return f"{ms:,.0f} ms"
        if abs(ms) >= 10:
            return f"{ms:.1f} ms"
        return f"{ms:.2f} ms" if abs(ms) >= 1 else f"{ms:.3f} ms"
    if unit == "rate":
        return f"{value * 100:.1f}%"
    return f"{value:.1f} {unit}"


def describe_change(r: MetricResult) -> str:
    """``1.21x slower [1.15, 1.27]``: a ratio where > 1 always reads the worse way for
    "slower" and the better way for "faster"; ``+2.0pp [0.4, 3.9]`` for error rate."""
    if r.change is None or r.ci_low is None or r.ci_high is None:
        return "–"
    if r.metric == "error_rate":
        return f"{r.change * 100:+.1f}pp [{r.ci_low * 100:+.1f}, {r.ci_high * 100:+.1f}]"
    ratio, lo, hi = 1.0 + r.change, 1.0 + r.ci_low, 1.0 + r.ci_high
    if ratio <= 0 or lo <= 0:
        # A value (or a replicate) of 0 has no finite ratio: show the plain change.
        return f"{r.change:+.0%} [{r.ci_low:+.0%}, {r.ci_high:+.0%}]"
    # Latency: a ratio > 1 is slower; throughput: a ratio < 1 is slower. The number
    # shown is always >= 1 (hyperfine style), so a ratio below 1 is inverted, which
    # also swaps the interval's ends.
    worse = ratio > 1.0 if r.direction == "lower_is_better" else ratio < 1.0
    word = "slower" if worse else "faster"
    if ratio >= 1.0:
        shown, a, b = ratio, lo, hi
    else:
        shown = 1.0 / ratio
        a = 1.0 / hi if hi > 0 else math.inf
        b = 1.0 / lo if lo > 0 else math.inf
    return f"{shown:.2f}x {word} [{a:.2f}, {b:.2f}]"


def _line(r: MetricResult) -> str:
    if r.verdict == "not_comparable":
        return f"{r.label} {r.metric}: not comparable ({r.reason})"
    return f"{r.label} {r.metric}: {describe_change(r)}, {r.verdict}"


def _headline(c: Comparison) -> str:
    n = c.counts
    parts = f"{n['regressed']} regressed, {n['improved']} improved, {n['unchanged']} unchanged, {n['not_comparable']} not comparable"
    word = {"regressed": "REGRESSION", "ok": "no regression", "not_comparable": "NOT COMPARABLE"}[
        c.verdict
    ]
    return f"tokrate compare: {word} ({parts}) — {c.current_run_id} vs baseline {c.baseline_run_id}"


def render_markdown(c: Comparison) -> str:
    """A CI step summary: the verdict line first, then the lines that need attention,
    then the full table. Plain GitHub-flavoured markdown."""
    icon = {"regressed": "❌", "ok": "✅", "not_comparable": "⚠️"}[c.verdict]
    out = [f"### {icon} {_headline(c)}", ""]
    notable = [r for r in c.results if r.verdict in ("regressed", "improved")]
    notable.sort(key=lambda r: r.verdict != "regressed")
    not_comp = [r for r in c.results if r.verdict == "not_comparable"]
    for r in notable:
        out.append(f"- {_line(r)}")
    # One line per target when all its metrics share the reason (a missing model),
    # else one line per metric.
    reasons: dict[str, set[str]] = {}
    for r in c.results:
        reasons.setdefault(r.label, set()).add(r.reason if r.verdict == "not_comparable" else "")
    seen: set[str] = set()
    for r in not_comp:
        if len(reasons[r.label]) == 1:
            if r.label not in seen:
                seen.add(r.label)
                out.append(f"- {r.label}: not comparable ({r.reason})")
        else:
            out.append(f"- {_line(r)}")
    for w in c.warnings:
        out.append(f"- warning: {w}")
    if len(out) > 2:
        out.append("")
    out.append("| target | metric | baseline | current | change [95% CI] | threshold | verdict |")
    out.append("|---|---|---:|---:|---|---:|---|")
    for r in c.results:
        th = r.threshold.describe() if r.threshold else "–"
        out.append(
            f"| {_md_escape(r.label)} | {r.metric} | {_fmt_value(r.baseline, r.unit)} "
            f"| {_fmt_value(r.current, r.unit)} | {describe_change(r)} | {th} | "
            f"{r.verdict.replace('_', ' ')} |"
        )
    s = c.settings
    out.append("")
    out.append(
        f"{s.confidence:.0%} bootstrap intervals ({s.resamples} resamples, seed {s.seed}); "
        "a regression needs the change past its threshold and an interval excluding 0."
    )
    return "\n".join(out) + "\n"


def _md_escape(text: str) -> str:
    return text.replace("|", "\\|")


def render_json(c: Comparison) -> str:
    """The JSON document (schema_version 1), indented, with a trailing newline."""
    return orjson.dumps(c.to_dict(), option=orjson.OPT_INDENT_2).decode() + "\n"


def render_table(c: Comparison, console: Any) -> None:
    """Print the verdict line and a rich table to ``console`` (rich.console.Console)."""
    from rich.table import Table

    style = {
        "regressed": "bold red",
        "improved": "green",
        "unchanged": "",
        "not_comparable": "yellow",
    }
    console.print(_headline(c))
    table = Table(show_edge=False)
    for name, justify in (
        ("target", "left"),
        ("metric", "left"),
        ("baseline", "right"),
        ("current", "right"),
        ("change [95% CI]", "left"),
        ("threshold", "right"),
        ("verdict", "left"),
    ):
        table.add_column(name, justify=justify)  # type: ignore[arg-type]
    for r in c.results:
        table.add_row(
            r.label,
            r.metric,
            _fmt_value(r.baseline, r.unit),
            _fmt_value(r.current, r.unit),
            describe_change(r) if r.verdict != "not_comparable" else r.reason,
            r.threshold.describe() if r.threshold else "–",
            r.verdict.replace("_", " "),
            style=style[r.verdict] or None,
        )
    console.print(table)
    for w in c.warnings:
        console.print(f"warning: {w}")


# --- tokrate run --baseline ----------------------------------------------------------


def _resolve_baseline(baseline: str, reports_root: Path) -> Path | None:
    """The baseline folder for REF, or None when REF is latest-good and none exists yet.
    Raises RunFolderError when the pointer names a folder that is gone."""
    if baseline != LATEST_GOOD:
        return Path(baseline)
    pointer = reports_root / LATEST_GOOD
    if not pointer.is_file():
        return None
    name = pointer.read_text(encoding="utf-8").strip()
    target = reports_root / name
    if not name or not target.is_dir():
        raise RunFolderError(
            f"{pointer}: names run folder {name!r}, which does not exist under {reports_root}"
        )
    return target


def _write_pointer(reports_root: Path, run_dir: Path) -> None:
    """Atomically point latest-good at ``run_dir`` (write a temp file, then rename)."""
    pointer = reports_root / LATEST_GOOD
    try:
        name = str(run_dir.resolve().relative_to(reports_root.resolve()))
    except ValueError:
        name = str(run_dir.resolve())
    tmp = pointer.with_name(f".{LATEST_GOOD}.{os.getpid()}.tmp")
    tmp.write_text(name.replace(os.sep, "/") + "\n", encoding="utf-8")
    os.replace(tmp, pointer)


def check_baseline(
    run_dir: Path,
    baseline: str,
    reports_root: Path,
    thresholds: Sequence[Threshold] | None = None,
    on_comparison: Callable[[Comparison], None] | None = None,
) -> int:
    """Compare a finished run against ``baseline`` and return the exit code (0 / 1).

    ``on_comparison`` receives the Comparison when there was a baseline to compare
    with (``tokrate run --baseline`` prints its table).

    ``baseline`` is a run folder path or ``latest-good`` (the pointer file
    ``reports_root/latest-good``). Writes ``comparison.md`` and ``comparison.json``
    into ``run_dir``. With ``latest-good``: when no pointer exists yet the run passes
    and becomes latest-good; otherwise the pointer moves to this run only when it has
    no regression and the run completed. Raises RunFolderError for an unreadable
    folder or a dangling pointer.
    """
    run_dir = Path(run_dir)
    reports_root = Path(reports_root)
    base_dir = _resolve_baseline(baseline, reports_root)
    run = _read_run(run_dir).run
    complete = run.get("status") in (None, "complete")
    if base_dir is None:
        text = f"### ✅ tokrate compare: no baseline yet — {run_dir.name} becomes {LATEST_GOOD}\n"
        doc: dict[str, Any] = {
            "schema_version": COMPARISON_SCHEMA_VERSION,
            "kind": "tokrate-comparison",
            "verdict": "no_baseline",
            "counts": {},
            "baseline": None,
            "current": {"path": str(run_dir), "run_id": run.get("run_id")},
            "thresholds": [],
            "settings": {},
            "warnings": [],
            "results": [],
        }
        if not complete:
            text = f"### ⚠️ tokrate compare: no baseline yet; {run_dir.name} is {run.get('status')}, so it does not become {LATEST_GOOD}\n"
        (run_dir / "comparison.md").write_text(text, encoding="utf-8")
        (run_dir / "comparison.json").write_bytes(orjson.dumps(doc, option=orjson.OPT_INDENT_2))
        if complete:
            _write_pointer(reports_root, run_dir)
        return 0
    comparison = compare_runs(base_dir, run_dir, thresholds)
    if on_comparison is not None:
        on_comparison(comparison)
    (run_dir / "comparison.md").write_text(render_markdown(comparison), encoding="utf-8")
    (run_dir / "comparison.json").write_text(render_json(comparison), encoding="utf-8")
    code = comparison.exit_code
    if baseline == LATEST_GOOD and code == 0 and complete:
        _write_pointer(reports_root, run_dir)
    return code
