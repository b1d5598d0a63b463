"""Token timing follows the bandwidth model (measured by a plain streaming client)."""

from __future__ import annotations

import asyncio
import json
import math
import statistics
import time
from pathlib import Path
from time import perf_counter_ns
from typing import Any

import httpx
import pytest

from tokrate.hardware import TENSOR_PARALLEL_EFFICIENCY, get_hardware
from tokrate.sim import SimConfig, Tier, TierTiming, default_tiers

SHORT = [{"role": "user", "content": "hi"}]


async def _stream(client: httpx.AsyncClient, url: str, model: str, max_tokens: int, *, first_only: bool = False) -> list[int]:
    """perf_counter_ns at t0 followed by the arrival of every content-bearing chunk."""
    body = {"model": model, "messages": SHORT, "stream": True, "max_tokens": max_tokens, "ignore_eos": True}
    stamps = [perf_counter_ns()]
    async with client.stream("POST", f"{url}/chat/completions", json=body) as resp:
        assert resp.status_code == 200
        async for line in resp.aiter_lines():
            now = perf_counter_ns()
            if not line.startswith("data: {"):
                continue
            choices = json.loads(line[6:])["choices"]
            if choices and choices[0]["delta"].get("content"):
                stamps.append(now)
                if first_only:
                    break
    return stamps


def test_tier_timing_model_is_the_design_formula() -> None:
    gpu = get_hardware("a100-80g")
    for tier in default_tiers():
        t = TierTiming.place(tier, gpu, 0.8, {})
        bw = gpu.bandwidth_bytes_per_s * (tier.gpus * TENSOR_PARALLEL_EFFICIENCY if tier.gpus > 1 else 1)
        assert math.isclose(t.decode_bound_tps, bw / (tier.active_params_b * 1e9 * 2))
        assert math.isclose(t.decode_step_s(1, 0), 1 / (0.8 * t.decode_bound_tps))
        assert math.isclose(t.prefill_s(1000), 2 * tier.active_params_b * 1e9 * 1000 / (gpu.flops_per_s * (tier.gpus * TENSOR_PARALLEL_EFFICIENCY if tier.gpus > 1 else 1) * 0.8))
    seven = TierTiming.place(default_tiers()[1], gpu, 0.8, {})
    assert 140 < seven.decode_bound_tps < 150  # DESIGN.md: ~142 tok/s at 2.0 TB/s
    # per-tier efficiency wins over the global one
    assert TierTiming.place(default_tiers()[4], gpu, 0.8, {"sim-70b": 0.64}).efficiency == 0.64
    # KV capacity: the 70B has far less room for sequences than the 7B
    seventy = TierTiming.place(default_tiers()[4], gpu, 0.8, {})
    assert seventy.kv_capacity_tokens < seven.kv_capacity_tokens / 5


def test_single_stream_decode_speed_matches_bound_times_efficiency(start_sim: Any) -> None:
    """Every default tier, one stream each, ~0.6 s of decode: within 2% of bound x eff."""
    url = start_sim(time_scale=1.0)
    gpu = get_hardware("a100-80g")
    timings = {t.name: TierTiming.place(t, gpu, 0.8, {}) for t in default_tiers()}
    n_tokens = {name: max(16, round(0.6 * t.expected_decode_tps)) for name, t in timings.items()}

    async def main() -> dict[str, list[int]]:
        async with httpx.AsyncClient(timeout=30) as client:
            results = await asyncio.gather(*(_stream(client, url, m, n) for m, n in n_tokens.items()))
        return dict(zip(n_tokens, results, strict=True))

    stamps = asyncio.run(main())
    for name, s in stamps.items():
        content = s[1:]
        assert len(content) == n_tokens[name]
        measured = (len(content) - 1) / ((content[-1] - content[0]) / 1e9)
        expected = timings[name].expected_decode_tps
        assert measured == pytest.approx(expected, rel=0.02), name


def test_queueing_raises_70b_ttft_before_7b(start_sim: Any, tmp_path: Path) -> None:
    """At 96 streams sim-70b's KV cache is full, so requests wait for whole requests.

    TTFT is taken from the truth log (first content write - request received), so the
    test client's own connection set-up on a loaded machine does not enter it.
    """
    log = tmp_path / "truth.jsonl"
    scale = 50.0
    url = start_sim(time_scale=scale, truth_log=str(log))
    # short prompts: prefill compute is negligible, only KV memory can make a request wait
    out_tokens = 256
    concurrency = 96
    gpu = get_hardware("a100-80g")
    e2e = {
        t.name: out_tokens * TierTiming.place(t, gpu, 0.8, {}).decode_step_s(1, 0) / scale
        for t in default_tiers()
    }

    async def main() -> None:
        limits = httpx.Limits(max_connections=concurrency + 4)
        async with httpx.AsyncClient(timeout=30, limits=limits) as client:
            for model in ("sim-7b", "sim-70b"):
                await asyncio.gather(
                    *(_stream(client, url, model, out_tokens, first_only=True) for _ in range(concurrency))
                )

    asyncio.run(main())
    # requests cut short by the client still finish server-side; wait for the log
    deadline = perf_counter_ns() + 10_000_000_000
    while perf_counter_ns() < deadline:
        rows = [json.loads(line) for line in log.read_text().splitlines()]
        if len(rows) == 2 * concurrency:
            break
        time.sleep(0.05)
    ttft: dict[str, list[float]] = {"sim-7b": [], "sim-70b": []}
    for row in rows:
        ttft[row["model"]].append((row["content_write_ns"][0] - row["received_ns"]) / 1e9)
    p90 = {m: statistics.quantiles(t, n=10)[-1] for m, t in ttft.items()}
    # 70b: the requests beyond its KV capacity (46 of these) waited for the first
    # wave to finish, i.e. about one whole single-stream request
    assert p90["sim-70b"] > 0.9 * e2e["sim-70b"]
    # 7b: all 96 fit next to its weights; TTFT stays a small fraction of a request
    assert p90["sim-7b"] < 0.25 * e2e["sim-7b"]


def test_fixed_timing_tier_follows_truth_log(start_sim: Any, tmp_path: Path) -> None:
    """fixed_ttft_ms/fixed_itl_ms: every write at or just after its due time."""
    log = tmp_path / "truth.jsonl"
    tier = Tier("sim-fixed", 7.0, 7.0, fixed_ttft_ms=200.0, fixed_itl_ms=20.0, output_tokens_min=128, output_tokens_max=128)
    scale = 10.0
    url = start_sim(tiers=(tier,), truth_log=str(log), time_scale=scale)

    async def main() -> list[list[int]]:
        async with httpx.AsyncClient(timeout=30) as client:
            return await asyncio.gather(*(_stream(client, url, "sim-fixed", 128) for _ in range(8)))

    client_stamps = asyncio.run(main())
    rows = [json.loads(line) for line in log.read_text().splitlines()]
    assert len(rows) == 8
    ttft_ns, itl_ns = int(200e6 / scale), int(20e6 / scale)
    lateness = []
    for row in rows:
        assert row["model"] == "sim-fixed" and row["fault"] is None and row["output_tokens"] == 128
        assert len(row["content_write_ns"]) == 128
        assert row["first_write_ns"] <= row["content_write_ns"][0] <= row["done_ns"]
        for k, t in enumerate(row["content_write_ns"]):
            due = row["received_ns"] + ttft_ns + k * itl_ns
            assert t >= due  # never early
            lateness.append(t - due)
    assert statistics.median(lateness) < 3e6
    for s in client_stamps:
        assert len(s) == 129
        assert (s[1] - s[0]) >= ttft_ns  # the client cannot see a token before it is due


def test_zero_delay_tier_answers_in_one_write(start_sim: Any, tmp_path: Path) -> None:
    log = tmp_path / "truth.jsonl"
    tier = Tier("sim-zero", 1.0, 1.0, fixed_ttft_ms=0.0, fixed_itl_ms=0.0)
    url = start_sim(tiers=(tier,), truth_log=str(log))
    asyncio.run(_one(url, "sim-zero", 500))
    row = json.loads(log.read_text())
    assert len(set(row["content_write_ns"])) == 1 and len(row["content_write_ns"]) == 500


async def _one(url: str, model: str, n: int) -> list[int]:
    async with httpx.AsyncClient(timeout=30) as client:
        return await _stream(client, url, model, n)


def test_sim_config_defaults_match_architecture_seam() -> None:
    cfg = SimConfig()
    assert (cfg.host, cfg.port, cfg.hardware, cfg.efficiency, cfg.time_scale, cfg.seed) == ("127.0.0.1", 0, "a100-80g", 0.8, 1.0, 0)
    assert cfg.api_key is None and cfg.faults is None and cfg.truth_log is None and dict(cfg.tier_efficiency) == {}
