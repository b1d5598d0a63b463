"""The metric table (tokrate.spec.metric_table): every metric declared once, and the
readers agree with it."""

from __future__ import annotations

import dataclasses

import pytest

from tokrate.runfolder.jsondoc import to_json
from tokrate.runfolder.summary import (
    DIST_METRICS,
    TASK_METRICS,
    Distribution,
    Group,
    GroupCounts,
    TaskGroup,
)
from tokrate.spec.metric_table import METRIC_TABLE, STATS, metric_label, metric_of, summarised
from tokrate.spec.thresholds import (
    ABSOLUTE_METRICS,
    DEFAULT_COMPARE_THRESHOLDS,
    DEFAULT_THRESHOLDS,
    METRICS,
    SERIES,
    metric_direction,
    metric_unit,
)


def _distribution_fields(cls: type) -> list[str]:
    return [f.name for f in dataclasses.fields(cls) if f.type in ("Distribution", Distribution)]


def test_every_distribution_the_summary_writes_is_declared_in_its_order() -> None:
    assert _distribution_fields(Group) == list(summarised("group")) == list(DIST_METRICS)
    assert _distribution_fields(TaskGroup) == list(summarised("task")) == list(TASK_METRICS)
    # And what summary.json holds: every distribution of a written group is a row.
    written = to_json(Group("e", "m", "c=1", 1, None, counts=GroupCounts()))
    dists = [k for k, v in written.items() if isinstance(v, dict) and "p50" in v]
    assert dists == list(DIST_METRICS)


def test_names_columns_and_labels_are_declared_once() -> None:
    for attr in ("name", "column", "label"):
        values = [getattr(m, attr) for m in METRIC_TABLE if getattr(m, attr) is not None]
        assert len(values) == len(set(values)), attr


def test_units_and_directions_agree_with_the_names() -> None:
    for m in METRIC_TABLE:
        if m.unit == "s":
            assert m.column is not None and m.column.endswith("_s"), m.name
            assert m.direction == "lower_is_better", m.name
        elif m.unit == "tok/s":
            assert m.column is not None and m.column.endswith("_tps"), m.name
            assert m.direction == "higher_is_better", m.name
        else:  # a share or capacity: judged as it is, not a per-request column
            assert m.column is None and m.summary == () and m.compared, m.name
        if m.default is not None:
            assert m.compared, m.name
            assert (m.default.stat is None) == (m.column is None), m.name
            assert m.default.stat is None or m.default.stat in STATS, m.name


def test_every_metric_a_comparison_judges_resolves_to_its_row() -> None:
    assert set(ABSOLUTE_METRICS) == {"error_rate", "pass_rate", "cache_hit_rate"}
    for metric in METRICS:
        row = metric_of(metric)
        assert metric_direction(metric) == row.direction
        assert metric_unit(metric) == row.unit
    assert set(SERIES) == {m.name for m in METRIC_TABLE if m.compared and m.column}
    defaults = {t.metric: (t.limit, t.floor) for t in DEFAULT_COMPARE_THRESHOLDS}
    assert defaults == {
        "ttft_p95": (0.10, 0.001),
        "tpot_p50": (0.05, 0.0001),
        "e2e_p95": (0.10, 0.001),
        "decode_tps_p50": (0.05, 0.0),
        "error_rate": (0.01, 0.0),
        "pass_rate": (0.05, 0.0),
        "cache_hit_rate": (0.10, 0.0),
        "capacity": (0.10, 0.0),
    }
    # Judged in every run: the metrics every run has (a pass rate needs checked
    # answers, a cache hit rate cached tokens, a capacity a search).
    assert [t.metric for t in DEFAULT_THRESHOLDS] == [
        "ttft_p95",
        "tpot_p50",
        "e2e_p95",
        "decode_tps_p50",
        "error_rate",
    ]
    with pytest.raises(KeyError):
        metric_of("itl_s")  # a column, not a metric name
    with pytest.raises(KeyError):
        metric_of("ttft_p42")


def test_labels_are_the_words_of_the_tables() -> None:
    assert metric_label("tpot_p50") == "TPOT p50"
    assert metric_label("ttft_s") == "TTFT"
    assert metric_label("ttft_from_due_p95") == "TTFT from due p95"
    assert metric_label("decode_tps_p50") == "decode tok/s p50"
    assert metric_label("itl_p99") == "ITL p99"
    assert metric_label("cache_hit_rate") == "cache hit rate"
    assert metric_label("not_a_metric") == "not_a_metric"
