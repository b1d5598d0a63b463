"""The cost rule in its two executions agrees (issue 38): the summary's vectorised
per-request cost (tokrate.analysis.cost) equals tokrate.spec.pricing.TokenPrices on
every record, and costs of parts pool exactly into the cost of all their requests."""

from __future__ import annotations

import random
import statistics

import polars as pl
import pytest
from helpers.documents import summary_dict as summarize

from tokrate.analysis.cost import with_cost
from tokrate.analysis.cost_pool import pool_costs
from tokrate.analysis.metrics import derive, final_attempts
from tokrate.runfolder.jsondoc import from_json
from tokrate.runfolder.records import RequestRecord
from tokrate.runfolder.records_frame import records_to_frame
from tokrate.runfolder.run_info import RunInfo, TargetInfo
from tokrate.runfolder.summary import Cost
from tokrate.spec.pricing import TokenPrices

PRICES = TokenPrices(in_per_m=0.4, cached_in_per_m=0.1, out_per_m=1.6)


def _record(i: int, rng: random.Random, task: str = "chat") -> RequestRecord:
    tokens_in = rng.randint(1, 5000)
    cached = rng.choice([None, 0, rng.randint(0, 6000)])  # sometimes more than the input
    tokens_out = rng.randint(1, 900)
    return RequestRecord(
        run_id="r",
        scenario="c=2",
        endpoint="ep",
        model="m",
        request_index=i,
        prompt_id=f"p{i}",
        task=task,
        status="ok",
        started_at=1000.0 + i,
        t0_ns=i,
        ttft_s=0.1,
        e2e_s=1.0,
        tpot_s=0.9 / max(1, tokens_out - 1),
        input_tokens=tokens_in,
        output_tokens=tokens_out,
        cached_tokens=cached,
        concurrency=2,
    )


def test_the_vectorised_cost_is_the_pricing_rule_on_every_record() -> None:
    rng = random.Random(7)
    records = [_record(i, rng) for i in range(400)]
    target = TargetInfo(
        "ep", "m", price_in_per_m=0.4, price_cached_in_per_m=0.1, price_out_per_m=1.6
    )
    run = RunInfo("r", targets=(target,))
    frame = with_cost(derive(final_attempts(records_to_frame(records))), run)
    got = frame.sort("request_index").get_column("cost_usd").to_list()
    want = [
        PRICES.cost_usd(r.input_tokens or 0, r.cached_tokens or 0, r.output_tokens or 0)
        for r in records
    ]
    assert got == pytest.approx(want, rel=1e-12)
    assert frame.get_column("cost_rule").unique().to_list() == ["price"]


def test_pooled_costs_are_the_cost_of_all_their_requests() -> None:
    rng = random.Random(3)
    records = [_record(i, rng, task="a" if i % 3 else "b") for i in range(90)]
    run = {
        "run_id": "r",
        "targets": [
            {"endpoint": "ep", "model": "m", "price_in_per_m": 0.4, "price_out_per_m": 1.6}
        ],
        "scenarios": [{"name": "c=2", "concurrency": 2, "rate_rps": None}],
    }
    (group,) = summarize(records_to_frame(records), run)["groups"]
    parts = [from_json(Cost, t["cost"], "task") for t in group["by_task"]]
    pooled = pool_costs(parts)
    whole = group["cost"]
    assert pooled is not None
    assert pooled.n == whole["n"] == 90
    assert pooled.usd_per_1k_requests == pytest.approx(whole["usd_per_1k_requests"])
    assert pooled.usd_per_1k_requests_sd == pytest.approx(whole["usd_per_1k_requests_sd"])
    assert pooled.usd_per_1k_requests_ci == pytest.approx(whole["usd_per_1k_requests_ci"])
    by_hand = [
        PRICES.cost_usd(r.input_tokens or 0, 0, r.output_tokens or 0) * 1000 for r in records
    ]
    assert whole["usd_per_1k_requests_sd"] == pytest.approx(statistics.stdev(by_hand))
    # An unpriced part makes the pool unknown, never cheaper.
    assert pool_costs([parts[0], None]) is None


def test_a_target_without_prices_has_no_cost_never_zero() -> None:
    rng = random.Random(1)
    frame = records_to_frame([_record(0, rng)])
    run = RunInfo("r", targets=(TargetInfo("ep", "m", price_out_per_m=1.0),))
    costs = with_cost(derive(frame), run).get_column("cost_usd")
    assert costs.null_count() == 1
    assert isinstance(costs, pl.Series)
