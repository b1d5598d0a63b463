"""tokrate's own clients on the simulator's /v1/responses and /v1/messages: TTFT,
reasoning apart from the answer, usage and mid-stream errors against the truth log.

Needs the client side of issue 16 (tokrate.client.events_responses, branch h16cli):
skipped on a tree without it, so the sim branch and the client branch each pass alone
and this test joins them once both are merged.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("tokrate.client.events_responses")

from helpers.requests import record, stream_one
from helpers.sim_wire import truth_rows

from tokrate.client.request import PreparedRequest, RequestSettings, build_request
from tokrate.inputs.prompt_base import Prompt
from tokrate.inputs.targets import Target
from tokrate.sim.model import Tier
from tokrate.spec.types import EndpointSpec, ModelSpec

#: 6 reasoning tokens, then 10 answer tokens; TTFT 300 ms so it dominates any noise.
TIER = Tier(
    "sim-reasoner",
    7.0,
    7.0,
    fixed_ttft_ms=300.0,
    fixed_itl_ms=10.0,
    output_tokens_min=16,
    output_tokens_max=16,
    reasoning_tokens=6,
)
#: Thinking/summary switched on the way a user would: per-endpoint body knobs.
BODIES: dict[str, tuple[tuple[str, Any], ...]] = {
    "responses": (("reasoning", {"summary": "auto"}),),
    "anthropic": (("thinking", {"type": "enabled", "budget_tokens": 1024}),),
}
CASES = [
    ("responses", "fast"),
    ("responses", "httpx"),
    ("responses", "openai"),
    ("anthropic", "fast"),
    ("anthropic", "httpx"),
]


def _req(base: str, api: str) -> PreparedRequest:
    ep = EndpointSpec(name="sim", base_url=base, api=api, extra_body=BODIES[api])  # type: ignore[arg-type]
    p = Prompt(
        id="p1",
        task="chat",
        messages=({"role": "user", "content": "hi"},),
        prompt=None,
        max_tokens=2048,
        input_tokens_est=8,
        source="test",
    )
    target = Target(ep, ModelSpec(endpoint="sim", name="sim-reasoner"))
    return build_request(
        target, p, RequestSettings(), include_usage=True, unique_prefix=None, api_key=None
    )


@pytest.mark.parametrize(("api", "kind"), CASES)
def test_clients_on_the_simulators_typed_protocols(
    start_sim_process: Callable[..., str], tmp_path: Path, api: str, kind: str
) -> None:
    log = tmp_path / "truth.jsonl"
    url = start_sim_process(tiers=(TIER,), truth_log=str(log), time_scale=1.0)
    results = [stream_one(kind, _req(url, api)) for _ in range(4)]
    truth = {row["id"]: row for row in truth_rows(log)}
    gaps = []
    for result in results:
        rec = record(result)
        assert rec.status == "ok", rec.error_message
        row = truth[result.response_id or ""]
        assert row["protocol"] == ("messages" if api == "anthropic" else "responses")
        assert rec.tokens_source == "usage" and rec.output_tokens == row["output_tokens"] == 16
        assert rec.reasoning_tokens == (None if api == "anthropic" else row["reasoning_tokens"])
        writes = row["content_write_ns"]
        assert len(result.chunk_ns) == len(writes) == 16
        assert result.reasoning_chunks == row["reasoning_tokens"] == 6
        assert min(g - w for g, w in zip(result.chunk_ns, writes, strict=True)) >= 0
        assert result.first_answer_ns is not None and result.first_answer_ns >= writes[6]
        # A kernel t0 (the transmit stamp) precedes the server's receipt; a user t0,
        # taken after the write returned, may come after it on a busy machine (the
        # client waited for a CPU before the stamp): the server's TTFT then counts from
        # t0, the later of the two.
        start = row["received_ns"]
        if result.t0_source != "kernel":
            start = max(start, result.t0_ns)
        server_ttft = writes[0] - start
        gaps.append((result.chunk_ns[0] - result.t0_ns) - server_ttft)
    # The client's TTFT is never shorter than the server's. tests/loopback/test_client_sim.py's
    # bound for chat's fast client holds here too: at most 20 ms longer (warm rounds; the
    # first opens a connection). The httpx and SDK paths stamp t0 in user space after
    # their write returned, so the bound is the fast client's only, as there.
    assert all(g >= 0 for g in gaps), gaps
    if kind == "fast":
        assert statistics.median(gaps[1:]) < 20_000_000, gaps


@pytest.mark.parametrize("api", ["responses", "anthropic"])
def test_mid_stream_error_event_is_classified(
    start_sim_process: Callable[..., str], tmp_path: Path, api: str
) -> None:
    log = tmp_path / "truth.jsonl"
    url = start_sim_process(
        tiers=(TIER,), truth_log=str(log), time_scale=1.0, faults="stream_error=1:at=0.5"
    )
    result = stream_one("fast", _req(url, api))
    rec = record(result)
    (row,) = truth_rows(log)
    assert row["fault"] == "stream_error"
    assert rec.status == "error" and rec.error_class == "http_5xx", (
        rec.error_class,
        rec.error_message,
    )
    # every token the server sent before the error was seen, none invented
    assert len(result.chunk_ns) == len(row["content_write_ns"]) == row["output_tokens"] == 8
