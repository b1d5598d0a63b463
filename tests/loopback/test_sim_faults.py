"""Injected faults: grammar, seeded draws, each at its rate and in its documented form."""

from __future__ import annotations

import asyncio
import json
import math
import time
from collections import Counter
from pathlib import Path
from time import perf_counter
from typing import Any

import httpx
import pytest

from tokrate.errors import ConfigError
from tokrate.sim.faults import FaultPlan, parse_faults
from tokrate.sim.server import SimConfig, build_state

MSG = [{"role": "user", "content": "hi"}]


def test_spec_grammar() -> None:
    rules = parse_faults("http_500=0.1,stall=0.05:seconds=2, sim-70b:http_429=0.2:retry_after=3")
    assert rules[None]["http_500"].probability == 0.1
    assert dict(rules[None]["stall"].params) == {"seconds": 2.0, "at": 0.5}
    assert rules["sim-70b"]["http_429"].param("retry_after") == 3.0
    for bad, match in (
        ("bogus=0.1", "unknown fault 'bogus'"),
        ("http_500=x", "not a number"),
        ("http_500=1.5", r"in \[0, 1\]"),
        ("stall=0.1:minutes=2", "unknown parameter"),
        ("disconnect=0.1:at=2", "out of range"),
        ("sim-7b:", "no KIND"),
    ):
        with pytest.raises(ConfigError, match=match):
            parse_faults(bad)
    with pytest.raises(ConfigError, match="sum to"):
        build_state(SimConfig(faults="http_500=0.6,http_503=0.6"))
    with pytest.raises(ConfigError, match="unknown tier 'sim-9b'"):
        build_state(SimConfig(faults="sim-9b:http_500=0.1"))


def test_draws_are_deterministic_per_seed_and_tier() -> None:
    names = ("sim-1b", "sim-7b")
    rules = parse_faults("http_500=0.3,sim-7b:http_500=0.0,sim-7b:http_503=0.5")

    def seq(seed: int, tier: str) -> list[str | None]:
        plan = FaultPlan(rules, names, seed)
        return [r.kind if r else None for r in (plan.draw(tier) for _ in range(200))]

    assert seq(1, "sim-1b") == seq(1, "sim-1b")
    assert seq(1, "sim-1b") != seq(2, "sim-1b")
    assert set(seq(1, "sim-7b")) == {None, "http_503"}  # the tier rule replaced http_500
    # drawing for another tier never shifts a tier's sequence
    plan = FaultPlan(rules, names, 1)
    mixed = []
    for _ in range(200):
        plan.draw("sim-7b")
        r = plan.draw("sim-1b")
        mixed.append(r.kind if r else None)
    assert mixed == seq(1, "sim-1b")


async def _classify(client: httpx.AsyncClient, url: str, stall_s: float, slow_s: float) -> str:
    """Observe one streamed request from outside and name the fault it shows."""
    body = {"model": "sim-1b", "messages": MSG, "stream": True, "max_tokens": 8, "ignore_eos": True}
    t0 = perf_counter()
    async with client.stream("POST", f"{url}/chat/completions", json=body) as resp:
        headers_s = perf_counter() - t0
        if resp.status_code != 200:
            await resp.aread()
            err = resp.json()["error"]
            assert set(err) == {"message", "type", "param", "code"}
            if resp.status_code == 429:
                assert resp.headers["retry-after"] == "1"
                return "http_429"
            return {500: "http_500", 503: "http_503"}[resp.status_code]
        if resp.headers["content-type"].startswith("text/html"):
            assert b"<html>" in await resp.aread()
            return "html_200"
        kind = "slow_first_byte" if headers_s >= slow_s * 0.5 else None
        last, max_gap, contents, malformed = perf_counter(), 0.0, 0, False
        try:
            async for line in resp.aiter_lines():
                now = perf_counter()
                max_gap, last = max(max_gap, now - last), now
                if not line.startswith("data: {"):
                    continue
                try:
                    json.loads(line[6:])
                except json.JSONDecodeError:
                    malformed = True
                    continue
                contents += 1
        except httpx.RemoteProtocolError:
            assert contents < 1 + 8
            return "disconnect"
        if malformed:
            return "malformed"
        if max_gap >= stall_s * 0.5:  # the client may see the pre-stall chunk late
            return "stall"
        return kind or "none"


def test_each_fault_at_its_rate_and_in_its_form(start_sim_process: Any, tmp_path: Path) -> None:
    kinds = (
        "http_500",
        "http_429",
        "http_503",
        "html_200",
        "disconnect",
        "stall",
        "malformed",
        "slow_first_byte",
    )
    p = 0.1
    # distinct from any scheduling hiccup of a loaded machine, yet short
    stall_s = slow_s = 0.8
    spec = ",".join(f"{k}={p}" for k in kinds)
    spec = (
        spec.replace("stall=0.1", f"stall=0.1:seconds={stall_s}")
        .replace("slow_first_byte=0.1", f"slow_first_byte=0.1:seconds={slow_s}")
        .replace("http_429=0.1", "http_429=0.1:retry_after=1")
    )
    log = tmp_path / "truth.jsonl"
    url = start_sim_process(faults=spec, seed=7, truth_log=str(log), time_scale=200.0)
    n = 400

    async def main() -> list[str]:
        # One small client per worker, all built before any timing starts: a shared
        # httpx pool slows down with many concurrent streams, and building a client
        # (its TLS context) blocks the loop, both of which would blur the timings.
        todo = list(range(n))
        seen: list[str] = []
        clients = [httpx.AsyncClient(timeout=10) for _ in range(32)]

        async def worker(client: httpx.AsyncClient) -> None:
            async with client:
                while todo:
                    todo.pop()
                    seen.append(await _classify(client, url, stall_s, slow_s))

        await asyncio.gather(*(worker(c) for c in clients))
        return seen

    seen = Counter(asyncio.run(main()))
    # the server logs a request just after its last write: give the last ones a moment
    deadline = perf_counter() + 5
    while len(log.read_text().splitlines()) < n and perf_counter() < deadline:
        time.sleep(0.02)
    truth = Counter(json.loads(line)["fault"] or "none" for line in log.read_text().splitlines())
    assert sum(truth.values()) == n
    # what the client saw is exactly what the server injected
    assert seen == truth
    sd = math.sqrt(n * p * (1 - p))
    for k in kinds:
        assert abs(truth[k] - n * p) <= 4 * sd, (k, truth[k])
    assert abs(truth["none"] - n * (1 - p * len(kinds))) <= 4 * math.sqrt(n * 0.2 * 0.8)


def test_per_tier_rule_applies_to_that_tier_only(start_sim: Any) -> None:
    url = start_sim(faults="sim-70b:http_503=1.0")
    with httpx.Client(timeout=10) as c:
        for model, status in (("sim-70b", 503), ("sim-7b", 200), ("sim-70b", 503)):
            r = c.post(
                f"{url}/chat/completions", json={"model": model, "messages": MSG, "max_tokens": 1}
            )
            assert r.status_code == status
