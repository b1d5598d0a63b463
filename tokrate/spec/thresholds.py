"""Regression thresholds: which metrics a comparison judges, and by how much each may
get worse before it counts.

A metric name is ``<series>_<stat>`` (``ttft_p95``, ``decode_tps_p50``, ``e2e_mean``)
or ``error_rate`` or ``pass_rate`` (checked answers that passed, docs/quality.md) or
``cache_hit_rate`` (prompt tokens the server said it served from its cache). A
:class:`Threshold` is relative to the baseline value (0.10 = 10%) for every metric except
the rates (:data:`ABSOLUTE_METRICS`), where it is an absolute difference of rates
(0.01 = 1 percentage point); its ``floor`` is an absolute change below which nothing is
news. A :class:`ThresholdSet` holds the thresholds of a comparison: one per metric,
plus optional per-series overrides (for example those fitted to the run-to-run noise
recorded in history, :func:`tokrate.analysis.history.noise_thresholds`).

Parsing errors are :class:`ThresholdError` (a UsageError) naming the text; the CLI and
the config loader each add where the text came from (``--threshold``,
``compare.thresholds[2]``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import ClassVar, Final

from tokrate.errors import UsageError
from tokrate.spec.metric_table import METRIC_TABLE, STATS, Direction, Metric, Unit, metric_of

__all__ = [
    "ABSOLUTE_METRICS",
    "CACHE_HIT_RATE_DEFAULT",
    "CAPACITY_DEFAULT",
    "PASS_RATE_DEFAULT",
    "DEFAULT_COMPARE_THRESHOLDS",
    "DEFAULT_THRESHOLDS",
    "METRICS",
    "RUN_METRICS",
    "SERIES",
    "SeriesKey",
    "Threshold",
    "ThresholdError",
    "ThresholdSet",
    "merge_thresholds",
    "metric_column",
    "metric_direction",
    "metric_unit",
    "parse_threshold",
]

#: (endpoint, model, scenario, metric): one line of a comparison or a history.
SeriesKey = tuple[str, str, str, str]

#: Per-request series a metric can be built on: name -> (record-derived column, unit,
#: direction), the compared series of :data:`~tokrate.spec.metric_table.METRIC_TABLE`.
#: ``decode_tps`` is 1 / tpot_s per request (docs/definitions.md).
SERIES: Final[dict[str, tuple[str, str, Direction]]] = {
    m.name: (m.column, m.unit, m.direction)
    for m in METRIC_TABLE
    if m.compared and m.column is not None
}

#: Every metric name a comparison understands: ``<series>_<stat>``, the shares
#: (``error_rate``, ``pass_rate``, ``cache_hit_rate``) and ``capacity`` (a capacity
#: search's result per target, tokrate.analysis.capacity_compare).
METRICS: Final[tuple[str, ...]] = (
    *(f"{s}_{t}" for s in SERIES for t in STATS),
    *(m.name for m in METRIC_TABLE if m.compared and m.column is None),
)
#: Metrics of a whole run's search rather than of one group's requests.
RUN_METRICS: Final = tuple(m.name for m in METRIC_TABLE if m.unit == "level")
#: Rates whose change (and threshold) is an absolute difference in percentage points.
ABSOLUTE_METRICS: Final = tuple(m.name for m in METRIC_TABLE if m.is_share)

_THRESHOLD_RE: Final = re.compile(
    r"^\s*([a-z0-9_]+)\s*=\s*([+-]?)\s*([0-9]*\.?[0-9]+)\s*(%|pp)?\s*$"
)


class ThresholdError(UsageError):
    """A threshold text that does not parse: ``text`` and the ``problem`` with it."""

    def __init__(self, text: str, problem: str) -> None:
        super().__init__(f"{text!r}: {problem}")
        self.text = text
        self.problem = problem


def metric_direction(metric: str) -> Direction:
    """Which way is better for a metric name from METRICS."""
    return metric_of(metric).direction


def metric_unit(metric: str) -> Unit:
    """ "s", "tok/s", "rate" (error_rate, pass_rate, cache_hit_rate) or "level"
    (capacity)."""
    return metric_of(metric).unit


def metric_column(metric: str) -> tuple[str, float | None]:
    """(record column, quantile or None for the mean) of a series metric."""
    series, stat = metric.rsplit("_", 1)
    return SERIES[series][0], STATS[stat]


@dataclass(frozen=True, slots=True)
class Threshold:
    """How much worse a metric may get before it counts as a regression (see the
    module doc). Invariant: ``limit >= 0`` and ``floor >= 0``; the direction comes
    from the metric. ``source`` says where the limit came from ("default", "config",
    "noise": fitted to history's run-to-run spread)."""

    metric: str
    limit: float
    floor: float = 0.0
    source: str = field(default="default", compare=False)
    #: Written after ``floor`` for readers of a comparison.json (tokrate.runfolder.jsondoc),
    #: never read back.
    __json_computed__: ClassVar = {"floor": ("text",)}

    def __post_init__(self) -> None:
        if self.metric not in METRICS:
            raise UsageError(f"unknown metric {self.metric!r} (known: {', '.join(METRICS)})")
        if not (self.limit >= 0 and self.floor >= 0):
            raise UsageError(f"threshold for {self.metric} must be >= 0")

    @property
    def direction(self) -> Direction:
        return metric_direction(self.metric)

    def describe(self) -> str:
        """``+10%`` / ``-5%`` / ``+1pp``: the sign shows which way is worse."""
        sign = "-" if self.direction == "higher_is_better" else "+"
        unit = "pp" if self.metric in ABSOLUTE_METRICS else "%"
        return f"{sign}{self.limit * 100:.3g}{unit}"

    @property
    def text(self) -> str:
        """:meth:`describe`, as comparison.json writes it."""
        return self.describe()


def _default(metric: Metric) -> Threshold:
    assert metric.default is not None
    stat = metric.default.stat
    name = metric.name if stat is None else f"{metric.name}_{stat}"
    return Threshold(name, metric.default.limit, metric.default.floor)


#: What every comparison judges in every run unless turned off: the per-request
#: metrics and the error rate, from the table's defaults (floors: 1 ms on latencies,
#: 0.1 ms on TPOT).
DEFAULT_THRESHOLDS: Final[tuple[Threshold, ...]] = tuple(
    _default(m) for m in METRIC_TABLE if m.default is not None and m.default.only_with is None
)


#: The capacity threshold when none is given: compared whenever both runs searched.
CAPACITY_DEFAULT: Final = _default(metric_of("capacity"))
#: The pass-rate threshold when none is given: a drop of 5 percentage points (judged
#: only where some answer was checked; a regression also needs Newcombe's interval of
#: the difference to exclude 0).
PASS_RATE_DEFAULT: Final = _default(metric_of("pass_rate"))
#: The prompt-cache threshold when none is given: a drop of 10 percentage points in
#: the share of prompt tokens served from the cache (judged only where a server
#: reported cached tokens; a regression also needs Newcombe's interval of the
#: difference to exclude 0, tokrate.analysis.cache_compare).
CACHE_HIT_RATE_DEFAULT: Final = _default(metric_of("cache_hit_rate"))
#: What a comparison judges by default: the per-request metrics, the pass rate of
#: checked answers, the prompt-cache hit rate and capacity (a run without a capacity
#: search has no capacity row, one without checks no pass-rate row, one whose server
#: reported no cached tokens no cache row; ``capacity=off`` / ``pass_rate=off`` /
#: ``cache_hit_rate=off`` drop them).
DEFAULT_COMPARE_THRESHOLDS: Final = (
    *DEFAULT_THRESHOLDS,
    PASS_RATE_DEFAULT,
    CACHE_HIT_RATE_DEFAULT,
    CAPACITY_DEFAULT,
)


def _default_floor(metric: str) -> float:
    return next((t.floor for t in DEFAULT_THRESHOLDS if t.metric == metric), 0.0)


def parse_threshold(text: str) -> Threshold | str:
    """Parse ``METRIC=+10%`` / ``decode_tps_p50=-5%`` / ``error_rate=+1pp`` /
    ``METRIC=off``.

    Returns the Threshold, or the metric name alone for ``off`` (drop that metric).
    The sign is optional but, when given, must point the metric's worse way (``+`` for
    latencies and error rate, ``-`` for throughput). For ``error_rate`` both ``%`` and
    ``pp`` mean percentage points. The default absolute floor of the metric is kept.
    Raises ThresholdError (one line, naming the text).
    """
    name, _, value = text.partition("=")
    name = name.strip()
    if value.strip().lower() == "off":
        if name not in METRICS:
            raise ThresholdError(text, f"unknown metric {name!r}")
        return name
    m = _THRESHOLD_RE.match(text)
    if m is None:
        raise ThresholdError(text, "expected METRIC=+10% (or error_rate=+1pp, METRIC=off)")
    metric, sign, number, unit = m.groups()
    if metric not in METRICS:
        raise ThresholdError(text, f"unknown metric {metric!r}")
    if unit == "pp" and metric not in ABSOLUTE_METRICS:
        raise ThresholdError(text, "'pp' is only for error_rate, pass_rate and cache_hit_rate")
    if unit is None and metric not in ABSOLUTE_METRICS:
        raise ThresholdError(text, f"give a percentage, e.g. {metric}=+10%")
    worse = "-" if metric_direction(metric) == "higher_is_better" else "+"
    if sign and sign != worse:
        raise ThresholdError(
            text,
            f"{metric} gets worse when it goes {worse} "
            f"(write {metric}={worse}{number}{unit or ''})",
        )
    return Threshold(metric, float(number) / 100.0, _default_floor(metric), source="config")


def merge_thresholds(
    overrides: Iterable[Threshold | str], base: Sequence[Threshold] = DEFAULT_COMPARE_THRESHOLDS
) -> tuple[Threshold, ...]:
    """Defaults with overrides applied in order (a str drops that metric)."""
    merged = {t.metric: t for t in base}
    for item in overrides:
        if isinstance(item, str):
            merged.pop(item, None)
        else:
            merged[item.metric] = item
    return tuple(merged.values())


@dataclass(frozen=True, slots=True)
class ThresholdSet:
    """The thresholds of one comparison: ``metrics`` (one Threshold per judged metric,
    in order) and ``per_series`` overrides keyed by (endpoint, model, scenario, metric).
    A metric not in ``metrics`` is not judged at all."""

    metrics: tuple[Threshold, ...] = DEFAULT_COMPARE_THRESHOLDS
    per_series: Mapping[SeriesKey, Threshold] = field(default_factory=dict)

    @classmethod
    def of(
        cls, thresholds: ThresholdSet | Sequence[Threshold] | Mapping[str, str] | None
    ) -> ThresholdSet:
        """Normalise what callers pass: None (the defaults), Thresholds (replacing the
        defaults), ``{"ttft_p95": "+20%", "e2e_p95": "off"}`` texts on top of the
        defaults, or a ThresholdSet as is."""
        if thresholds is None:
            return cls()
        if isinstance(thresholds, ThresholdSet):
            return thresholds
        if isinstance(thresholds, Mapping):
            return cls(merge_thresholds(parse_threshold(f"{k}={v}") for k, v in thresholds.items()))
        return cls(tuple(thresholds))

    def for_series(self, endpoint: str, model: str, scenario: str, metric: str) -> Threshold:
        """The threshold that judges one series' metric (an override, else the metric's)."""
        found = self.per_series.get((endpoint, model, scenario, metric))
        if found is not None:
            return found
        for t in self.metrics:
            if t.metric == metric:
                return t
        raise KeyError(metric)
