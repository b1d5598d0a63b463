"""tokrate against llama.cpp's llama-server: its numbers agree with the server's own.

llama-server times every request itself (``timings``: ``prompt_ms``, and
``predicted_per_token_ms`` over the n-1 decode steps after the first token, the same
n-1 gaps tokrate's TPOT spans) and prints them per task in its log. Each run here uses
prompts of distinct token counts with ``cache_prompt: false`` (a per-model extra_body),
so a record's usage ``prompt_tokens`` names its server task exactly.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from real_servers import harness
from real_servers.models import GGUF_MAX_TOKENS, GGUF_SHAPES
from real_servers.servers import Server
from tokrate.spec import ModelSpec

pytestmark = pytest.mark.real_server

#: Client vs server decode speed, per request (issue 15).
DECODE_AGREEMENT = 0.02
SIZES = [s.name for s in GGUF_SHAPES]
SHAPES = {s.name: s for s in GGUF_SHAPES}


def llama_model(name: str) -> ModelSpec:
    return ModelSpec(
        "llama",
        name,
        params_b=SHAPES[name].params_b,
        bytes_per_param=2.0,
        extra_body=(("cache_prompt", False), ("ignore_eos", True)),
    )


def measured_pairs(
    server: Server,
    tmp: Path,
    run_id: str,
    *,
    concurrency: int,
    requests: int,
    base_url: str | None = None,
    model: ModelSpec | None = None,
    max_tokens: int | None = None,
    **bench_kwargs: Any,
) -> list[tuple[dict[str, Any], harness.LlamaTimings]]:
    """Records paired with llama-server's tasks (see harness.run_and_match), sent to
    ``server`` or, with ``base_url``/``model``, through a gateway in front of it.

    When the agreement misses, the run is measured again, up to three runs in all; the
    bound is never loosened. On a shared 2-core machine other processes can starve
    llama-server's HTTP thread (its timings count compute, not writes), so tokens it
    computed on time reach the socket in a burst: TTFT late, decode "faster" than the
    server's own figure (seen: +250% on one request of four, TTFT 238 ms against 9 ms).
    tokrate measured that burst correctly; a disagreement in every one of three runs is
    a real one."""
    size = next(iter(server.models))
    tokens = max_tokens or GGUF_MAX_TOKENS[size]
    for attempt in (1, 2, 3):
        pairs, run = harness.run_and_match(
            server.log, tmp, f"{run_id}-{attempt}", base_url or server.base_url,
            model or llama_model(size), concurrency=concurrency, requests=requests,
            max_tokens=tokens, **bench_kwargs,
        )  # fmt: skip
        if abs(harness.worst_decode_diff(pairs)) <= DECODE_AGREEMENT:
            break
        lag = run.info.loop_lag
        print(f"{run_id}: run {attempt} disagrees (tokrate loop lag: {lag}); measuring again")  # noqa: T201
    return pairs


def assert_decode_agrees(
    pairs: list[tuple[dict[str, Any], harness.LlamaTimings]], max_tokens: int
) -> None:
    """Per request: 1/TPOT within 2% of the server's decode speed, all tokens counted
    from usage, TTFT no shorter than the server's prompt processing."""
    lines = []
    for rec, task in pairs:
        client_tps = 1.0 / rec["tpot_s"]
        server_tps = task.decode_tps
        rel = client_tps / server_tps - 1.0
        lines.append(
            f"{rec['prompt_id']}: client {client_tps:8.2f} tok/s, server {server_tps:8.2f} tok/s "
            f"({rel:+.2%}), ttft {rec['ttft_s'] * 1000:7.1f} ms >= prompt {task.prompt_ms:6.1f} ms"
        )
        assert rec["tokens_source"] == "usage"
        assert rec["output_tokens"] == task.predicted_n == max_tokens
        assert rec["ttft_s"] * 1000.0 >= task.prompt_ms
    print("\n".join(lines))  # noqa: T201 -- the per-request table, shown with -s
    assert abs(harness.worst_decode_diff(pairs)) <= DECODE_AGREEMENT, "\n".join(lines)


@pytest.fixture(scope="module")
def c1_runs(
    llama_servers: dict[str, Server], tmp_path_factory: pytest.TempPathFactory
) -> dict[str, list[tuple[dict[str, Any], harness.LlamaTimings]]]:
    """Single-stream runs of every size, shared by the agreement and curve tests."""
    runs = {}
    for name in SIZES:
        tmp = tmp_path_factory.mktemp(f"llama-{name}-c1")
        runs[name] = measured_pairs(llama_servers[name], tmp, "c1", concurrency=1, requests=4)
    return runs


@pytest.mark.parametrize("name", SIZES)
def test_single_stream_decode_speed_agrees_with_llama_timings(
    c1_runs: dict[str, list[tuple[dict[str, Any], harness.LlamaTimings]]], name: str
) -> None:
    assert_decode_agrees(c1_runs[name], GGUF_MAX_TOKENS[name])


@pytest.mark.parametrize("name", SIZES)
def test_four_streams_decode_speed_agrees_with_llama_timings(
    llama_servers: dict[str, Server], tmp_path: Path, name: str
) -> None:
    pairs = measured_pairs(llama_servers[name], tmp_path, "c4", concurrency=4, requests=8)
    assert_decode_agrees(pairs, GGUF_MAX_TOKENS[name])
    assert len({task.slot for _, task in pairs}) > 1, "the 4 streams never ran side by side"


def test_speed_falls_with_size(
    c1_runs: dict[str, list[tuple[dict[str, Any], harness.LlamaTimings]]],
) -> None:
    harness.assert_falls_with_size([[rec for rec, _ in c1_runs[name]] for name in SIZES])


@pytest.mark.parametrize("client", ["fast", "httpx", "openai"])
def test_every_client_agrees_with_llama_timings(
    llama_servers: dict[str, Server], tmp_path: Path, client: str
) -> None:
    server = llama_servers["rand-24m"]
    pairs = measured_pairs(server, tmp_path, client, concurrency=2, requests=4, client=client)
    assert_decode_agrees(pairs, GGUF_MAX_TOKENS["rand-24m"])
    assert all(rec["client"] == client for rec, _ in pairs)
    assert all(rec["content_chunks"] == GGUF_MAX_TOKENS["rand-24m"] for rec, _ in pairs)


def test_llama_stream_shape(llama_servers: dict[str, Server]) -> None:
    """What llama-server sends (so the other tests' assumptions are checked, not assumed):
    a role chunk with ``content: null``, one chunk per token, a finish chunk, then a usage
    chunk with empty ``choices`` carrying ``timings``, then ``[DONE]``; the response's
    ``model`` is the ``--alias``."""
    server = llama_servers["rand-3m"]
    events = harness.raw_stream(server.base_url, "rand-3m", "shape probe", 16, cache_prompt=False)
    assert events[-1].is_done
    first = events[0].data
    assert first is not None and first["choices"][0]["delta"] == {
        "role": "assistant",
        "content": None,
    }
    content = [e for e in events if harness.content_of(e)]
    assert len(content) == 16
    usage_chunk = events[-2].data
    assert usage_chunk is not None and usage_chunk["choices"] == []
    assert usage_chunk["usage"]["completion_tokens"] == 16
    assert usage_chunk["timings"]["predicted_n"] == 16
    assert {e.data["model"] for e in events if e.data} == {"rand-3m"}
