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
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Final, Literal

import orjson

from tokrate.errors import RunFolderError
from tokrate.runfolder.jsonread import JsonReader
from tokrate.spec.thresholds import (
    Direction,
    SeriesKey,
    Threshold,
    ThresholdSet,
    metric_direction,
)

__all__ = [
    "COMPARISON_FILE",
    "COMPARISON_SCHEMA_HISTORY",
    "COMPARISON_SCHEMA_VERSION",
    "CompareSettings",
    "Comparison",
    "MetricResult",
    "Verdict",
    "read_comparison",
]

#: The file a baseline check writes into the run it judged (and comparison.md beside).
COMPARISON_FILE: Final = "comparison.json"

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

    @classmethod
    def from_dict(
        cls, data: Mapping[str, Any], where: str, thresholds: Mapping[str, Threshold]
    ) -> MetricResult:
        """One row of comparison.json's ``results`` (``thresholds``: the document's
        own, by metric, for the floor of a row judged by its metric's threshold).
        Raises RunFolderError naming ``where``."""
        r = JsonReader(data, where)
        metric = r.str_("metric")
        ci = data.get("ci")
        if ci is not None and not (
            isinstance(ci, list) and len(ci) == 2 and all(isinstance(v, int | float) for v in ci)
        ):
            raise RunFolderError(f"{where}: ci must be [low, high] or null, got {ci!r}")
        verdict = r.str_("verdict")
        if verdict not in _VERDICTS:
            raise RunFolderError(f"{where}: unknown verdict {verdict!r}")
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
            verdict=verdict,  # type: ignore[arg-type]
            reason=r.str_("reason"),
            baseline=r.opt_float("baseline"),
            current=r.opt_float("current"),
            change=r.opt_float("change"),
            ci_low=None if ci is None else float(ci[0]),
            ci_high=None if ci is None else float(ci[1]),
            n_baseline=r.opt_int("n_baseline") or 0,
            n_current=r.opt_int("n_current") or 0,
            label=r.str_("label"),
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
        )
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
        )


def read_comparison(run_dir: Path | str) -> Comparison | None:
    """The verdict a baseline check wrote into ``run_dir`` (its comparison.json); None
    when the check found no baseline yet (verdict ``no_baseline``). Raises
    RunFolderError when there is no comparison.json or it cannot be read."""
    path = Path(run_dir) / COMPARISON_FILE
    try:
        data = orjson.loads(path.read_bytes())
    except FileNotFoundError:
        raise RunFolderError(f"{path}: no comparison (no baseline check ran)") from None
    except (OSError, ValueError) as err:
        raise RunFolderError(f"{path}: unreadable ({err})") from None
    if not isinstance(data, dict):
        raise RunFolderError(f"{path}: not a comparison (not an object)")
    if data.get("verdict") == "no_baseline":
        return None
    return Comparison.from_dict(data, str(path))
