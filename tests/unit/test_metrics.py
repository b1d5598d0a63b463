"""Metrics against hand-computed values (tokrate.analysis.metrics, tokrate.analysis.stats)."""

from __future__ import annotations

import math
import statistics
from typing import Any

import polars as pl
import pytest
from helpers.documents import summary_dict as summarize

from tokrate.analysis.metrics import derive
from tokrate.analysis.stats import (
    bootstrap_ci,
    distribution,
    fit_power_law,
    stability_warnings,
)
from tokrate.analysis.student_t import t_quantile_975
from tokrate.runfolder.records import RequestRecord
from tokrate.runfolder.records_frame import records_to_frame
from tokrate.runfolder.summary import SUMMARY_SCHEMA_VERSION


def rec(i: int, **kw: Any) -> RequestRecord:
    base: dict[str, Any] = {
        "run_id": "r1",
        "endpoint": "ep",
        "model": "m7b",
        "scenario": "c1",
        "prompt_id": f"p{i}",
        "task": "chat",
        "request_index": i,
        "started_at": 1000.0 + i,
        "t0_ns": i,
        "status": "ok",
        "concurrency": 1,
    }
    base.update(kw)
    return RequestRecord(**base)


def ok_rec(i: int, ttft: float, e2e: float, tokens: int, **kw: Any) -> RequestRecord:
    tpot = (e2e - ttft) / (tokens - 1) if tokens >= 2 else None
    offsets = tuple(ttft + k * (tpot or 0.0) for k in range(tokens))
    return rec(
        i,
        ttft_s=ttft,
        e2e_s=e2e,
        tpot_s=tpot,
        output_tokens=tokens,
        input_tokens=100,
        chunk_offsets_s=offsets,
        tokens_source="usage",
        **kw,
    )


def test_distribution_linear_percentiles_and_none_when_empty() -> None:
    d = distribution([1.0, 2.0, 3.0, 4.0])
    assert d == {
        "n": 4,
        "mean": 2.5,
        "p50": 2.5,
        "p90": pytest.approx(3.7),
        "p95": pytest.approx(3.85),
        "p99": pytest.approx(3.97),
        "min": 1.0,
        "max": 4.0,
        # Four samples certify no tail percentile (a p90 needs 64).
        "p90_es": None,
        "p95_es": None,
        "p99_es": None,
    }
    empty = distribution([])
    assert empty["n"] == 0
    assert all(empty[k] is None for k in ("mean", "p50", "p99", "min", "max"))
    assert distribution([None, float("nan"), 2.0])["n"] == 1


def test_bootstrap_ci_is_seeded_and_brackets_the_median() -> None:
    values = [float(v) for v in range(1, 101)]
    a = bootstrap_ci(values, seed=1)
    b = bootstrap_ci(values, seed=1)
    assert a == b
    assert a is not None and a[0] < 50.5 < a[1]
    assert a[1] - a[0] < 25
    assert bootstrap_ci([1.0]) is None


def test_power_law_fit_recovers_exponent_and_ci() -> None:
    xs = [1.0, 2.0, 4.0, 8.0, 16.0]
    ys = [100.0 * x**-1.0 for x in xs]
    fit = fit_power_law(xs, ys)
    assert fit is not None
    assert fit.exponent == pytest.approx(-1.0)
    assert fit.k == pytest.approx(1.0)
    assert fit.coef == pytest.approx(100.0)
    assert fit.exponent_ci is not None
    assert fit.exponent_ci[0] == pytest.approx(-1.0) and fit.exponent_ci[1] == pytest.approx(-1.0)
    noisy = fit_power_law(xs, [y * f for y, f in zip(ys, (1.1, 0.9, 1.05, 0.95, 1.0), strict=True)])
    assert noisy is not None and noisy.exponent_ci is not None
    assert noisy.exponent_ci[0] < noisy.exponent < noisy.exponent_ci[1]
    assert fit_power_law([1.0], [1.0]) is None
    assert fit_power_law([2.0, 2.0], [1.0, 3.0]) is None


def test_t_quantiles() -> None:
    assert t_quantile_975(1) == pytest.approx(12.706)
    assert t_quantile_975(30) == pytest.approx(2.042)
    assert t_quantile_975(60) == pytest.approx(2.000, abs=2e-3)
    assert t_quantile_975(10_000) == pytest.approx(1.960, abs=1e-3)


def test_stability_warnings_say_what_to_do() -> None:
    import dataclasses

    from tokrate.runfolder.summary import Group, GroupCounts

    group = Group("sim", "sim-70b", "c8", 8, None, GroupCounts(scheduled=5, ok=5))
    assert stability_warnings([group]) == [
        "only 5 ok requests for sim/sim-70b c=8: run with --requests >= 30 for a stable p95"
    ]
    failed = dataclasses.replace(group, counts=GroupCounts(scheduled=4, ok=0, error=4))
    assert "every request failed" in stability_warnings([failed])[0]


def test_derive_columns() -> None:
    frame = records_to_frame(
        [
            ok_rec(0, 0.5, 1.5, 5, send_delay_s=0.25),
            ok_rec(1, 0.2, 0.2, 1),
        ]
    )
    d = derive(frame)
    row = d.row(0, named=True)
    assert row["decode_tps"] == pytest.approx(4.0)
    assert row["itl_s"] == pytest.approx([0.25] * 4)
    assert row["ttft_from_scheduled_s"] == pytest.approx(0.75)
    assert row["end_at"] == pytest.approx(1001.5)
    second = d.row(1, named=True)
    assert second["decode_tps"] is None
    assert second["itl_s"] == []
    assert second["ttft_from_scheduled_s"] is None
    # LazyFrame in, LazyFrame out.
    assert isinstance(derive(frame.lazy()), pl.LazyFrame)


def hand_run(**slo: float) -> tuple[pl.DataFrame, dict[str, Any]]:
    records = [
        rec(0, warmup=True, ttft_s=9.0, e2e_s=9.0, output_tokens=9),  # excluded from stats
        ok_rec(1, 0.1, 1.1, 11, task="code"),  # tpot 0.1, ends 1002.1
        ok_rec(2, 0.3, 2.3, 11, task="chat"),  # tpot 0.2, ends 1004.3
        ok_rec(3, 0.2, 1.2, 6, task="chat"),  # tpot 0.2, ends 1004.2
        rec(4, status="error", error_class="http_5xx", e2e_s=0.05, error_message="boom"),
        rec(5, status="cancelled", error_class="cancelled", started_at=1003.0),
    ]
    run = {
        "run_id": "r1",
        "slo": slo,
        "targets": [
            {"endpoint": "ep", "model": "m7b", "price_in_per_m": 0.5, "price_out_per_m": 2.5}
        ],
        "scenarios": [{"name": "c1", "concurrency": 1, "rate_rps": None}],
    }
    return records_to_frame(records), run


def test_summarize_hand_computed_group() -> None:
    frame, run = hand_run()
    summary = summarize(frame, run)
    assert summary["schema_version"] == SUMMARY_SCHEMA_VERSION
    assert summary["run_id"] == "r1"
    (g,) = summary["groups"]
    assert (g["endpoint"], g["model"], g["scenario"], g["concurrency"]) == ("ep", "m7b", "c1", 1)
    assert g["task"] is None
    assert g["counts"] == {
        "scheduled": 5,
        "ok": 3,
        "error": 1,
        "cancelled": 1,
        "warmup": 1,
        "retried_attempts": 0,
        "not_sent": 0,
    }
    assert g["errors_by_class"] == {"cancelled": 1, "http_5xx": 1}
    assert g["ttft_s"]["n"] == 3
    assert g["ttft_s"]["p50"] == pytest.approx(0.2)
    assert g["ttft_s"]["mean"] == pytest.approx(0.2)
    assert g["ttft_s"]["max"] == pytest.approx(0.3)
    assert g["tpot_s"]["p50"] == pytest.approx(0.2)
    assert g["decode_tps"]["min"] == pytest.approx(5.0)
    assert g["decode_tps"]["max"] == pytest.approx(10.0)
    # ITL: 10 gaps of 0.1 + 10 of 0.2 + 5 of 0.2.
    assert g["itl_s"]["n"] == 25
    assert g["itl_s"]["mean"] == pytest.approx((10 * 0.1 + 15 * 0.2) / 25)
    assert g["e2e_s"]["p50"] == pytest.approx(1.2)
    # Closed loop: no scheduled times, so these are unknown, not 0.
    assert g["send_delay_s"] == {k: (0 if k == "n" else None) for k in g["send_delay_s"]}
    assert g["ttft_from_scheduled_s"]["n"] == 0
    # Window: first measured send 1001.0 to last measured end 1004.3.
    assert g["window_s"] == pytest.approx(3.3)
    assert g["output_tokens_total"] == 28
    assert g["input_tokens_total"] == 300
    assert g["aggregate_output_tps"] == pytest.approx(28 / 3.3)
    assert g["requests_per_s"] == pytest.approx(3 / 3.3)
    assert g["goodput_rps"] is None and g["slo_met_fraction"] is None
    # Each ok request's own tokens at the prices: 100 input at $0.5/M, 11, 11 and 6
    # output at $2.5/M; summarised per 1,000 requests with a Student-t interval.
    per_request = [(100 * 0.5 + out * 2.5) / 1e6 * 1000 for out in (11, 11, 6)]
    cost = g["cost"]
    assert cost["source"] == "price" and cost["n"] == 3 and cost["usd_per_m_output"] == 2.5
    assert cost["usd_per_1k_requests"] == pytest.approx(statistics.mean(per_request))
    assert cost["usd_per_1k_requests_sd"] == pytest.approx(statistics.stdev(per_request))
    half = t_quantile_975(2) * statistics.stdev(per_request) / math.sqrt(3)
    assert cost["usd_per_1k_requests_ci"] == pytest.approx(
        [statistics.mean(per_request) - half, statistics.mean(per_request) + half]
    )
    assert (cost["input_tokens_mean"], cost["output_tokens_mean"]) == (100, pytest.approx(28 / 3))
    tasks = {t["task"]: t for t in g["by_task"]}
    assert tasks["code"]["cost"]["usd_per_1k_requests"] == pytest.approx(per_request[0])
    assert set(tasks) == {"chat", "code"}
    assert tasks["chat"]["counts"]["ok"] == 2
    assert tasks["code"]["ttft_s"]["p50"] == pytest.approx(0.1)


def test_cached_input_and_reasoning_are_billed_as_the_provider_does() -> None:
    """Cached input tokens at price_cached_in_per_m (capped at the input), reasoning
    tokens as output (they are in usage's output count), per docs/definitions.md."""
    records = [
        ok_rec(1, 0.1, 1.1, 11, cached_tokens=60, reasoning_tokens=5),
        ok_rec(2, 0.1, 1.1, 11, cached_tokens=500),  # more than its input: capped at 100
        ok_rec(3, 0.1, 1.1, 11),
    ]
    run = {
        "run_id": "r1",
        "targets": [
            {
                "endpoint": "ep",
                "model": "m7b",
                "price_in_per_m": 1.0,
                "price_cached_in_per_m": 0.25,
                "price_out_per_m": 4.0,
            }
        ],
        "scenarios": [{"name": "c1", "concurrency": 1, "rate_rps": None}],
    }
    (g,) = summarize(records_to_frame(records), run)["groups"]
    expected = [
        (40 * 1.0 + 60 * 0.25 + 11 * 4.0) / 1e3,
        (0 * 1.0 + 100 * 0.25 + 11 * 4.0) / 1e3,
        (100 * 1.0 + 11 * 4.0) / 1e3,
    ]
    assert g["cost"]["usd_per_1k_requests"] == pytest.approx(statistics.mean(expected))
    assert g["cost"]["cached_input_tokens_mean"] == pytest.approx((60 + 500) / 2)
    assert g["cost"]["reasoning_tokens_mean"] == 5


def test_one_token_answers_are_not_judged_against_a_tpot_limit() -> None:
    """A one-token answer has no TPOT: it neither meets nor misses a TPOT limit (the
    met share leaves it out and counts it); a TTFT it missed still fails it; 2-4
    token answers are counted as short."""
    records = [
        ok_rec(1, 0.1, 0.1, 1),  # one token: too short for the TPOT limit
        ok_rec(2, 0.9, 0.9, 1),  # one token, but its TTFT misses: judged, missed
        ok_rec(3, 0.1, 0.4, 4),  # tpot 0.1: short answer, meets
        ok_rec(4, 0.1, 2.1, 11),  # tpot 0.2: misses
        ok_rec(5, 0.1, 1.1, 11),  # tpot 0.1: meets
    ]
    run = {
        "run_id": "r1",
        "slo": {"ttft_s": 0.5, "tpot_s": 0.15},
        "scenarios": [{"name": "c1", "concurrency": 1, "rate_rps": None}],
    }
    (g,) = summarize(records_to_frame(records), run)["groups"]
    assert g["slo"] == {"met": 2, "judged": 4, "unjudged": 1, "short_answers": 1}
    assert g["slo_met_fraction"] == pytest.approx(2 / 4)
    (task,) = g["by_task"]
    assert task["slo"] == g["slo"]


def test_goodput_against_every_slo_set() -> None:
    frame, run = hand_run(ttft_s=0.25, tpot_s=0.15)
    (g,) = summarize(frame, run)["groups"]
    # Only request 1 (ttft 0.1, tpot 0.1) meets both; judged = 3 ok + 1 error.
    assert g["slo_met_fraction"] == pytest.approx(1 / 4)
    assert g["goodput_rps"] == pytest.approx(1 / 3.3)
    frame, run = hand_run(itl_p99_s=0.15)
    (g,) = summarize(frame, run)["groups"]
    assert g["slo_met_fraction"] == pytest.approx(1 / 4)
    tasks = {t["task"]: t for t in g["by_task"]}
    assert tasks["code"]["slo_met_fraction"] == 1.0
    assert tasks["chat"]["slo_met_fraction"] == 0.0


def test_gpu_hourly_cost_from_measured_throughput() -> None:
    frame, run = hand_run()
    run["targets"] = [{"endpoint": "ep", "model": "m7b", "gpu_hourly_usd": 2.0, "gpus": 2}]
    (g,) = summarize(frame, run)["groups"]
    tps = 28 / 3.3
    assert g["cost"]["source"] == "gpu_hourly"
    assert g["cost"]["usd_per_m_output"] == pytest.approx(4.0 / (tps * 3600) * 1e6)
    # Each request is charged the GPU time it held; the mean is the cost per request
    # at the measured throughput: window / ok requests x the hourly rate.
    assert g["cost"]["usd_per_1k_requests"] == pytest.approx(3.3 / 3 * 4.0 / 3600 * 1000)
    run["targets"] = []
    assert summarize(frame, run)["groups"][0]["cost"] is None


def test_groups_ordered_by_sweep_and_lazy_input() -> None:
    records = [
        ok_rec(i, 0.1, 1.0, 10, scenario=s, concurrency=c)
        for i, (s, c) in enumerate([("c16", 16), ("c4", 4), ("c1", 1)])
    ]
    run = {"run_id": "r", "scenarios": [{"name": n} for n in ("c1", "c4", "c16")]}
    summary = summarize(records_to_frame(records).lazy(), run)
    assert [g["scenario"] for g in summary["groups"]] == ["c1", "c4", "c16"]
    assert [g["concurrency"] for g in summary["groups"]] == [1, 4, 16]


def test_all_failed_group_has_none_not_zero() -> None:
    records = [rec(i, status="error", error_class="connect") for i in range(3)]
    (g,) = summarize(records_to_frame(records), {"run_id": "r"})["groups"]
    assert g["counts"]["ok"] == 0
    assert g["ttft_s"]["p50"] is None and g["ttft_s"]["n"] == 0
    assert g["aggregate_output_tps"] is None
    assert g["errors_by_class"] == {"connect": 3}


def test_empty_frame() -> None:
    summary = summarize(records_to_frame([]), {"run_id": "r"})
    assert summary == {"schema_version": SUMMARY_SCHEMA_VERSION, "run_id": "r", "groups": []}


def test_retried_request_counts_once_by_its_last_attempt() -> None:
    records = [
        rec(0, status="error", error_class="http_429", e2e_s=0.01, attempt=1),
        rec(0, status="error", error_class="http_429", e2e_s=0.01, attempt=2),
        ok_rec(0, 0.1, 1.1, 11, attempt=3),
        rec(1, status="error", error_class="http_5xx", e2e_s=0.01, attempt=1),
        ok_rec(2, 0.2, 1.2, 11),
    ]
    run = {"run_id": "r1", "scenarios": [{"name": "c1", "concurrency": 1}]}
    (g,) = summarize(records_to_frame(records), run)["groups"]
    assert g["counts"] == {
        "scheduled": 3,
        "ok": 2,
        "error": 1,
        "cancelled": 0,
        "warmup": 0,
        "retried_attempts": 2,
        "not_sent": 0,
    }
    assert g["errors_by_class"] == {"http_5xx": 1}
    assert g["ttft_s"]["n"] == 2
