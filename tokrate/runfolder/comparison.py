"""comparison.json: a verdict of one run against a baseline, as frozen types with
one reader.

:class:`Comparison` of :class:`MetricResult` rows is what
:func:`tokrate.analysis.compare.compare_runs` decides (the judging lives there). Its
fields are the documented JSON document's keys, in order (docs/regressions.md):
:func:`tokrate.runfolder.jsondoc.to_json` writes it, into a run folder by the baseline
check (:func:`tokrate.runfolder.store.write_comparison`) and for ``tokrate compare
--format json``; :func:`comparison_from_json` and :func:`read_comparison` read it back,
so the process that measured a run learns its verdict without the analysis stack (no
polars here). A row keeps its threshold as the text it shows (``+10%``) and where it
came from: every renderer draws that, and the judging is done.

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

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Final, Literal, NamedTuple

from tokrate.errors import RunFolderError
from tokrate.runfolder.files import read_json
from tokrate.runfolder.jsondoc import DEFAULT_FROM, from_json
from tokrate.spec.metric_table import Direction
from tokrate.spec.thresholds import ABSOLUTE_METRICS, SeriesKey, Threshold, metric_direction

__all__ = [
    "COMPARISON_FILE",
    "COMPARISON_SCHEMA_HISTORY",
    "COMPARISON_SCHEMA_VERSION",
    "CONFIRM_FOLDER",
    "CompareSettings",
    "ComparedRun",
    "Comparison",
    "Confirmation",
    "MetricResult",
    "NoiseSource",
    "ReferenceInfo",
    "SeriesGroup",
    "Verdict",
    "combined_exit",
    "comparison_from_json",
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
    tail_confidence: float = 0.99
    intervals: bool = True


@dataclass(frozen=True, slots=True, kw_only=True)
class Confirmation:
    """A regressed row's re-measurement (``<run>/confirm/``) judged against the same
    baseline with the same threshold: its value, change, interval and verdict."""

    current: float | None
    change: float | None
    ci: tuple[float, float] | None = None
    n_current: int = 0
    verdict: Verdict
    reason: str

    @property
    def ci_low(self) -> float | None:
        return None if self.ci is None else self.ci[0]

    @property
    def ci_high(self) -> float | None:
        return None if self.ci is None else self.ci[1]


@dataclass(frozen=True, slots=True, kw_only=True)
class NoiseSource:
    """Where a comparison's fitted thresholds came from (tokrate.analysis.noise): the
    history ``folder``, the fewest and the most earlier comparable runs a series had
    (``runs``), how many series got a threshold fitted above their configured one
    (``fitted``), and ``fallback``: what judged series with too few."""

    folder: str
    runs: tuple[int, int]
    fitted: int = 0
    fallback: str

    @property
    def runs_min(self) -> int:
        return self.runs[0]

    @property
    def runs_max(self) -> int:
        return self.runs[1]


@dataclass(frozen=True, slots=True)
class ReferenceInfo:
    """The nights a nightly check judged against (tokrate.analysis.reference): their
    run ids and names, oldest first, the window (the most nights a group's reference
    is the median of) and the run id of the acceptance it starts at (None: none)."""

    runs: tuple[str, ...]
    names: tuple[str, ...] = field(default=(), metadata=DEFAULT_FROM("runs"))
    window: int = 0
    accepted: str | None = None


class SeriesGroup(NamedTuple):
    """One (endpoint, model, scenario) group of a comparison's rows."""

    endpoint: str
    model: str
    scenario: str


@dataclass(frozen=True, slots=True, kw_only=True)
class MetricResult:
    """One (target, scenario, metric) verdict.

    ``change`` is relative (current / baseline - 1) for every metric but the rates of
    ABSOLUTE_METRICS, where it is the absolute difference of the rates; ``ci`` (low,
    high) bounds the same quantity. Values are in ``unit``. Unknown is ``None``.
    ``label`` names the row ("sim-7b c=4", or "endpoint/model c=4" where a model name
    is ambiguous). ``threshold`` is the text of the threshold that judged the row
    (``+10%``: Threshold.describe) and ``threshold_source`` where it came from
    ("noise": fitted to this series' history); both None for a row judged by none.
    """

    endpoint: str
    model: str
    scenario: str
    label: str = ""
    metric: str
    unit: str
    baseline: float | None = None
    current: float | None = None
    change: float | None = None
    ci: tuple[float, float] | None = None
    threshold: str | None = None
    threshold_source: str | None = None
    n_baseline: int = 0
    n_current: int = 0
    verdict: Verdict
    reason: str
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
    #: Written for readers of the file (jsondoc), never read back.
    __json_computed__: ClassVar = {"unit": ("direction",), "change": ("change_kind",)}

    @property
    def direction(self) -> Direction:
        return metric_direction(self.metric)

    @property
    def change_kind(self) -> str:
        """``absolute`` (a difference of rates) or ``relative`` (a ratio minus 1)."""
        return "absolute" if self.metric in ABSOLUTE_METRICS else "relative"

    @property
    def ci_low(self) -> float | None:
        return None if self.ci is None else self.ci[0]

    @property
    def ci_high(self) -> float | None:
        return None if self.ci is None else self.ci[1]

    @property
    def key(self) -> SeriesKey:
        return (self.endpoint, self.model, self.scenario, self.metric)

    @property
    def group(self) -> tuple[str, str, str]:
        return (self.endpoint, self.model, self.scenario)


@dataclass(frozen=True, slots=True)
class ComparedRun:
    """One side of a comparison: the run folder's ``path`` as given, its run id, label
    and its own warnings (run.json), as they were printed when it was measured."""

    path: str
    run_id: str
    label: str | None = None
    warnings: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class Comparison:
    """Everything a comparison found; render with ``tokrate.report.terminal.comparison_text``.

    Fields in the order of comparison.json's keys (docs/regressions.md); ``verdict``
    and ``counts`` are written for readers of the file and never read back."""

    #: A comparison read back keeps the version it was written with.
    schema_version: int = COMPARISON_SCHEMA_VERSION
    kind: Literal["tokrate-comparison"] = "tokrate-comparison"
    baseline: ComparedRun
    current: ComparedRun
    #: The run-wide threshold of each judged metric (a row's own, fitted to noise,
    #: is on the row).
    thresholds: tuple[Threshold, ...]
    settings: CompareSettings
    warnings: tuple[str, ...] = ()
    #: Whether a confirmation measurement (``<current>/confirm``) was read.
    confirmed: bool = False
    #: Groups with a regressed row that no confirmation measurement covered (tokrate
    #: run --baseline re-measures them once).
    unconfirmed: tuple[SeriesGroup, ...] = ()
    #: Where fitted thresholds came from; None when none were fitted.
    noise: NoiseSource | None = None
    #: A nightly check's reference nights; None when judged against one baseline run.
    reference: ReferenceInfo | None = None
    results: tuple[MetricResult, ...]
    __json_computed__: ClassVar = {"kind": ("verdict", "counts")}

    def __post_init__(self) -> None:
        if self.schema_version not in COMPARISON_SCHEMA_HISTORY:
            raise ValueError(
                f"comparison schema_version {self.schema_version!r} is not one this"
                f" tokrate reads ({', '.join(map(str, COMPARISON_SCHEMA_HISTORY))})"
            )

    @property
    def baseline_name(self) -> str:
        """The baseline run's name, or the reference's nights ("the 10 latest good
        nights, n03 … n12")."""
        ref = self.reference
        if ref is not None and len(ref.names) > 1:
            return f"the {len(ref.names)} latest good nights ({ref.names[0]} … {ref.names[-1]})"
        return self.baseline.label or self.baseline.run_id

    @property
    def current_name(self) -> str:
        return self.current.label or self.current.run_id

    @property
    def fitted_rows(self) -> int:
        """How many rows were judged by a threshold fitted to their history's noise."""
        return sum(1 for r in self.results if r.threshold_source == "noise")

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


def comparison_from_json(data: Any, where: str = COMPARISON_FILE) -> Comparison:
    """A comparison.json document of a comparison (not ``no_baseline``). Raises
    RunFolderError (one line naming ``where``) for an unknown schema version or a
    malformed document."""
    return from_json(Comparison, data, where)


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
    return comparison_from_json(data, str(path))


def combined_exit(run_code: int, check_code: int) -> int:
    """A run's exit code with its baseline check's: 1 (a regression, or a target
    without an ok request) wins over 2 (nothing comparable) and 3 (inconclusive)."""
    if 1 in (run_code, check_code):
        return 1
    return max(run_code, check_code)
