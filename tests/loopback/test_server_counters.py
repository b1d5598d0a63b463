"""Issue 27: the servers' own /metrics counters over a run (prompt-cache queries and
hits, speculative drafted and accepted tokens) beside the per-request figures, end to
end: the simulator exports vLLM's counters, tokrate scrapes them during a real run
over 127.0.0.1, summary.json ``server_counters`` holds their increase over the run,
summary.md and the report show it. Every figure is checked against the simulator's
truth log (token counts, not timings, so it holds on a loaded machine)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import orjson
import polars as pl
import pytest
from helpers.specs import sim_spec

from tokrate.analysis.server_counters import server_counters
from tokrate.load.run import run_benchmark
from tokrate.load.scrape import parse_metrics_text
from tokrate.runfolder.loaded_run import load_run
from tokrate.runfolder.server_metrics import server_metrics_schema
from tokrate.runfolder.summary import SUMMARY_SCHEMA_VERSION, summary_from_json
from tokrate.sim.model import Tier
from tokrate.spec.types import EndpointSpec, ModelSpec, PromptsSpec, SharedPrefixSpec
from tokrate.textfmt import md_escape

PLAIN = Tier(
    name="plain-7b", params_b=7.0, active_params_b=7.0, output_tokens_min=12, output_tokens_max=12
)
SPEC = dataclasses.replace(PLAIN, name="spec-7b", speculative_acceptance=0.7)


def _truth(log: Path) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in log.read_bytes().splitlines() if line]


def test_counters_over_the_run_equal_what_the_simulator_served(
    start_sim: Any, tmp_path: Path
) -> None:
    log = tmp_path / "truth.jsonl"
    url = start_sim(truth_log=str(log), prefix_cache=True, tiers=(PLAIN, SPEC), time_scale=4.0)
    endpoint = EndpointSpec(
        "sim", url, metrics_url=url.removesuffix("/v1") + "/metrics", metrics_interval_s=0.25
    )
    prompts = PromptsSpec(
        shared_prefix=SharedPrefixSpec(
            prefix_tokens=512, input_tokens=32, output_tokens=12, count=4
        )
    )
    models = [ModelSpec("sim", t.name, params_b=7.0) for t in (PLAIN, SPEC)]
    spec = sim_spec(
        endpoint,
        tmp_path,
        models=models,
        prompts=prompts,
        concurrency=(1,),
        requests=8,
        report=True,
    )
    run = load_run(Path(run_benchmark(spec, quiet=True).run_dir))
    assert run.summary is not None and run.summary.schema_version == SUMMARY_SCHEMA_VERSION
    truth = _truth(log)
    # A request not streamed (a pre-flight probe, where one is sent) was served before
    # the first scrape: the counters' difference leaves it out.
    probes = [t for t in truth if not t["request"]["body"].get("stream")]
    streamed = [t for t in truth if t["request"]["body"].get("stream")]
    got = {(c.endpoint, c.model): c for c in run.summary.server_counters}
    assert set(got) == {("sim", "plain-7b"), ("sim", "spec-7b")}
    for model in ("plain-7b", "spec-7b"):
        served = [t for t in streamed if t["model"] == model and t["input_tokens"] is not None]
        c = got[("sim", model)]
        # The increase from the first scrape (before the first request) to the last
        # (after the last) is every request the server served, warm-up included.
        assert c.prefix_query_tokens == sum(t["input_tokens"] for t in served)
        assert c.prefix_hit_tokens == sum(t["cached_tokens"] for t in served)
        assert c.prefix_hit_tokens is not None and c.prefix_hit_tokens > 0
        assert c.prefix_hit_rate == c.prefix_hit_tokens / c.prefix_query_tokens
        assert c.scrapes >= 2 and c.window_s is not None and c.window_s > 0
        assert "vllm:prefix_cache_hits_total" in c.sources
        # The per-request figure of the measured requests sits beside it.
        (group,) = [g for g in run.summary.groups if g.model == model]
        assert group.cache is not None and group.cache.hit_rate is not None
        assert group.cache.cached_tokens <= c.prefix_hit_tokens
    plain, spec_tier = got[("sim", "plain-7b")], got[("sim", "spec-7b")]
    assert plain.draft_tokens is None and plain.spec_acceptance is None

    def steps(tokens: int) -> int:
        return round(tokens / SPEC.speculative_speedup)

    before = sum(t["output_tokens"] for t in probes if t["model"] == "spec-7b")
    after = before + sum(t["output_tokens"] for t in streamed if t["model"] == "spec-7b")
    assert spec_tier.draft_tokens == (steps(after) - steps(before)) * SPEC.draft_tokens
    assert spec_tier.accepted_tokens == (after - steps(after)) - (before - steps(before))
    # accepted / drafted: (speedup - 1) / draft_tokens, vLLM's acceptance rate.
    expected = (SPEC.speculative_speedup - 1) / SPEC.draft_tokens
    assert spec_tier.spec_acceptance == pytest.approx(expected, abs=0.05)
    # summary.json round-trips; summary.md and the report show the table.
    doc = orjson.loads((run.path / "summary.json").read_bytes())
    assert summary_from_json(doc).server_counters == run.summary.server_counters
    title = "Prompt cache and speculative decoding, as the server counted them"
    md = (run.path / "summary.md").read_text(encoding="utf-8")
    assert title in md and md_escape("vllm:prefix_cache_hits_total") in md
    assert title in (run.path / "report.html").read_text(encoding="utf-8")


def _frame(pages: list[str], endpoint: str = "e") -> pl.DataFrame:
    rows = [
        (float(i), 100.0 + i, endpoint, *sample)
        for i, page in enumerate(pages)
        for sample in parse_metrics_text(page)
    ]
    return pl.DataFrame(rows, schema=list(server_metrics_schema().items()), orient="row")


def test_counters_sum_engines_survive_a_restart_and_read_sglangs_gauge() -> None:
    def vllm(queries: float, hits: float) -> str:
        return (
            "# TYPE vllm:prefix_cache_queries counter\n"
            f'vllm:prefix_cache_queries_total{{engine="0",model_name="m"}} {queries}\n'
            f'vllm:prefix_cache_queries_total{{engine="1",model_name="m"}} {queries}\n'
            "# TYPE vllm:prefix_cache_hits counter\n"
            f'vllm:prefix_cache_hits_total{{engine="0",model_name="m"}} {hits}\n'
            f'vllm:prefix_cache_hits_total{{engine="1",model_name="m"}} {hits}\n'
        )

    # Two engines summed; 100 -> 300, then a restart (back to 50): 200 + 50 per engine.
    (c,) = server_counters(_frame([vllm(100, 10), vllm(300, 110), vllm(50, 25)]))
    assert (c.model, c.prefix_query_tokens, c.prefix_hit_tokens) == ("m", 500, 250)
    assert c.prefix_hit_rate == 0.5 and c.scrapes == 3 and c.window_s == 2.0

    def sglang(rate: float) -> str:
        return (
            f'# TYPE sglang:cache_hit_rate gauge\nsglang:cache_hit_rate{{model_name="s"}} {rate}\n'
        )

    (g,) = server_counters(_frame([sglang(0.2), sglang(0.4)], "sg"))
    assert g.hit_rate_from_gauge and g.prefix_hit_rate == pytest.approx(0.3)
    assert g.prefix_query_tokens is None
    assert server_counters(None) == () and server_counters(_frame([vllm(1, 1)])) == ()
