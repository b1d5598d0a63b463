"""comparison.json: a verdict of one run against a baseline, as frozen types with
one reader.

:class:`Comparison` of :class:`MetricResult` rows is what
:func:`tokrate.analysis.compare.compare_runs` decides (the judging lives there);
``to_dict`` is the documented JSON document (docs/regressions.md), written into a run
folder by the baseline check (:func:`tokrate.runfolder.store.write_comparison`) and
printed by ``tokrate compare --format json``; :meth:`Comparison.from_dict` and
:func:`read_comparison` read it back, so the process that measured a run learns its
verdict without the analysis stack (no polars here). A threshold read back carries
the limit its text shows (``+10%``), as every renderer draws it.

Comparison JSON schema history (bump COMPARISON_SCHEMA_VERSION and add a line):

    1: first version.
    (later, optional: baseline/current "label", threshold "source")
    (later, in 2: metrics ``pass_rate`` and ``cache_hit_rate``, absolute like
    ``error_rate``)
    2: verdict "inconclusive" (row and document), exit code 3; baseline/current
       "warnings" (each run's run.json warnings); row "confirmation"; "confirmed",
       "unconfirmed"; "noise" (where fitted thresholds came from); settings
       "min_tail_samples" and "intervals".
    3: a percentile needs MLPerf LoadGen's early-stopping minimum at 99% confidence
       (settings "tail_confidence" replaces "min_tail_samples"); rows carry
       "baseline_es" and "current_es" (the early-stopping estimates of a p90, p95 or
       p99, null otherwise or below the samples they need), "noise_nights" and
       "noise_limit" (the series' earlier healthy nights of the benchmark and the
       noise limit they give, null with fewer than 5 or without a fit),
       "baseline_runs" (the nights whose median the baseline value is); a document
       "reference" (a nightly check's reference nights: run ids, names, window,
       accepted run; null for a single baseline run).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Final, Literal

from tokrate.errors import RunFolderError
from tokrate.runfolder.files import read_json
from tokrate.runfolder.jsonread import JsonReader
from tokrate.spec.metric_table import Direction
from tokrate.spec.thresholds import (
    ABSOLUTE_METRICS,
    SeriesKey,
    Threshold,
    ThresholdSet,
    metric_direction,
)

__all__ = [
    "COMPARISON_FILE",
    "COMPARISON_SCHEMA_HISTORY",
    "COMPARISON_SCHEMA_VERSION",
    "CONFIRM_FOLDER",
    "CompareSettings",
    "Comparison",
    "Confirmation",
    "MetricResult",
    "NoiseSource",
    "ReferenceInfo",
    "Verdict",
    "combined_exit",
    "read_comparison",
]

#: The file a baseline check writes into the run it judged (and comparison.md beside).
COMPARISON_FILE: Final = "comparison.json"

COMPARISON_SCHEMA_VERSION: Final = 3
COMPARISON_SCHEMA_HISTORY: Final[dict[int, str]] = {
    1: "first version",
    2: "inconclusive verdicts, both runs' warnings, confirmation, unconfirmed, noise",
    3: "early-stopping sample minimum and estimates, noise per row, reference nights",
}

Verdict = Literal["improved", "unchanged", "regressed", "inconclusive", "not_comparable"]

_VERDICTS: Final = ("regressed", "improved", "unchanged", "inconclusive", "not_comparable")

#: The folder, inside a run folder, that holds its confirmation measurement (a run
#: folder of its own; tokrate.load.confirm).
CONFIRM_FOLDER: Final = "confirm"


@dataclass(frozen=True, slots=True)
class CompareSettings:
    """Statistics knobs. ``resamples`` bootstrap draws at ``confidence``, seeded by
    ``seed`` (plus a stable hash of each row's key, so rows are independent but every
    rerun gives the same interval). ``min_samples``: fewer values on either side make
    a row inconclusive; a percentile also needs MLPerf LoadGen's early-stopping
    minimum at ``tail_confidence`` (:func:`tokrate.analysis.compare.samples_needed`:
    130 for a p95 at 99%). ``intervals`` False skips the bootstrap where the verdict
    does not depend on it (a change within its threshold): history does, the verdict
    is the same."""

    confidence: float = 0.95
    resamples: int = 2000
    seed: int = 0
    min_samples: int = 10
    intervals: bool = True
    tail_confidence: float = 0.99


def _ci_of(data: Mapping[str, Any], where: str) -> tuple[float, float] | None:
    ci = data.get("ci")
    if ci is None:
        return None
    if not (isinstance(ci, list) and len(ci) == 2 and all(isinstance(v, int | float) for v in ci)):
        raise RunFolderError(f"{where}: ci must be [low, high] or null, got {ci!r}")
    return float(ci[0]), float(ci[1])


def _verdict_of(r: JsonReader, where: str) -> Verdict:
    verdict = r.str_("verdict")
    if verdict not in _VERDICTS:
        raise RunFolderError(f"{where}: unknown verdict {verdict!r}")
    return verdict  # type: ignore[return-value]


@dataclass(frozen=True, slots=True)
class Confirmation:
    """A regressed row's re-measurement (``<run>/confirm/``) judged against the same
    baseline with the same threshold: its value, change, interval and verdict."""

    current: float | None
    change: float | None
    ci_low: float | None
    ci_high: float | None
    n_current: int
    verdict: Verdict
    reason: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "current": self.current,
            "change": self.change,
            "ci": None if self.ci_low is None else [self.ci_low, self.ci_high],
            "n_current": self.n_current,
            "verdict": self.verdict,
            "reason": self.reason,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], where: str) -> Confirmation:
        r = JsonReader(data, where)
        ci = _ci_of(data, where)
        return cls(
            current=r.opt_float("current"),
            change=r.opt_float("change"),
            ci_low=None if ci is None else ci[0],
            ci_high=None if ci is None else ci[1],
            n_current=r.opt_int("n_current") or 0,
            verdict=_verdict_of(r, where),
            reason=r.str_("reason"),
        )


@dataclass(frozen=True, slots=True)
class NoiseSource:
    """Where a comparison's fitted thresholds came from (tokrate.analysis.noise): the
    history ``folder``, the fewest and the most earlier comparable runs a series had
    (``runs_min``, ``runs_max``), how many series got a threshold fitted above their
    configured one (``fitted``), and ``fallback``: what judged series with too few."""

    folder: str
    runs_min: int
    runs_max: int
    fallback: str
    fitted: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "folder": self.folder,
            "runs": [self.runs_min, self.runs_max],
            "fitted": self.fitted,
            "fallback": self.fallback,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], where: str) -> NoiseSource:
        r = JsonReader(data, where)
        runs = data.get("runs")
        if not (
            isinstance(runs, list) and len(runs) == 2 and all(isinstance(v, int) for v in runs)
        ):
            raise RunFolderError(f"{where}: runs must be [fewest, most], got {runs!r}")
        return cls(
            folder=r.str_("folder"),
            runs_min=int(runs[0]),
            runs_max=int(runs[1]),
            fallback=r.str_("fallback"),
            fitted=r.opt_int("fitted") or 0,
        )


@dataclass(frozen=True, slots=True)
class ReferenceInfo:
    """The nights a nightly check judged against (tokrate.analysis.reference): their
    run ids and names, oldest first, the window (the most nights a group's reference
    is the median of) and the run id of the acceptance it starts at (None: none)."""

    run_ids: tuple[str, ...]
    names: tuple[str, ...]
    window: int
    accepted: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "runs": list(self.run_ids),
            "names": list(self.names),
            "window": self.window,
            "accepted": self.accepted,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], where: str) -> ReferenceInfo:
        r = JsonReader(data, where)
        runs = r.strings("runs")
        names = r.strings("names") or runs
        return cls(runs, names, r.opt_int("window") or len(runs), r.opt_str("accepted"))


@dataclass(frozen=True, slots=True)
class MetricResult:
    """One (target, scenario, metric) verdict.

    ``change`` is relative (current / baseline - 1) for every metric but the rates of
    ABSOLUTE_METRICS, where it is the absolute difference of the rates; ``ci_low``/``ci_high`` bound the
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
    confirmation: Confirmation | None = None
    #: The early-stopping estimates of a p90, p95 or p99 (tokrate.analysis.early_stopping),
    #: None for other statistics or below the samples they need.
    baseline_es: float | None = None
    current_es: float | None = None
    #: The series' history (tokrate.analysis.noise): its earlier healthy nights of the
    #: benchmark and the noise limit they give (None with too few, or without a fit).
    noise_nights: int = 0
    noise_limit: float | None = None
    #: How many nights the baseline value is the median of (1: one baseline run).
    baseline_runs: int = 1

    @property
    def key(self) -> SeriesKey:
        return (self.endpoint, self.model, self.scenario, self.metric)

    @property
    def group(self) -> tuple[str, str, str]:
        return (self.endpoint, self.model, self.scenario)

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
            "change_kind": "absolute" if self.metric in ABSOLUTE_METRICS else "relative",
            "ci": None if self.ci_low is None else [self.ci_low, self.ci_high],
            "threshold": None if self.threshold is None else self.threshold.describe(),
            "threshold_source": None if self.threshold is None else self.threshold.source,
            "n_baseline": self.n_baseline,
            "n_current": self.n_current,
            "verdict": self.verdict,
            "reason": self.reason,
            "confirmation": None if self.confirmation is None else self.confirmation.to_dict(),
            "baseline_es": self.baseline_es,
            "current_es": self.current_es,
            "noise_nights": self.noise_nights,
            "noise_limit": self.noise_limit,
            "baseline_runs": self.baseline_runs,
        }

    @classmethod
    def from_dict(
        cls, data: Mapping[str, Any], where: str, thresholds: Mapping[str, Threshold]
    ) -> MetricResult:
        """One row of comparison.json's ``results`` (``thresholds``: the document's
        own, by metric, for the floor of a row judged by its metric's threshold).
        Raises RunFolderError naming ``where``."""
        r = JsonReader(data, where)
        metric = r.str_("metric")
        ci = _ci_of(data, where)
        again = r.opt_mapping("confirmation")
        return cls(
            endpoint=r.str_("endpoint"),
            model=r.str_("model"),
            scenario=r.str_("scenario"),
            metric=metric,
            unit=r.str_("unit"),
            direction=metric_direction(metric),
            threshold=_row_threshold(
                metric, r.opt_str("threshold"), r.opt_str("threshold_source"), thresholds, where
            ),
            verdict=_verdict_of(r, where),
            reason=r.str_("reason"),
            baseline=r.opt_float("baseline"),
            current=r.opt_float("current"),
            change=r.opt_float("change"),
            ci_low=None if ci is None else ci[0],
            ci_high=None if ci is None else ci[1],
            n_baseline=r.opt_int("n_baseline") or 0,
            n_current=r.opt_int("n_current") or 0,
            label=r.str_("label"),
            confirmation=None
            if again is None
            else Confirmation.from_dict(again, f"{where}: confirmation"),
            baseline_es=r.opt_float("baseline_es"),
            current_es=r.opt_float("current_es"),
            noise_nights=r.opt_int("noise_nights") or 0,
            noise_limit=r.opt_float("noise_limit"),
            baseline_runs=r.opt_int("baseline_runs") or 1,
        )


def _limit_of(text: str, where: str) -> float:
    """The limit a threshold's text shows: ``+10%`` / ``-5%`` -> 0.10 / 0.05, ``+1pp``
    -> 0.01 (the inverse of Threshold.describe)."""
    number = text.lstrip("+-").removesuffix("pp").removesuffix("%")
    try:
        return float(number) / 100.0
    except ValueError:
        raise RunFolderError(f"{where}: threshold {text!r} is not +N% or +Npp") from None


def _row_threshold(
    metric: str,
    text: str | None,
    source: str | None,
    thresholds: Mapping[str, Threshold],
    where: str,
) -> Threshold | None:
    """A row's threshold: its metric's when the row shows the same one, else one built
    from the row's own text (a per-series threshold fitted to noise)."""
    if text is None:
        return None
    known = thresholds.get(metric)
    if known is not None and known.describe() == text and known.source == (source or known.source):
        return known
    limit = _limit_of(text, where)
    if known is not None:  # fitted per series: the metric's floor, a limit of its own
        return replace(known, limit=limit, source=source or known.source)
    return Threshold(metric, limit, source=source or "default")


@dataclass(frozen=True, slots=True)
class Comparison:
    """Everything a comparison found; render with ``tokrate.report.terminal.comparison_text``."""

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
    #: Each run's own warnings (run.json), as they were printed when it was measured.
    baseline_warnings: tuple[str, ...] = ()
    current_warnings: tuple[str, ...] = ()
    #: (endpoint, model, scenario) groups with a regressed row that no confirmation
    #: measurement covered (tokrate run --baseline re-measures them once).
    unconfirmed: tuple[tuple[str, str, str], ...] = ()
    #: Where fitted thresholds came from; None when none were fitted.
    noise: NoiseSource | None = None
    #: Whether a confirmation measurement (``<current>/confirm``) was read.
    confirmed: bool = False
    #: A nightly check's reference nights; None when judged against one baseline run.
    reference: ReferenceInfo | None = None

    @property
    def baseline_name(self) -> str:
        """The baseline run's name, or the reference's nights ("the 10 latest good
        nights, n03 … n12")."""
        ref = self.reference
        if ref is not None and len(ref.names) > 1:
            return f"the {len(ref.names)} latest good nights ({ref.names[0]} … {ref.names[-1]})"
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
    def inconclusive(self) -> bool:
        return any(r.verdict == "inconclusive" for r in self.results)

    @property
    def verdict(self) -> str:
        """``regressed``; ``not_comparable`` (nothing could be compared);
        ``inconclusive`` (no regression, but a row could not be judged); or ``ok``."""
        if self.regressed:
            return "regressed"
        if not self.comparable:
            return "not_comparable"
        if self.inconclusive:
            return "inconclusive"
        return "ok"

    @property
    def counts(self) -> dict[str, int]:
        out = dict.fromkeys(_VERDICTS, 0)
        for r in self.results:
            out[r.verdict] += 1
        return out

    @property
    def exit_code(self) -> int:
        """0 no regression, 1 at least one regression, 2 nothing was comparable, 3 no
        regression but at least one row inconclusive."""
        return {"regressed": 1, "not_comparable": 2, "inconclusive": 3}.get(self.verdict, 0)

    def result(self, endpoint: str, model: str, scenario: str, metric: str) -> MetricResult | None:
        for r in self.results:
            if r.key == (endpoint, model, scenario, metric):
                return r
        return None

    def to_dict(self) -> dict[str, Any]:
        """The documented JSON document (docs/regressions.md), schema_version 2."""
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
                "warnings": list(self.baseline_warnings),
            },
            "current": {
                "path": self.current_dir,
                "run_id": self.current_run_id,
                "label": self.current_label,
                "warnings": list(self.current_warnings),
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
                "tail_confidence": s.tail_confidence,
                "intervals": s.intervals,
            },
            "warnings": list(self.warnings),
            "confirmed": self.confirmed,
            "unconfirmed": [
                {"endpoint": e, "model": m, "scenario": sc} for e, m, sc in self.unconfirmed
            ],
            "noise": None if self.noise is None else self.noise.to_dict(),
            "reference": None if self.reference is None else self.reference.to_dict(),
            "results": [r.to_dict() for r in self.results],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], where: str = COMPARISON_FILE) -> Comparison:
        """A comparison.json document of a comparison (not ``no_baseline``). Raises
        RunFolderError (one line naming ``where``) for an unknown schema version or a
        malformed document."""
        r = JsonReader(data, where)
        version = data.get("schema_version")
        if version not in COMPARISON_SCHEMA_HISTORY:
            raise RunFolderError(
                f"{where}: comparison schema_version {version!r} is not one this tokrate"
                f" reads ({', '.join(map(str, COMPARISON_SCHEMA_HISTORY))})"
            )
        base = JsonReader(r.mapping("baseline"), f"{where}: baseline")
        cur = JsonReader(r.mapping("current"), f"{where}: current")
        metrics: dict[str, Threshold] = {}
        for i, t in enumerate(r.items("thresholds")):
            tr = JsonReader(t, f"{where}: thresholds[{i}]")
            metric = tr.str_("metric")
            metrics[metric] = Threshold(
                metric,
                tr.opt_float("limit") or 0.0,
                tr.opt_float("floor") or 0.0,
                source=tr.str_("source", "default"),
            )
        st = JsonReader(r.mapping("settings"), f"{where}: settings")
        defaults = CompareSettings()
        settings = CompareSettings(
            confidence=st.opt_float("confidence") or defaults.confidence,
            resamples=st.opt_int("resamples") or defaults.resamples,
            seed=st.opt_int("seed") or defaults.seed,
            min_samples=st.opt_int("min_samples") or defaults.min_samples,
            intervals=st.opt_bool("intervals") is not False,
            # Schemas 1 and 2 judged a percentile by another sample minimum (none, then
            # 10 values beyond it); the document keeps saying what it was judged by.
            tail_confidence=st.opt_float("tail_confidence") or defaults.tail_confidence,
        )
        noise = r.opt_mapping("noise")
        reference = r.opt_mapping("reference")
        results = tuple(
            MetricResult.from_dict(row, f"{where}: results[{i}]", metrics)
            for i, row in enumerate(r.items("results"))
        )
        return cls(
            baseline_dir=base.str_("path"),
            current_dir=cur.str_("path"),
            baseline_run_id=base.str_("run_id"),
            current_run_id=cur.str_("run_id"),
            results=results,
            # The per-series thresholds a comparison was judged by are the rows'
            # thresholds fitted to history's noise (tokrate.analysis.history).
            thresholds=ThresholdSet(
                tuple(metrics.values()),
                {
                    r.key: r.threshold
                    for r in results
                    if r.threshold is not None and r.threshold.source == "noise"
                },
            ),
            settings=settings,
            warnings=r.strings("warnings"),
            baseline_label=base.opt_str("label"),
            current_label=cur.opt_str("label"),
            baseline_warnings=base.strings("warnings"),
            current_warnings=cur.strings("warnings"),
            unconfirmed=tuple(
                (g.str_("endpoint"), g.str_("model"), g.str_("scenario"))
                for g in (
                    JsonReader(u, f"{where}: unconfirmed[{i}]")
                    for i, u in enumerate(r.items("unconfirmed"))
                )
            ),
            noise=None if noise is None else NoiseSource.from_dict(noise, f"{where}: noise"),
            confirmed=bool(r.opt_bool("confirmed")),
            reference=None
            if reference is None
            else ReferenceInfo.from_dict(reference, f"{where}: reference"),
        )


def read_comparison(run_dir: Path | str) -> Comparison | None:
    """The verdict a baseline check wrote into ``run_dir`` (its comparison.json); None
    when the check found no baseline yet (verdict ``no_baseline``). Raises
    RunFolderError when there is no comparison.json or it cannot be read."""
    path = Path(run_dir) / COMPARISON_FILE
    data = read_json(path)
    if data is None:
        raise RunFolderError(f"{path}: no comparison (no baseline check ran)")
    if not isinstance(data, dict):
        raise RunFolderError(f"{path}: not a comparison (not an object)")
    if data.get("verdict") == "no_baseline":
        return None
    return Comparison.from_dict(data, str(path))


def combined_exit(run_code: int, check_code: int) -> int:
    """A run's exit code with its baseline check's: 1 (a regression, or a target
    without an ok request) wins over 2 (nothing comparable) and 3 (inconclusive)."""
    if 1 in (run_code, check_code):
        return 1
    return max(run_code, check_code)
