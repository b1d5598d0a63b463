"""tokrate through a LiteLLM proxy: a real gateway hop in front of the real servers.

The proxy (master key; ``gw-llama`` -> the 24 M llama-server, ``gw-hf`` -> the 24 M
transformers checkpoint) re-serialises every chunk, moves usage into a chunk of its own
and ends every stream with ``[DONE]``, even transformers' streams that had none. The
decode speed tokrate measures through it must still agree with llama-server's own
timings.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from real_servers import harness
from real_servers.llama import assert_decode_agrees, measured_pairs
from real_servers.models import GGUF_MAX_TOKENS, GGUF_SHAPES, HF_SHAPES
from real_servers.servers import LITELLM_MASTER_KEY, Server
from tokrate.spec.types import ModelSpec

pytestmark = pytest.mark.real_server

KEY_ENV = "TOKRATE_TEST_LITELLM_KEY"
LLAMA_TOKENS = GGUF_MAX_TOKENS["rand-91m"]
HF_TOKENS = 48


@pytest.fixture(autouse=True)
def _key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KEY_ENV, LITELLM_MASTER_KEY)


def gw_llama() -> ModelSpec:
    shape = next(s for s in GGUF_SHAPES if s.name == "rand-91m")
    return ModelSpec(
        "gw",
        "gw-llama",
        params_b=shape.params_b,
        bytes_per_param=2.0,
        extra_body=(("cache_prompt", False), ("ignore_eos", True)),
    )


def gw_hf() -> ModelSpec:
    shape = next(s for s in HF_SHAPES if s.name == "hf-rand-91m")
    return ModelSpec("gw", "gw-hf", params_b=shape.params_b, bytes_per_param=4.0)


def test_litellm_reshapes_llama_streams(litellm: Server) -> None:
    """llama-server's usage chunk (``choices: []`` plus ``timings``) comes out of LiteLLM
    with ``choices: [{delta: {}}]`` and without ``timings``."""
    events = harness.raw_stream(
        litellm.base_url, "gw-llama", "gateway probe", 16, api_key=LITELLM_MASTER_KEY
    )
    assert events[-1].is_done
    assert sum(1 for e in events if harness.content_of(e)) == 16
    usage = [e.data for e in events if e.data and e.data.get("usage")]
    assert len(usage) == 1 and usage[0]["usage"]["completion_tokens"] == 16
    assert usage[0]["choices"] and "timings" not in usage[0]


def test_litellm_adds_done_to_transformers_streams(litellm: Server) -> None:
    """transformers ends without [DONE] and with usage in the finish chunk; LiteLLM sends
    the role inside the first content chunk, usage in a chunk of its own whose
    ``choices`` is not empty, then [DONE]; ``model`` is the public name."""
    events = harness.raw_stream(
        litellm.base_url, "gw-hf", "gateway probe", 16, api_key=LITELLM_MASTER_KEY
    )
    assert events[-1].is_done  # transformers itself sends none
    first = events[0].data
    assert first is not None and first["choices"][0]["delta"]["role"] == "assistant"
    assert first["choices"][0]["delta"]["content"], "role chunk no longer folded into content"
    usage = [e.data for e in events if e.data and e.data.get("usage")]
    assert len(usage) == 1 and usage[0]["usage"]["completion_tokens"] == 16
    assert usage[0]["choices"] and not usage[0]["choices"][0].get("finish_reason")
    assert {e.data["model"] for e in events if e.data} == {"gw-hf"}


@pytest.mark.parametrize("concurrency", [1, 4])
def test_decode_speed_through_litellm_agrees_with_llama_timings(
    litellm: Server, llama_servers: dict[str, Server], tmp_path: Path, concurrency: int
) -> None:
    pairs = measured_pairs(
        llama_servers["rand-91m"],
        tmp_path,
        f"gw-c{concurrency}",
        concurrency=concurrency,
        requests=4 * concurrency,
        base_url=litellm.base_url,
        model=gw_llama(),
        api_key_env=KEY_ENV,
        max_tokens=LLAMA_TOKENS,
    )
    assert_decode_agrees(pairs, LLAMA_TOKENS)


@pytest.mark.parametrize("client", ["fast", "httpx", "openai"])
def test_every_client_through_litellm(
    litellm: Server, llama_servers: dict[str, Server], tmp_path: Path, client: str
) -> None:
    pairs = measured_pairs(
        llama_servers["rand-91m"],
        tmp_path,
        client,
        concurrency=2,
        requests=4,
        client=client,
        base_url=litellm.base_url,
        model=gw_llama(),
        api_key_env=KEY_ENV,
        max_tokens=LLAMA_TOKENS,
    )
    assert_decode_agrees(pairs, LLAMA_TOKENS)
    hf = harness.bench(
        tmp_path,
        client + "-hf",
        litellm.base_url,
        [gw_hf()],
        harness.distinct_length_prompts(tmp_path / "hf.jsonl", 5),
        concurrency=(2,),
        requests=4,
        max_tokens=HF_TOKENS,
        client=client,
        api_key_env=KEY_ENV,
    )
    measured = harness.ok_records(hf)
    assert len(measured) == 4
    for rec in measured:
        assert rec["tokens_source"] == "usage" and rec["output_tokens"] == HF_TOKENS
        assert rec["status"] == "ok" and rec["finish_reason"] == "length"
        # LiteLLM folds transformers' early role chunk into the first content chunk, so
        # through the gateway the first byte *is* the first token.
        assert rec["ttft_s"] >= rec["first_byte_s"]
