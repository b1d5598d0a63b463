"""tokrate against llama.cpp's llama-server: its numbers agree with the server's own.

llama-server times every request itself (``timings``: ``prompt_ms``, and
``predicted_per_token_ms`` over the n-1 decode steps after the first token, the same
n-1 gaps tokrate's TPOT spans) and prints them per task in its log. Each run here uses
prompts of distinct token counts with ``cache_prompt: false`` (a per-model extra_body),
so a record's usage ``prompt_tokens`` names its server task exactly.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from real_servers import harness
from real_servers import models as model_files
from real_servers.llama import (
    DECODE_AGREEMENT,
    SHAPES,
    assert_decode_agrees,
    llama_model,
    measured_pairs,
)
from real_servers.models import GGUF_MAX_TOKENS, GGUF_SHAPES
from real_servers.paths import ServerMissing, missing
from real_servers.servers import Server, llama_server
from tokrate.spec.types import ModelSpec

pytestmark = pytest.mark.real_server

SIZES = [s.name for s in GGUF_SHAPES]


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


# --- what records keep of llama-server's answers (issue 15, records side) ---------------


def _timings(rec: dict[str, Any]) -> dict[str, float]:
    raw = rec["server_timings"]
    assert isinstance(raw, str), rec  # records.parquet keeps the object as JSON
    timings: dict[str, float] = orjson.loads(raw)
    return timings


def test_records_keep_server_timings_that_agree_with_the_client(
    llama_servers: dict[str, Server], tmp_path: Path
) -> None:
    """Each record's own ``server_timings`` (llama-server's ``timings`` of that request)
    gives the server's decode speed, (predicted_n - 1) / predicted_ms over the same n-1
    gaps as TPOT: the client's 1/TPOT is within 2% of it, request by request, without
    reading the server log. Measured again (up to three runs) like measured_pairs."""
    name = "rand-24m"
    max_tokens = GGUF_MAX_TOKENS[name]
    server = llama_servers[name]
    prompts = harness.distinct_length_prompts(tmp_path / "p.jsonl", 6)
    for attempt in (1, 2, 3):
        run = harness.bench_run(
            tmp_path,
            f"timings-{attempt}",
            server.base_url,
            [llama_model(name)],
            prompts,
            concurrency=(2,),
            requests=4,
            max_tokens=max_tokens,
            warmup_requests=2,
        )
        recs = harness.ok_records(run.records)
        assert len(recs) == 4
        diffs = []
        for rec in recs:
            t = _timings(rec)
            assert t["predicted_n"] == rec["output_tokens"] == max_tokens
            assert t["prompt_n"] + t["cache_n"] == rec["input_tokens"]
            assert rec["cached_tokens"] == t["cache_n"] == 0  # cache_prompt = false
            assert rec["ttft_s"] * 1000.0 >= t["prompt_ms"]
            server_tps = (t["predicted_n"] - 1) / (t["predicted_ms"] / 1000.0)
            diffs.append(1.0 / rec["tpot_s"] / server_tps - 1.0)
        worst = max(diffs, key=abs)
        print(f"timings run {attempt}: worst client vs record's server decode {worst:+.2%}")  # noqa: T201
        if abs(worst) <= DECODE_AGREEMENT:
            break
    assert abs(worst) <= DECODE_AGREEMENT, diffs
    assert {rec["response_model"] for rec in recs} == {name}  # the --alias
    assert not [w for w in run.info.warnings if "answered as model" in w]
    # T8: llama-server closes each connection after its answer; no pool overflow at c=2.
    assert not [w for w in run.info.warnings if "pool_size" in w], run.info.warnings


def test_a_repeated_prompt_shows_its_prompt_cache_hits(
    llama_servers: dict[str, Server], tmp_path: Path
) -> None:
    """llama-server's default ``cache_prompt``: the same prompt again is served from the
    cache (cached_tokens = all but the last prompt token), and the run says so."""
    prompts = tmp_path / "same.jsonl"
    text = " ".join(["benchmark"] * 40)
    prompts.write_bytes(orjson.dumps({"id": "same", "task": "chat", "prompt": text}) + b"\n")
    model = ModelSpec("llama", "rand-3m", extra_body=(("cache_prompt", True),))
    run = harness.bench_run(
        tmp_path,
        "cache",
        llama_servers["rand-3m"].base_url,
        [model],
        prompts,
        requests=3,
        max_tokens=8,
        warmup_requests=1,
        unique_prompts=False,
    )
    recs = harness.ok_records(run.records)
    assert len(recs) == 3
    for rec in recs:
        assert rec["cached_tokens"] == rec["input_tokens"] - 1, rec
        assert _timings(rec)["cache_n"] == rec["cached_tokens"]
    (line,) = [w for w in run.info.warnings if "prompt cache" in w]
    assert "unique_prompts is off" in line and "cache_prompt = false" in line


@pytest.fixture(scope="module")
def small_context_llama() -> Iterator[Server]:
    """llama-server with 256 tokens of context per slot (two slots share 512)."""
    from real_servers.conftest import _logs

    shape = SHAPES["rand-3m"]
    try:
        path = model_files.gguf_model(shape)
        with llama_server(
            path, "rand-3m", _logs() / "llama-small-ctx.log", slots=2, context=512
        ) as srv:
            yield srv
    except ServerMissing as exc:
        missing(str(exc))


def test_context_overflow_is_its_own_class_with_a_preflight_line(
    small_context_llama: Server, tmp_path: Path
) -> None:
    """A prompt longer than the slot's 256 tokens is ``context_length`` (llama.cpp's
    ``exceed_context_size_error``), named before the load from /v1/models' meta.n_ctx
    and summed up after it; a prompt that fits but whose max_tokens cannot (llama.cpp's
    T6: status ok, cut short) is flagged; the pool warning of T8 does not fire although
    llama-server closes every connection after its response."""
    prompts = tmp_path / "ctx.jsonl"
    lines = [
        {"id": "fits", "task": "chat", "prompt": " ".join(["benchmark"] * 12), "max_tokens": 16},
        {"id": "too-long", "task": "chat", "prompt": " ".join(["benchmark"] * 150)},
        {"id": "cut", "task": "chat", "prompt": " ".join(["benchmark"] * 30), "max_tokens": 200},
    ]
    prompts.write_bytes(b"\n".join(orjson.dumps(line) for line in lines) + b"\n")
    model = ModelSpec(
        "llama", "rand-3m", extra_body=(("cache_prompt", False), ("ignore_eos", True))
    )
    run = harness.bench_run(
        tmp_path,
        "ctx",
        small_context_llama.base_url,
        [model],
        prompts,
        requests=3,
        max_tokens=None,
        warmup_requests=0,
    )
    by_prompt = {rec["prompt_id"]: rec for rec in run.records.to_dicts()}
    assert by_prompt["fits"]["status"] == "ok" and by_prompt["fits"]["output_tokens"] == 16
    too_long = by_prompt["too-long"]
    assert too_long["error_class"] == "context_length", too_long["error_message"]
    assert "exceeds the available context size (256 tokens)" in too_long["error_message"]
    cut = by_prompt["cut"]
    assert cut["status"] == "ok" and cut["finish_reason"] == "length"
    assert cut["output_tokens"] < 200 and cut["input_tokens"] + cut["output_tokens"] == 256
    warnings = run.info.warnings
    (pre,) = [w for w in warnings if "cannot fit" in w]
    assert "its 256-token context" in pre and "too-long" in pre and "cut" in pre
    assert "fits" not in pre.split(":", 2)[2]
    (hint,) = [w for w in warnings if "exceed the" in w]
    assert "1 prompt (too-long) exceed the 256-token context" in hint
    (short,) = [w for w in warnings if "finish_reason 'length'" in w]
    assert "prompt cut stopped at" in short
    assert not [w for w in warnings if "pool_size" in w], warnings


def test_without_alias_the_gguf_path_is_the_same_model(tmp_path: Path) -> None:
    """llama-server without ``--alias`` lists and answers the path to its .gguf: a run
    asking for the file's stem passes the pre-flight, each record keeps the raw path in
    response_model and no swapped-model warning fires; a run asking for another name
    (llama.cpp serves it anyway, probe only) is warned about."""
    from real_servers.conftest import _logs

    with contextlib.ExitStack() as stack:
        try:
            path = model_files.gguf_model(SHAPES["rand-3m"])
            log = _logs() / "llama-no-alias.log"
            srv = stack.enter_context(llama_server(path, None, log, slots=1, context=1024))
        except ServerMissing as exc:
            missing(str(exc))
        prompts = harness.distinct_length_prompts(tmp_path / "p.jsonl", 2)
        run = harness.bench_run(
            tmp_path,
            "stem",
            srv.base_url,
            [ModelSpec("llama", path.stem)],
            prompts,
            requests=2,
            max_tokens=4,
        )
        assert set(run.records["response_model"].to_list()) == {str(path)}
        assert not [w for w in run.info.warnings if "answered as model" in w], run.info.warnings
        run = harness.bench_run(
            tmp_path,
            "other",
            srv.base_url,
            [ModelSpec("llama", "gpt-4o")],
            prompts,
            requests=2,
            max_tokens=4,
            model_check="probe",
        )
        (line,) = [w for w in run.info.warnings if "answered as model" in w]
        assert line.startswith(f"target llama/gpt-4o: the server answered as model '{path}'")
