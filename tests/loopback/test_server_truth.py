"""What the server knew, per request, against the simulator's truth log: the request id
tokrate sends, the prompt-cache figures its usage reports, and their summary (hit rate,
TTFT cold vs cached) in summary.json, summary.md and report.html.

No timing band here: every figure is a count the simulator also wrote to its truth
log, or a TTFT compared with its own other half of the same run.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import orjson
import pytest
from helpers.specs import sim_spec

from tokrate.analysis.metrics import derive
from tokrate.load.run import run_benchmark
from tokrate.runfolder.loaded_run import load_run
from tokrate.runfolder.records_frame import frame_to_records
from tokrate.sim.model import Tier
from tokrate.spec.types import ClientSpec, ModelSpec, PromptsSpec, SharedPrefixSpec


def _truth(log: Path) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in log.read_bytes().splitlines() if line]


def test_shared_prefix_hit_rate_and_ttft_split_are_the_simulators(
    start_sim: Any, tmp_path: Path
) -> None:
    """A shared-prefix run (one 2,048-token prefix and a control set whose prefixes all
    differ) on the simulator with its prefix cache on: every record carries the id it
    was sent with and the cached tokens the simulator says it served; the group's
    hit rate, token sums and cold/cached request counts are the truth log's; cached
    requests' TTFT is below cold ones' (the prefill they skipped); the summary, its
    markdown and the report show the split."""
    log = tmp_path / "truth.jsonl"
    # Real time and a 7B tier: a cold 2,085-token prefill takes ~120 ms of modelled
    # compute, a cached one ~2 ms: far apart from any scheduling noise of a busy machine.
    url = start_sim(truth_log=str(log), prefix_cache=True, time_scale=1.0)
    prompts = PromptsSpec(
        shared_prefix=SharedPrefixSpec(
            prefix_tokens=2048, input_tokens=32, output_tokens=4, count=4
        )
    )
    spec = sim_spec(
        url,
        tmp_path,
        models=["sim-7b"],
        prompts=prompts,
        report=True,
        concurrency=(1,),
        requests=8,
    )
    result = run_benchmark(spec, quiet=True)
    run = load_run(Path(result.run_dir))
    records = frame_to_records(run.records)
    truth = {row["request"]["headers"]["x-request-id"]: row for row in _truth(log)}

    # Every request went out with its own id, and the server saw that id.
    ids = [r.request_id for r in records]
    assert all(ids) and len(set(ids)) == len(ids)
    assert all(r.request_id == f"run.{r.scenario}.{r.request_index}" for r in records)
    assert set(ids) <= set(truth)
    # Per request: the cached figure is the simulator's, read from chat usage.
    for r in records:
        assert r.cached_tokens == truth[r.request_id]["cached_tokens"]  # type: ignore[index]
        assert r.cached_tokens_source == "prompt_tokens_details.cached_tokens"
        assert r.cache_write_tokens is None

    measured = [r for r in records if r.status == "ok" and not r.warmup]
    rows = [truth[r.request_id] for r in measured]  # type: ignore[index]
    assert run.summary is not None
    (group,) = run.summary.groups
    cache = group.cache
    assert cache is not None
    assert cache.n == len(measured)
    assert cache.input_tokens == sum(row["input_tokens"] for row in rows)
    assert cache.cached_tokens == sum(row["cached_tokens"] for row in rows)
    assert cache.hit_rate == pytest.approx(cache.cached_tokens / cache.input_tokens)
    hits = [row for row in rows if row["cached_tokens"] > 0]
    assert cache.hit_requests == len(hits) == cache.ttft_cached_s.n
    assert cache.ttft_cold_s.n == len(rows) - len(hits)
    # Each of the 8 prompts is sent once, so only the shared-prefix task can hit (every
    # control prefix differs); after the first shared request, each one finds the 2,048
    # tokens (128 blocks of 16) cached.
    assert {r.task for r in measured if truth[r.request_id]["cached_tokens"]} == {"shared-prefix"}  # type: ignore[index]
    assert min(row["cached_tokens"] for row in hits) >= 2048
    assert 0.0 < cache.hit_rate < 1.0
    assert cache.cached_share_p50 is not None and cache.cached_share_p50 > 0.9
    assert cache.ttft_cached_s.p50 < cache.ttft_cold_s.p50  # type: ignore[operator]
    assert cache.by_turn == ()  # no sessions in this workload

    summary_json = orjson.loads((run.path / "summary.json").read_bytes())
    assert summary_json["groups"][0]["cache"]["cached_tokens"] == cache.cached_tokens
    split = (
        f"{cache.ttft_cold_s.p50 * 1e3:,.0f}"  # type: ignore[operator]
        if cache.ttft_cold_s.p50 >= 0.1  # type: ignore[operator]
        else None
    )
    md = (run.path / "summary.md").read_text(encoding="utf-8")
    html = (run.path / "report.html").read_text(encoding="utf-8")
    rate = f"{cache.hit_rate * 100:.1f}%"
    for text in (md, html):
        assert "Prompt cache" in text and rate in text
        assert "of the prompt cached" in text
        if split is not None:
            assert split in text
    assert (run.path / "charts" / "prompt_cache.png").is_file()


def test_the_request_id_header_is_configurable_and_can_be_off(
    start_sim: Any, tmp_path: Path
) -> None:
    """``[client] request_id_header`` names the header; "" sends none and records none."""
    log = tmp_path / "truth.jsonl"
    url = start_sim(truth_log=str(log))
    named = sim_spec(url, tmp_path, run_id="named", client=ClientSpec(request_id_header="X-Trace"))
    run_benchmark(named, quiet=True)
    off = sim_spec(url, tmp_path, run_id="off", client=ClientSpec(request_id_header=""))
    run_benchmark(off, quiet=True)
    headers = [row["request"]["headers"] for row in _truth(log)]
    traced = [h["x-trace"] for h in headers if "x-trace" in h]
    assert sorted(traced) == sorted(
        r["request_id"] for r in load_run(tmp_path / "named").records.to_dicts()
    )
    assert all("x-request-id" not in h for h in headers)
    assert load_run(tmp_path / "off").records["request_id"].is_null().all()


def test_server_timings_from_a_vllm_style_metrics_object_are_the_simulators(
    start_sim: Any, tmp_path: Path
) -> None:
    """The simulator with ``request_metrics`` sends vLLM's per-request ``metrics`` object
    with its usage: every record keeps it tagged "metrics"; the normalised columns are
    the engine's own stamps from the truth log; client minus server TTFT is never
    negative (one monotonic clock: the client's t0 precedes the server's arrival
    stamp, and its first chunk follows the first token); summary.json's ``server``
    holds the same, and the report shows it beside the client's numbers."""
    log = tmp_path / "truth.jsonl"
    url = start_sim(truth_log=str(log), request_metrics=True)
    spec = sim_spec(url, tmp_path, report=True, concurrency=(2,), requests=8)
    run = load_run(Path(run_benchmark(spec, quiet=True).run_dir))
    truth = {row["request"]["headers"]["x-request-id"]: row for row in _truth(log)}
    rows = derive(run.records.lazy()).collect().to_dicts()
    assert rows and all(r["server_timings_source"] == "metrics" for r in rows)
    for r in rows:
        t = truth[r["request_id"]]
        engine, received = t["engine"], t["received_ns"]
        assert r["server_queue_s"] == pytest.approx((engine["admitted_ns"] - received) / 1e9)
        assert r["server_ttft_s"] == pytest.approx((engine["first_token_ns"] - received) / 1e9)
        decode_s = (engine["last_token_ns"] - engine["first_token_ns"]) / 1e9
        assert r["server_decode_s"] == pytest.approx(decode_s)
        assert r["server_output_tokens"] == t["output_tokens"]
        assert r["ttft_minus_server_s"] >= 0
        assert r["spec_acceptance"] is None
    assert run.summary is not None
    (group,) = run.summary.groups
    server = group.server
    assert server is not None and server.sources == ("metrics",)
    measured = [r for r in rows if r["status"] == "ok" and not r["warmup"]]
    assert server.n == server.ttft_s.n == server.queue_s.n == len(measured)
    assert server.ttft_minus_server_s.min is not None and server.ttft_minus_server_s.min >= 0
    md = (run.path / "summary.md").read_text(encoding="utf-8")
    assert "Client vs server" in md and "TTFT − server" in md


def test_a_speculative_tier_is_flagged_above_the_bound_with_its_acceptance(
    start_sim: Any, tmp_path: Path
) -> None:
    """A speculative tier (each of 4 drafted tokens accepted with chance 0.7 after the
    ones before it: 2.77 tokens per weight pass, 44% of drafted tokens accepted) decodes past its memory-bandwidth bound, reports its acceptance in the
    metrics object, and the report rings its point and names it in a warning with
    that acceptance; a plain tier of the same size beside it stays under the bound.
    Real time (time_scale 1): the bound is physics only at that scale."""
    plain = Tier(
        name="plain-7b",
        params_b=7.0,
        active_params_b=7.0,
        output_tokens_min=24,
        output_tokens_max=24,
    )
    spec = dataclasses.replace(plain, name="spec-7b", speculative_acceptance=0.7)
    assert spec.speculative_speedup == pytest.approx(1 + 0.7 + 0.49 + 0.343 + 0.2401)
    url = start_sim(tiers=(plain, spec), request_metrics=True, time_scale=1.0)
    models = [ModelSpec("sim", t.name, params_b=7.0, bytes_per_param=2.0) for t in (plain, spec)]
    run_spec = sim_spec(url, tmp_path, models=models, report=True, concurrency=(1,), requests=6)
    run = load_run(Path(run_benchmark(run_spec, quiet=True).run_dir))
    assert run.summary is not None
    servers = {g.model: g.server for g in run.summary.groups}
    assert servers["spec-7b"] is not None and servers["plain-7b"] is not None
    # vLLM's acceptance: accepted / drafted tokens = (2.77 - 1) / 4.
    accepted = (spec.speculative_speedup - 1) / spec.draft_tokens
    assert servers["spec-7b"].spec_acceptance_p50 == pytest.approx(accepted)
    assert servers["plain-7b"].spec_acceptance_p50 is None
    md = (run.path / "summary.md").read_text(encoding="utf-8")
    flagged = [line for line in md.splitlines() if "memory-bandwidth bound (" in line]
    assert len(flagged) == 1 and "spec-7b" in flagged[0], flagged
    assert f"{accepted:.0%} of drafted tokens accepted" in flagged[0]
    html = (run.path / "report.html").read_text(encoding="utf-8")
    assert "Ringed in red" in html  # the size chart's caption (summary.md has no charts)
