"""Aggregate throughput agrees with the server's own count (issue 11).

A zero-delay ceiling run (every token due at once, 512 per answer, the simulator in its
own process with a truth log): tokrate's ``aggregate_output_tps`` (output tokens of the
measured ok requests / the window of ``tokrate.analysis.metrics.window_exprs``) is within 2% of
the server's count over the same requests: their output tokens / the server's span,
first request body received to last final write (truth log, CLOCK_MONOTONIC).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import orjson
import polars as pl
import pytest
from helpers.specs import sim_spec, synthetic_prompts

from tokrate.load.run import run_benchmark
from tokrate.runfolder.jsondoc import to_json
from tokrate.runfolder.loaded_run import load_run
from tokrate.sim.model import Tier
from tokrate.spec.types import ModelSpec

ZERO = Tier(
    "zero",
    1.0,
    1.0,
    fixed_ttft_ms=0.0,
    fixed_itl_ms=0.0,
    output_tokens_min=512,
    output_tokens_max=512,
)


@pytest.mark.parametrize("preconnect", [True, False])
def test_ceiling_run_throughput_matches_the_servers_count(
    preconnect: bool, tmp_path: Path, start_sim_process: Callable[..., str]
) -> None:
    truth_path = tmp_path / "truth.jsonl"
    url = start_sim_process(tiers=(ZERO,), time_scale=1.0, truth_log=str(truth_path))
    spec = sim_spec(
        url,
        tmp_path,
        models=(ModelSpec("sim", "zero", params_b=1.0),),
        run_id="ceiling",
        prompts=synthetic_prompts(512, count=16),
        concurrency=(32,),
        requests=None,
        duration_s=3.0,
        ignore_eos=True,
    )
    if not preconnect:
        from dataclasses import replace

        spec = replace(spec, client=replace(spec.client, preconnect=False))
    result = run_benchmark(spec)
    assert result.summary is not None
    (group,) = to_json(result.summary)["groups"]
    truth = {}
    for line in truth_path.read_bytes().splitlines():
        row = orjson.loads(line)
        truth[row["id"]] = row
    records = load_run(result.run_dir).records
    measured = records.filter((pl.col("status") == "ok") & ~pl.col("warmup"))
    rows = [truth[rid] for rid in measured["response_id"]]
    span_s = (max(r["done_ns"] for r in rows) - min(r["received_ns"] for r in rows)) / 1e9
    server_tps = sum(r["output_tokens"] for r in rows) / span_s
    assert group["output_tokens_total"] == sum(r["output_tokens"] for r in rows)
    assert group["aggregate_output_tps"] == pytest.approx(server_tps, rel=0.02), (
        group["window_s"],
        span_s,
    )
