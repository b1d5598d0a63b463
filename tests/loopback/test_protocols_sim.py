"""Every protocol on every client that speaks it, over the real simulator (its own
process, loopback HTTP), judged against the simulator's truth log with the bounds
tests/loopback/test_client_sim.py holds chat to: no stamp before the write it stands for,
the fast client's median lag under 5 ms and its TTFT at most 20 ms over the server's
(median of the warm rounds), each client's TTFT and TPOT within 2% of the server's own for
the same requests (medians). On a busy machine each error is judged net of the CPU waits
inside it, and a kernel stamp against the write of the newest chunk of its read
(helpers.stamps_vs_truth; the clients' TTFTs compared with each other, as this did,
failed beside two CPU-bound processes: the openai SDK 2.3% over the fast client).
Reasoning time is kept apart from answer time (``first_answer_s`` against the
truth log's first answer write), usage is exact, the simulator's faults are classed
per protocol, and the body fields and headers each protocol sends are checked in the
truth log's ``request`` capture (what the server received)."""

from __future__ import annotations

import statistics
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
import uvloop
from helpers.cpu_waits import CpuWaits
from helpers.requests import prompt, record
from helpers.stamps_vs_truth import net_of_waits, stands_for, write_lags

from tokrate.client.factory import open_client
from tokrate.client.request import PreparedRequest, RequestSettings, build_request
from tokrate.client.result import StreamResult
from tokrate.inputs.targets import Target
from tokrate.sim.model import Tier
from tokrate.sim.server import SimConfig, simulator_process
from tokrate.spec.types import EndpointSpec, ModelSpec, TimeoutsSpec

KEY = "sk-sim-protocols-key-0001"
#: TTFT 500 ms (room for the httpx/SDK request building inside 2%, as in
#: test_client_sim.py); 6 of the 16 output tokens are reasoning.
THINKER = Tier(
    "thinker",
    7.0,
    7.0,
    fixed_ttft_ms=500.0,
    fixed_itl_ms=20.0,
    output_tokens_min=16,
    output_tokens_max=16,
    reasoning_tokens=6,
)
REASONING, OUTPUT = 6, 16
#: Each tier always draws its one fault.
FAULTY = {
    "broken": "stream_error",
    "limited": "http_429",
    "overloaded": "http_503",
    "failing": "http_500",
}
#: Per protocol the knobs a user sets for it: what makes the simulator think (Anthropic:
#: ``thinking``; Responses: ``reasoning``), plus a field the server must merely receive.
KNOBS: dict[str, tuple[tuple[str, Any], ...]] = {
    "chat": (("top_k", 3), ("reasoning_effort", "low")),
    "completions": (("top_k", 3),),
    "responses": (("reasoning", {"effort": "medium", "summary": "auto"}),),
    "anthropic": (("thinking", {"type": "enabled", "budget_tokens": 1024}), ("top_k", 5)),
}
CASES = {
    "chat": ("fast", "httpx", "openai"),
    "completions": ("fast", "httpx", "openai"),
    "responses": ("fast", "httpx", "openai"),
    "anthropic": ("fast", "httpx"),  # the openai SDK has no Messages API
}
TRUTH_PROTOCOL = {"anthropic": "messages"}
ROUNDS = 4


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    log = tmp_path_factory.mktemp("sim") / "truth.jsonl"
    tiers = [THINKER] + [
        Tier(
            name,
            7.0,
            7.0,
            fixed_ttft_ms=20.0,
            fixed_itl_ms=5.0,
            output_tokens_min=16,
            output_tokens_max=16,
            reasoning_tokens=6,
        )
        for name in FAULTY
    ]
    faults = ",".join(
        f"{t}:{k}=1" + (":retry_after=0" if k == "http_429" else "") for t, k in FAULTY.items()
    )
    cfg = SimConfig(
        tiers=tuple(tiers), time_scale=1.0, truth_log=str(log), faults=faults, api_key=KEY
    )
    with simulator_process(cfg) as url:
        yield url, log


def _truth(log: Path) -> dict[str, dict[str, Any]]:
    return {row["id"]: row for row in map(orjson.loads, log.read_bytes().splitlines())}


def _req(base: str, api: str, model: str) -> PreparedRequest:
    ep = EndpointSpec(
        name="e",
        base_url=base,
        api=api,  # type: ignore[arg-type]
        headers=(("X-Tier", f"{api}-tier"),),
    )
    m = ModelSpec(endpoint="e", name=model, extra_body=KNOBS[api], headers=(("X-Model", model),))
    text = "Say hi" if api == "completions" else None
    messages = ({"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"})
    return build_request(
        Target(ep, m),
        prompt(messages=messages, text=text, max_tokens=2048),
        RequestSettings(api=api),
        include_usage=True,
        unique_prefix=None,
        api_key=KEY,
    )


def _stream_all(base: str, model: str, rounds: int) -> dict[tuple[str, str], list[StreamResult]]:
    """One stream at a time, round robin over (protocol, client): one in flight, so no
    client's parsing delays another's stamps."""
    cases = [(api, kind) for api, kinds in CASES.items() for kind in kinds]
    reqs = {case: _req(base, case[0], model) for case in cases}

    async def main() -> dict[tuple[str, str], list[StreamResult]]:
        kinds = {kind for _, kind in cases}
        clients = {k: open_client(k, pool_size=2, timeouts=TimeoutsSpec()) for k in kinds}
        out: dict[tuple[str, str], list[StreamResult]] = {case: [] for case in cases}
        try:
            for _ in range(rounds):
                for case in cases:
                    out[case].append(await clients[case[1]].stream(reqs[case]))
        finally:
            for c in clients.values():
                await c.aclose()
        return out

    return uvloop.run(main())


def _check_wire(api: str, kind: str, row: dict[str, Any]) -> None:
    """What the server received: the protocol's own fields, the knobs, the auth scheme."""
    body, headers = row["request"]["body"], row["request"]["headers"]
    for key, value in KNOBS[api]:
        assert body[key] == value, (api, kind, key, body)
    assert body["stream"] is True
    assert headers["x-tier"] == f"{api}-tier" and headers["x-model"] == row["model"]
    if api == "anthropic":
        assert headers["x-api-key"] == "<redacted>" and "authorization" not in headers
        assert headers["anthropic-version"] == "2023-06-01" and body["max_tokens"] == 2048
    else:
        assert headers["authorization"] == "<redacted>" and "x-api-key" not in headers
    if api == "responses":
        assert body["max_output_tokens"] == 2048 and "max_tokens" not in body
    if api in ("chat", "completions"):
        assert body["stream_options"] == {"include_usage": True}
    assert KEY not in orjson.dumps(row).decode()


@pytest.mark.slow  # 11 protocol/client cases x 4 rounds on real-time tiers (~35 s)
def test_every_protocol_and_client_matches_the_truth_log(sim: tuple[str, Path]) -> None:
    url, log = sim
    with CpuWaits() as waits:
        by_case = _stream_all(url, "thinker", ROUNDS)
    truth = _truth(log)
    for (api, kind), results in by_case.items():
        reasoning = 0 if api == "completions" else REASONING
        recs = [record(r, request_index=i) for i, r in enumerate(results)]
        assert all(r.status == "ok" for r in recs), (api, kind, [r.error_message for r in recs])
        for res, rec in zip(results, recs, strict=True):
            row = truth[res.response_id or ""]
            assert row["protocol"] == TRUTH_PROTOCOL.get(api, api) and row["fault"] is None
            _check_wire(api, kind, row)
            writes = row["content_write_ns"]
            # Usage exact, from the server: the truth log's counts.
            assert rec.tokens_source == "usage" and rec.output_tokens == row["output_tokens"]
            assert row["output_tokens"] == OUTPUT and row["reasoning_tokens"] == reasoning
            # Anthropic bills thinking inside output_tokens without a separate count.
            assert rec.reasoning_tokens == (None if api == "anthropic" else reasoning)
            if "input_tokens" in row:
                assert rec.input_tokens == row["input_tokens"], (api, kind)
            assert rec.input_tokens is not None and rec.input_tokens > 0
            assert len(res.chunk_ns) == len(writes) == OUTPUT
            assert res.reasoning_chunks == reasoning, (api, kind)
            # Same CLOCK_MONOTONIC on both sides: a stamp never precedes the write it
            # stands for (helpers.stamps_vs_truth).
            assert min(write_lags(res, writes)) >= 0, (api, kind, write_lags(res, writes))
            # Reasoning apart from the answer: TTFT is the first thought, first_answer
            # the first answer token, stamped no earlier than its write.
            assert rec.ttft_s is not None and rec.first_answer_s is not None
            assert res.first_answer_ns is not None and res.first_answer_ns >= writes[reasoning]
            if reasoning:
                assert rec.first_answer_s > rec.ttft_s
            else:
                assert rec.first_answer_s == rec.ttft_s
        measured = results[1:]  # round 1 opens connections
        if kind == "fast":
            ttft_gaps, answer_gaps = [], []
            for res in measured:
                row = truth[res.response_id or ""]
                stood = stands_for(res, row["content_write_ns"])
                lags = write_lags(res, row["content_write_ns"])
                assert statistics.median(lags) < 5_000_000, (api, statistics.median(lags))
                # t0 precedes the send and the server's receipt: never shorter, barely
                # longer (net of the CPU waits inside it; the median of the rounds).
                gap = res.chunk_ns[0] - res.t0_ns - (stood[0] - row["received_ns"])
                assert gap >= 0, (api, gap)
                ttft_gaps.append(net_of_waits(gap, waits, res.t0_ns, res.chunk_ns[0]))
                answer_ns = res.first_answer_ns or 0
                gap = answer_ns - res.t0_ns - (stood[reasoning] - row["received_ns"])
                assert gap >= 0, (api, gap)
                answer_gaps.append(net_of_waits(gap, waits, res.t0_ns, answer_ns))
            assert statistics.median(ttft_gaps) < 20_000_000, (api, ttft_gaps)
            assert statistics.median(answer_gaps) < 20_000_000, (api, answer_gaps)
        # TTFT and TPOT against the server's own for the very same requests (a loaded
        # machine delays the server's writes too: the truth log has the real times),
        # within 2% of the server's, net of the CPU waits inside each request.
        ttft_errors, tpot_errors, server_ttfts, server_tpots = [], [], [], []
        for res in measured:
            row = truth[res.response_id or ""]
            stood = stands_for(res, row["content_write_ns"])
            server_ttft = stood[0] - row["received_ns"]
            error = res.chunk_ns[0] - res.t0_ns - server_ttft
            ttft_errors.append(net_of_waits(error, waits, res.t0_ns, res.chunk_ns[0]))
            server_ttfts.append(server_ttft)
            server_tpot = (stood[-1] - stood[0]) / (OUTPUT - 1)
            client_tpot = (res.chunk_ns[-1] - res.chunk_ns[0]) / (OUTPUT - 1)
            error = (client_tpot - server_tpot) * (OUTPUT - 1)
            net = net_of_waits(error, waits, stood[0], res.chunk_ns[-1]) / (OUTPUT - 1)
            tpot_errors.append(net)
            server_tpots.append(server_tpot)
        ttft_error = statistics.median(ttft_errors) / statistics.median(server_ttfts)
        tpot_error = statistics.median(tpot_errors) / statistics.median(server_tpots)
        assert 0 <= ttft_error < 0.02, (api, kind, ttft_errors)
        assert abs(tpot_error) < 0.02, (api, kind, tpot_errors)


#: (tier, error class, words in the message) per protocol: the simulator's stream_error
#: is a mid-stream error event (chat/completions: an ``error`` object, responses:
#: ``error`` + ``response.failed`` code server_error, messages: ``overloaded_error``);
#: the others are HTTP answers in the protocol's own error shape (Anthropic: 503 -> 529).
FAULT_CASES = [
    ("broken", "http_5xx"),
    ("limited", "http_429"),
    ("overloaded", "http_5xx"),
    ("failing", "http_5xx"),
]


@pytest.mark.parametrize(("api", "kind"), [(a, k) for a, ks in CASES.items() for k in ks])
def test_simulator_faults_are_classed_per_protocol(
    sim: tuple[str, Path], api: str, kind: str
) -> None:
    url, log = sim

    async def main() -> list[StreamResult]:
        client = open_client(kind, pool_size=2, timeouts=TimeoutsSpec())
        try:
            return [await client.stream(_req(url, api, tier)) for tier, _ in FAULT_CASES]
        finally:
            await client.aclose()

    results = uvloop.run(main())
    truth = _truth(log)
    for (tier, error_class), res in zip(FAULT_CASES, results, strict=True):
        rec = record(res)
        assert rec.status == "error", (api, kind, tier)
        assert rec.error_class == error_class, (api, kind, tier, rec.error_message)
        assert rec.error_message, (api, kind, tier)
        if tier == "broken":
            # The error came mid-stream (at half the output): what arrived is kept, and
            # matches the truth log's writes.
            row = truth[res.response_id or ""]
            assert row["fault"] == "stream_error" and row["content_write_ns"]
            assert rec.content_chunks == len(row["content_write_ns"]) > 0, (api, kind)
            assert rec.ttft_s is not None
