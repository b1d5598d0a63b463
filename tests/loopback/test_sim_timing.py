"""Token timing follows the bandwidth model (measured by a plain streaming client)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import statistics
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from time import perf_counter_ns
from typing import Any
from urllib.parse import urlparse

import httpx
import pytest

from tokrate.hardware import TENSOR_PARALLEL_EFFICIENCY, get_hardware
from tokrate.sim.model import Tier, TierTiming, default_tiers
from tokrate.sim.server import SimConfig, simulator_process

SHORT = [{"role": "user", "content": "hi"}]


@pytest.fixture
def sim_process() -> Iterator[Callable[..., str]]:
    """``simulator_process(**SimConfig kwargs)``: the simulator in its own process (no
    GIL shared with the test client, so timing tests measure the server, not the
    test's thread switching)."""
    with contextlib.ExitStack() as stack:
        yield lambda **kw: stack.enter_context(simulator_process(SimConfig(**kw)))


async def _raw_stream(url: str, model: str, max_tokens: int) -> list[int]:
    """Like _stream over a bare socket: t0, then for every content chunk the
    perf_counter_ns of the read that carried it. Cheap enough for hundreds of
    concurrent long streams."""
    u = urlparse(url)
    body = json.dumps(
        {
            "model": model,
            "messages": SHORT,
            "stream": True,
            "max_tokens": max_tokens,
            "ignore_eos": True,
        }
    ).encode()
    head = (
        f"POST {u.path}/chat/completions HTTP/1.1\r\nHost: {u.hostname}\r\nConnection: close\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode()
    stamps = [perf_counter_ns()]
    reader, writer = await asyncio.open_connection(u.hostname, u.port)
    try:
        writer.write(head + body)
        while data := await reader.read(1 << 16):
            if n := data.count(b'"delta":{"content"'):
                stamps.extend([perf_counter_ns()] * n)
    finally:
        writer.close()
        await writer.wait_closed()
    return stamps


async def _stream(
    client: httpx.AsyncClient, url: str, model: str, max_tokens: int, *, first_only: bool = False
) -> list[int]:
    """perf_counter_ns at t0 followed by the arrival of every content-bearing chunk."""
    body = {
        "model": model,
        "messages": SHORT,
        "stream": True,
        "max_tokens": max_tokens,
        "ignore_eos": True,
    }
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
        bw = gpu.bandwidth_bytes_per_s * (
            tier.gpus * TENSOR_PARALLEL_EFFICIENCY if tier.gpus > 1 else 1
        )
        assert math.isclose(t.decode_bound_tps, bw / (tier.active_params_b * 1e9 * 2))
        assert math.isclose(t.decode_step_s(1, 0), 1 / (0.8 * t.decode_bound_tps))
        assert math.isclose(
            t.prefill_s(1000),
            2
            * tier.active_params_b
            * 1e9
            * 1000
            / (
                gpu.flops_per_s
                * (tier.gpus * TENSOR_PARALLEL_EFFICIENCY if tier.gpus > 1 else 1)
                * 0.8
            ),
        )
    seven = TierTiming.place(default_tiers()[1], gpu, 0.8, {})
    assert 140 < seven.decode_bound_tps < 150  # docs/definitions.md: ~142 tok/s at 2.0 TB/s
    # per-tier efficiency wins over the global one
    assert TierTiming.place(default_tiers()[4], gpu, 0.8, {"sim-70b": 0.64}).efficiency == 0.64
    # KV capacity: the 70B has far less room for sequences than the 7B
    seventy = TierTiming.place(default_tiers()[4], gpu, 0.8, {})
    assert seventy.kv_capacity_tokens < seven.kv_capacity_tokens / 5


def _slope_tps(stamps_ns: list[int]) -> float:
    """Tokens/s as the least-squares slope of token index over arrival time: one late
    read on a loaded machine moves it far less than it moves (n - 1) / (last - first)."""
    ts = [t / 1e9 for t in stamps_ns]
    ks = list(range(len(ts)))
    return 1.0 / statistics.linear_regression(ks, ts).slope


def test_single_stream_decode_speed_matches_bound_times_efficiency(
    sim_process: Callable[..., str],
) -> None:
    """Every default tier, one stream each, ~0.8 s of decode: within 2% of bound x eff."""
    url = sim_process(time_scale=1.0)
    gpu = get_hardware("a100-80g")
    timings = {t.name: TierTiming.place(t, gpu, 0.8, {}) for t in default_tiers()}
    n_tokens = {name: max(16, round(0.8 * t.expected_decode_tps)) for name, t in timings.items()}
    # the bound ignores KV reads; keep them under 1% of the weight bytes read per step
    for name, n in n_tokens.items():
        tier = timings[name].tier
        assert (n + 10) * tier.kv_bytes_per_token < 0.01 * tier.active_weight_bytes * 2

    async def main() -> dict[str, list[int]]:
        results = await asyncio.gather(*(_raw_stream(url, m, n) for m, n in n_tokens.items()))
        return dict(zip(n_tokens, results, strict=True))

    stamps = asyncio.run(main())
    for name, s in stamps.items():
        content = s[1:]
        assert len(content) == n_tokens[name]
        expected = timings[name].expected_decode_tps
        assert _slope_tps(content) == pytest.approx(expected, rel=0.02), name


def _truth_rows(log: Path, n: int) -> list[dict[str, Any]]:
    """The truth log once it has ``n`` lines (a request is logged just after its last
    write, so the client can finish reading a moment before)."""
    deadline = time.monotonic() + 5
    while len(log.read_text().splitlines()) < n and time.monotonic() < deadline:
        time.sleep(0.01)
    return [json.loads(line) for line in log.read_text().splitlines()]


def _truth_ttft_s(log: Path) -> list[float]:
    rows = [json.loads(line) for line in log.read_text().splitlines()]
    return [(r["content_write_ns"][0] - r["received_ns"]) / 1e9 for r in rows]


def test_queueing_raises_70b_ttft_before_7b(
    sim_process: Callable[..., str], tmp_path: Path
) -> None:
    """At high concurrency sim-70b's KV cache is full and requests wait for whole
    requests; sim-7b's batch still holds everyone.

    Short prompts, so prefill compute is negligible and only KV memory can make a
    request wait. 70b: 135 reserved tokens each, 90 fit next to the weights, 128 sent.
    7b: 96 x 263 tokens use a quarter of its KV cache.
    """
    gpu = get_hardware("a100-80g")
    step = {t.name: TierTiming.place(t, gpu, 0.8, {}).decode_step_s(1, 0) for t in default_tiers()}
    runs = {"sim-7b": (5.0, 96, 256), "sim-70b": (10.0, 128, 128)}  # scale, streams, tokens
    p90: dict[str, float] = {}
    e2e: dict[str, float] = {}
    for model, (scale, streams, tokens) in runs.items():
        log = tmp_path / f"{model}.jsonl"
        url = sim_process(time_scale=scale, truth_log=str(log))

        async def main(
            url: str = url, model: str = model, streams: int = streams, tokens: int = tokens
        ) -> list[list[int]]:
            return await asyncio.gather(*(_raw_stream(url, model, tokens) for _ in range(streams)))

        client = asyncio.run(main())
        assert all(len(c) >= 2 for c in client)
        deadline = time.monotonic() + 5  # a request is logged just after its last write
        while len(log.read_text().splitlines()) < streams and time.monotonic() < deadline:
            time.sleep(0.02)
        ttft = _truth_ttft_s(log)
        assert len(ttft) == streams
        p90[model] = statistics.quantiles(ttft, n=10)[-1]
        e2e[model] = tokens * step[model] / scale
        if model == "sim-70b":  # the client sees it too (its noise only adds)
            client_ttft = [(c[1] - c[0]) / 1e9 for c in client]
            assert statistics.quantiles(client_ttft, n=10)[-1] > 0.9 * e2e[model]
    # 70b: the requests beyond its KV capacity waited for the first wave to finish,
    # i.e. about one whole single-stream request
    assert p90["sim-70b"] > 0.9 * e2e["sim-70b"]
    # 7b: all fit next to its weights; TTFT stays a small fraction of a request
    assert p90["sim-7b"] < 0.25 * e2e["sim-7b"]


def test_fixed_timing_tier_follows_truth_log(
    sim_process: Callable[..., str], tmp_path: Path
) -> None:
    """fixed_ttft_ms/fixed_itl_ms: every write at or just after its due time."""
    log = tmp_path / "truth.jsonl"
    tier = Tier(
        "sim-fixed",
        7.0,
        7.0,
        fixed_ttft_ms=200.0,
        fixed_itl_ms=20.0,
        output_tokens_min=128,
        output_tokens_max=128,
    )
    scale = 10.0
    url = sim_process(tiers=(tier,), truth_log=str(log), time_scale=scale)

    async def main() -> list[list[int]]:
        async with httpx.AsyncClient(timeout=30) as client:
            return await asyncio.gather(*(_stream(client, url, "sim-fixed", 128) for _ in range(8)))

    client_stamps = asyncio.run(main())
    rows = _truth_rows(log, 8)
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
    # generous: a loaded 2-core machine can delay a wake-up by several ms
    assert statistics.median(lateness) < 15e6
    for s in client_stamps:
        assert len(s) == 129
        assert (s[1] - s[0]) >= ttft_ns  # the client cannot see a token before it is due


def test_zero_delay_tier_answers_in_one_write(start_sim: Any, tmp_path: Path) -> None:
    log = tmp_path / "truth.jsonl"
    tier = Tier("sim-zero", 1.0, 1.0, fixed_ttft_ms=0.0, fixed_itl_ms=0.0)
    url = start_sim(tiers=(tier,), truth_log=str(log))
    asyncio.run(_one(url, "sim-zero", 500))
    (row,) = _truth_rows(log, 1)
    assert len(set(row["content_write_ns"])) == 1 and len(row["content_write_ns"]) == 500


async def _one(url: str, model: str, n: int) -> list[int]:
    async with httpx.AsyncClient(timeout=30) as client:
        return await _stream(client, url, model, n)


def test_sim_config_defaults_match_architecture_seam() -> None:
    cfg = SimConfig()
    assert (cfg.host, cfg.port, cfg.hardware, cfg.efficiency, cfg.time_scale, cfg.seed) == (
        "127.0.0.1",
        0,
        "a100-80g",
        0.8,
        1.0,
        0,
    )
    assert (
        cfg.api_key is None
        and cfg.faults is None
        and cfg.truth_log is None
        and dict(cfg.tier_efficiency) == {}
    )


def test_client_hang_up_frees_the_batch_slot(start_sim: Any, tmp_path: Path) -> None:
    log = tmp_path / "truth.jsonl"
    url = start_sim(time_scale=1.0, truth_log=str(log))

    async def main() -> None:
        async with httpx.AsyncClient(timeout=30) as client:
            stamps = await _stream(client, url, "sim-70b", 2000, first_only=True)
            assert len(stamps) == 2

    asyncio.run(main())
    health = url.removesuffix("/v1") + "/health"
    deadline = time.monotonic() + 5
    with httpx.Client() as c:
        while time.monotonic() < deadline:
            stats = c.get(health).json()["engines"]["sim-70b"]
            if stats["running"] == 0 and log.exists() and log.read_text():
                break
            time.sleep(0.02)
    assert stats["running"] == 0 and stats["kv_used_tokens"] == 0
    row = json.loads(log.read_text())
    assert 1 <= row["output_tokens"] < 100  # 2000 were asked; it stopped at the hang-up
