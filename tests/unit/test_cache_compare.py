"""The prompt-cache row of a comparison (tokrate.analysis.cache_compare): the value is
summary.json's hit rate, the interval Newcombe's over each run's effective number of
requests, and runs without a cached figure get no row."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest
from helpers.documents import run_info

from tokrate.analysis.cache_compare import cache_share, compare_cache_hit_rate, has_cached_tokens
from tokrate.analysis.compare import compare_loaded
from tokrate.analysis.metrics import analysed, summarize
from tokrate.analysis.stats import newcombe_interval
from tokrate.runfolder.comparison import CompareSettings, MetricResult
from tokrate.runfolder.loaded_run import LoadedRun
from tokrate.runfolder.records import RequestRecord
from tokrate.runfolder.records_frame import records_to_frame
from tokrate.spec.thresholds import (
    ABSOLUTE_METRICS,
    CACHE_HIT_RATE_DEFAULT,
    DEFAULT_COMPARE_THRESHOLDS,
    parse_threshold,
)

RUN = {"run_id": "r1", "scenarios": [{"name": "c1", "concurrency": 1}]}


def _records(shares: list[float | None], inputs: int | list[int] = 1000) -> list[RequestRecord]:
    sizes = inputs if isinstance(inputs, list) else [inputs] * len(shares)
    out = []
    for i, (share, n_in) in enumerate(zip(shares, sizes, strict=True)):
        out.append(
            RequestRecord(
                run_id="r1",
                endpoint="ep",
                model="m7b",
                scenario="c1",
                prompt_id=f"p{i}",
                task="chat",
                request_index=i,
                started_at=1000.0 + i,
                t0_ns=i,
                status="ok",
                concurrency=1,
                ttft_s=0.1,
                e2e_s=0.2,
                output_tokens=2,
                input_tokens=n_in,
                cached_tokens=None if share is None else round(share * n_in),
                chunk_offsets_s=(0.1, 0.2),
                tokens_source="usage",
            )
        )
    return out


def _group(shares: list[float | None], inputs: int | list[int] = 1000) -> pl.DataFrame:
    return analysed(records_to_frame(_records(shares, inputs)))


def _row(base: pl.DataFrame, cur: pl.DataFrame) -> MetricResult:
    t = CACHE_HIT_RATE_DEFAULT
    empty = MetricResult(
        endpoint="ep",
        model="m7b",
        scenario="c1",
        metric=t.metric,
        unit="rate",
        threshold=t.describe(),
        verdict="not_comparable",
        reason="",
    )
    return compare_cache_hit_rate(base, cur, t, CompareSettings(), None, empty)


def test_value_is_the_summary_hit_rate_and_n_eff_weighs_requests() -> None:
    shares: list[float | None] = [0.0, 0.5, 0.9, 0.9, None]
    inputs = [100, 100, 1000, 3000, 500]
    share = cache_share(_group(shares, inputs))
    (group,) = summarize(records_to_frame(_records(shares, inputs)), run_info(RUN)).groups
    assert group.cache is not None
    assert share.n == group.cache.n == 4
    assert share.rate == group.cache.hit_rate == (0 + 50 + 900 + 2700) / 4200
    # Kish: (sum w)^2 / sum w^2, fewer than 4 when one long prompt carries the share.
    assert share.n_eff == pytest.approx(4200**2 / (100**2 + 100**2 + 1000**2 + 3000**2))
    assert 1.0 < share.n_eff < 4.0
    assert cache_share(_group([0.5] * 8)).n_eff == pytest.approx(8.0)


def test_a_cache_that_stopped_working_regresses_and_noise_does_not() -> None:
    warm = [0.0] + [0.95] * 29
    stopped = _row(_group(warm), _group([0.0] * 30))
    assert stopped.verdict == "regressed", stopped.reason
    assert stopped.change == pytest.approx(-0.95 * 29 / 30)
    assert stopped.ci_high is not None and stopped.ci_high < 0
    # The interval is Newcombe's over the effective counts (30 equal prompts: n = 30).
    b = 0.95 * 29 / 30
    assert (stopped.ci_low, stopped.ci_high) == pytest.approx(newcombe_interval(b * 30, 30, 0, 30))
    # The same runs: unchanged; a small wobble: within the threshold.
    assert _row(_group(warm), _group(warm)).verdict == "unchanged"
    wobble = _row(_group(warm), _group([0.0, 0.0] + [0.95] * 28))
    assert wobble.verdict == "unchanged" and "within -10pp" in wobble.reason
    # Ten requests that drop 30 points are not enough evidence.
    few = _row(_group([0.6] * 10), _group([0.3] * 10))
    assert few.verdict == "unchanged" and "not significant" in few.reason
    # ... but thirty are.
    assert _row(_group([0.6] * 30), _group([0.3] * 30)).verdict == "regressed"
    assert _row(_group([0.0] * 30), _group(warm)).verdict == "improved"


def test_inconclusive_when_a_side_did_not_report_or_has_too_few() -> None:
    gone = _row(_group([0.9] * 20), _group([None] * 20))
    assert gone.verdict == "inconclusive"
    assert (
        gone.reason == "the current run reports no cached tokens (the baseline's 20 requests did)"
    )
    assert gone.n_current == 0 and gone.current is None
    few = _row(_group([0.9] * 20), _group([0.0] * 5))
    assert few.verdict == "inconclusive" and few.reason.startswith("too few requests")


def test_no_row_when_neither_run_reports_cached_tokens(tmp_path: Path) -> None:
    def loaded(shares: list[float | None], name: str) -> LoadedRun:
        frame = records_to_frame(_records(shares))
        info = run_info(RUN)
        return LoadedRun(tmp_path / name, info, frame, summarize(frame, info))

    silent = [None] * 20
    assert not has_cached_tokens(records_to_frame(_records(silent)))
    rows = compare_loaded(loaded(silent, "a"), loaded(silent, "b")).results
    assert rows and "cache_hit_rate" not in {r.metric for r in rows}
    rows = compare_loaded(loaded([0.9] * 20, "a"), loaded([0.0] * 20, "b")).results
    (row,) = [r for r in rows if r.metric == "cache_hit_rate"]
    assert row.verdict == "regressed" and row.change_kind == "absolute"
    off = compare_loaded(
        loaded([0.9] * 20, "a"), loaded([0.0] * 20, "b"), {"cache_hit_rate": "off"}
    )
    assert "cache_hit_rate" not in {r.metric for r in off.results}


def test_threshold_text_and_defaults() -> None:
    assert "cache_hit_rate" in ABSOLUTE_METRICS
    assert CACHE_HIT_RATE_DEFAULT in DEFAULT_COMPARE_THRESHOLDS
    t = parse_threshold("cache_hit_rate=-20pp")
    assert not isinstance(t, str) and t.limit == 0.20 and t.describe() == "-20pp"
    assert CACHE_HIT_RATE_DEFAULT.describe() == "-10pp"
