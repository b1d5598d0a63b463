"""Every metric tokrate measures, declared once: name, record column, unit, direction,
label, summary keys and default threshold.

The summary (which distributions summary.json keeps), the comparison (a metric's unit,
direction and default threshold), history, the tier pick and the report (a metric's
words) all read this table; a new metric is one row here plus the code that measures
it. Lean: no polars, numpy or matplotlib, so the measuring process may import it.

Names: a per-request *series* is judged by a statistic, ``<name>_<stat>``
(``tpot_p50``, :data:`STATS`); a *share* (``error_rate``, ``pass_rate``,
``cache_hit_rate``) and ``capacity`` are judged as they are. Definitions of the
figures themselves: docs/definitions.md.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal

__all__ = [
    "METRIC_TABLE",
    "STATS",
    "DefaultThreshold",
    "Direction",
    "Metric",
    "SummaryPlace",
    "Unit",
    "metric_label",
    "metric_of",
    "summarised",
]

Direction = Literal["lower_is_better", "higher_is_better"]
#: "s" (seconds), "tok/s", "rate" (a share in [0, 1], compared in percentage points)
#: or "level" (a capacity search's concurrency or rate).
Unit = Literal["s", "tok/s", "rate", "level"]
#: Where summary.json keeps a per-request series' distribution: in each group
#: (``groups[].<column>``) and in each group's task parts (``groups[].by_task[].<column>``).
SummaryPlace = Literal["group", "task"]

#: Statistic name -> quantile (None: the mean) a series metric is judged by.
STATS: Final[dict[str, float | None]] = {
    "p50": 0.50,
    "p90": 0.90,
    "p95": 0.95,
    "p99": 0.99,
    "mean": None,
}


@dataclass(frozen=True, slots=True)
class DefaultThreshold:
    """How much worse a metric may get before a comparison calls it a regression when
    nothing else is configured (tokrate.spec.thresholds): ``stat`` the statistic a
    series is judged by (None for a share or capacity), ``limit`` relative to the
    baseline (0.10 = 10%; a share: absolute, 0.01 = 1 percentage point), ``floor`` the
    absolute change below which nothing is news (in the metric's unit), ``only_with``
    what a run must have for the row to exist (None: every run has it)."""

    stat: str | None
    limit: float
    floor: float = 0.0
    only_with: str | None = None


@dataclass(frozen=True, slots=True)
class Metric:
    """One metric (module doc).

    ``name``: the series id of threshold names (``tpot`` in ``tpot_p50``), or the
    whole metric name of a share or capacity; ``column``: the per-request column
    :func:`tokrate.analysis.metrics.derive` writes and summary.json's distribution key
    (None: not a per-request series); ``label``: the words tables, charts and
    sentences write (``TPOT p95``); ``summary``: where summary.json keeps its
    distribution (() for none); ``compared``: a comparison can judge it;
    ``default``: judged by every comparison unless turned off (None: only when asked).
    """

    name: str
    column: str | None
    unit: Unit
    direction: Direction
    label: str
    summary: tuple[SummaryPlace, ...] = ()
    compared: bool = False
    default: DefaultThreshold | None = None

    @property
    def is_share(self) -> bool:
        """A share of requests (or tokens): compared as an absolute difference of rates."""
        return self.unit == "rate"


_BOTH: Final[tuple[SummaryPlace, ...]] = ("group", "task")
_GROUP: Final[tuple[SummaryPlace, ...]] = ("group",)

#: Every metric, per-request series first in summary.json's order, then the shares
#: and capacity in the order a comparison lists them. Defaults: loose enough that two
#: identical runs on a busy machine agree, tight enough to catch a provider getting a
#: tenth slower; floors 1 ms on latencies, 0.1 ms on TPOT. A pass-rate or cache-hit
#: drop also needs Newcombe's interval of the difference to exclude 0.
# fmt: off
METRIC_TABLE: Final[tuple[Metric, ...]] = (
    #      name                    column                   unit     direction            label                   summary  compared  default
    Metric("ttft",                 "ttft_s",                "s",     "lower_is_better",  "TTFT",                 _BOTH,   True,     DefaultThreshold("p95", 0.10, 0.001)),
    Metric("tpot",                 "tpot_s",                "s",     "lower_is_better",  "TPOT",                 _BOTH,   True,     DefaultThreshold("p50", 0.05, 0.0001)),
    Metric("itl",                  "itl_s",                 "s",     "lower_is_better",  "ITL",                  _GROUP),
    Metric("e2e",                  "e2e_s",                 "s",     "lower_is_better",  "E2E",                  _BOTH,   True,     DefaultThreshold("p95", 0.10, 0.001)),
    Metric("decode_tps",           "decode_tps",            "tok/s", "higher_is_better", "decode tok/s",         _BOTH,   True,     DefaultThreshold("p50", 0.05)),
    Metric("first_answer",         "first_answer_s",        "s",     "lower_is_better",  "first answer",         _GROUP,  True),
    Metric("ttft_from_scheduled",  "ttft_from_scheduled_s", "s",     "lower_is_better",  "TTFT from scheduled",  _GROUP),
    Metric("send_delay",           "send_delay_s",          "s",     "lower_is_better",  "send delay",           _GROUP),
    Metric("ttft_from_due",        "ttft_from_due_s",       "s",     "lower_is_better",  "TTFT from due",        _GROUP),
    Metric("send_queue",           "send_queue_s",          "s",     "lower_is_better",  "send queue",           _GROUP),
    Metric("error_rate",           None,                    "rate",  "lower_is_better",  "error rate",           (),      True,     DefaultThreshold(None, 0.01)),
    Metric("pass_rate",            None,                    "rate",  "higher_is_better", "pass rate",            (),      True,     DefaultThreshold(None, 0.05, only_with="checked answers")),
    Metric("cache_hit_rate",       None,                    "rate",  "higher_is_better", "cache hit rate",       (),      True,     DefaultThreshold(None, 0.10, only_with="cached tokens")),
    Metric("capacity",             None,                    "level", "higher_is_better", "capacity",             (),      True,     DefaultThreshold(None, 0.10, only_with="a capacity search")),
)
# fmt: on

_BY_NAME: Final[dict[str, Metric]] = {m.name: m for m in METRIC_TABLE}


def metric_of(name: str) -> Metric:
    """The table row of a metric name: a series (``tpot``), a series statistic
    (``tpot_p50``) or a share / capacity (``error_rate``). Raises KeyError."""
    found = _BY_NAME.get(name)
    if found is not None:
        return found
    series, _, stat = name.rpartition("_")
    found = _BY_NAME.get(series)
    if found is None or stat not in STATS or found.column is None:
        raise KeyError(name)
    return found


def summarised(place: SummaryPlace) -> tuple[str, ...]:
    """The columns whose distribution summary.json keeps at ``place``, in its order."""
    return tuple(m.column for m in METRIC_TABLE if place in m.summary and m.column is not None)


def metric_label(name: str) -> str:
    """A metric name in the words of the report's tables: ``tpot_p50`` -> "TPOT p50",
    ``ttft_s`` or ``ttft`` -> "TTFT", ``error_rate`` -> "error rate"; an unknown
    name as it is."""
    by_column = next((m for m in METRIC_TABLE if m.column == name), None)
    if by_column is not None:
        return by_column.label
    try:
        metric = metric_of(name)
    except KeyError:
        return name
    if name == metric.name:
        return metric.label
    return f"{metric.label} {name[len(metric.name) + 1 :]}"
