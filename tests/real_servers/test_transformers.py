"""tokrate against HF ``transformers serve`` (continuous batching, CPU, one thread).

Its streams differ from llama.cpp's in ways a client must survive: the role chunk goes
out before prefill (so a client that stamps the first chunk reports a TTFT of ~0), usage
rides inside the finish chunk, the stream ends without ``[DONE]``, the response's
``model`` is ``<folder>@main``, and unknown body fields (``ignore_eos``) are rejected
with 422. transformers reports no timings of its own, so the checks here are structural
plus the size-vs-speed ordering.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from real_servers import harness
from real_servers.models import HF_SHAPES
from real_servers.servers import Server
from tokrate.load.run import run_benchmark
from tokrate.runfolder.loaded_run import load_run
from tokrate.spec.types import EndpointSpec, LoadSpec, ModelSpec, OutputSpec, PromptsSpec, RunSpec

pytestmark = pytest.mark.real_server

MAX_TOKENS = 48
SIZES = [s.name for s in HF_SHAPES]
SHAPES = {s.name: s for s in HF_SHAPES}


def hf_model(server: Server, name: str) -> ModelSpec:
    return ModelSpec("hf", server.models[name], params_b=SHAPES[name].params_b, bytes_per_param=4.0)


def long_prompt(path: Path, words: int = 600) -> Path:
    """One prompt long enough that prefill takes visible time on CPU."""
    text = " ".join(["benchmark"] * words)
    path.write_bytes(orjson.dumps({"id": "long", "task": "chat", "prompt": text}) + b"\n")
    return path


def assert_clean_records(records: list[dict[str, Any]], max_tokens: int) -> None:
    for rec in records:
        assert rec["status"] == "ok", rec["error_message"]
        assert rec["tokens_source"] == "usage"  # from the finish chunk: no usage-only chunk
        assert rec["output_tokens"] == max_tokens
        assert rec["finish_reason"] == "length"
        assert rec["error_class"] is None  # no [DONE], yet not "truncated"
        # On a short prompt the role chunk and the first token can reach the client in one
        # read on a busy machine (then both stamps are that read's); the long-prompt test
        # below is the one that tells the role chunk from the first token.
        assert rec["ttft_s"] >= rec["first_byte_s"]
        assert rec["e2e_s"] > rec["ttft_s"]
        assert 0 < rec["content_chunks"] <= rec["output_tokens"]


@pytest.fixture(scope="module")
def c1_runs(
    hf_server: Server, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, list[dict[str, Any]]]:
    runs = {}
    for name in SIZES:
        tmp = tmp_path_factory.mktemp(f"hf-{name}")
        prompts = harness.distinct_length_prompts(tmp / "prompts.jsonl", 5)
        records = harness.bench(
            tmp,
            "c1",
            hf_server.base_url,
            [hf_model(hf_server, name)],
            prompts,
            requests=4,
            max_tokens=MAX_TOKENS,
        )
        runs[name] = harness.ok_records(records)
    return runs


def test_transformers_stream_shape(hf_server: Server, tmp_path: Path) -> None:
    """The quirks, as sent: role chunk first and before prefill, usage in the finish chunk,
    no [DONE], model ``<folder>@main``."""
    folder = hf_server.models["hf-rand-91m"]
    events = harness.raw_stream(hf_server.base_url, folder, " ".join(["benchmark"] * 600), 8)
    first = events[0].data
    assert first is not None and first["choices"][0]["delta"] == {"role": "assistant"}
    content = [e for e in events if harness.content_of(e)]
    assert content[0].at_s - events[0].at_s > 0.02, "role chunk was not sent before prefill"
    last = events[-1].data
    assert last is not None, "transformers serve now sends [DONE]"
    assert last["choices"][0]["finish_reason"] == "length"
    assert last["usage"]["completion_tokens"] == 8
    assert not any(e.is_done for e in events)
    assert {e.data["model"] for e in events if e.data} == {folder + "@main"}


@pytest.mark.parametrize("name", SIZES)
def test_records_are_clean_on_every_size(
    c1_runs: dict[str, list[dict[str, Any]]], name: str
) -> None:
    assert len(c1_runs[name]) == 4
    assert_clean_records(c1_runs[name], MAX_TOKENS)


def test_speed_falls_with_size(c1_runs: dict[str, list[dict[str, Any]]]) -> None:
    harness.assert_falls_with_size([c1_runs[name] for name in SIZES])


def test_ttft_is_not_the_role_chunk_on_a_long_prompt(hf_server: Server, tmp_path: Path) -> None:
    records = harness.bench(
        tmp_path,
        "long",
        hf_server.base_url,
        [hf_model(hf_server, "hf-rand-91m")],
        long_prompt(tmp_path / "long.jsonl"),
        requests=2,
        max_tokens=8,
    )
    for rec in harness.ok_records(records):
        # The role chunk arrives at once; the first token only after prefill.
        assert rec["ttft_s"] - rec["first_byte_s"] > 0.02, rec


@pytest.mark.parametrize("client", ["fast", "httpx", "openai"])
def test_every_client_reads_transformers_streams(
    hf_server: Server, tmp_path: Path, client: str
) -> None:
    prompts = harness.distinct_length_prompts(tmp_path / "prompts.jsonl", 5)
    records = harness.bench(
        tmp_path,
        client,
        hf_server.base_url,
        [hf_model(hf_server, "hf-rand-24m")],
        prompts,
        concurrency=(2,),
        requests=4,
        max_tokens=MAX_TOKENS,
        client=client,
    )
    measured = harness.ok_records(records)
    assert len(measured) == 4
    assert_clean_records(measured, MAX_TOKENS)


def test_four_streams_batch_continuously(hf_server: Server, tmp_path: Path) -> None:
    prompts = harness.distinct_length_prompts(tmp_path / "prompts.jsonl", 9)
    records = harness.bench(
        tmp_path,
        "c4",
        hf_server.base_url,
        [hf_model(hf_server, "hf-rand-24m")],
        prompts,
        concurrency=(4,),
        requests=8,
        max_tokens=MAX_TOKENS,
    )
    measured = harness.ok_records(records)
    assert len(measured) == 8
    assert_clean_records(measured, MAX_TOKENS)


def test_ignore_eos_is_rejected_cleanly(hf_server: Server, tmp_path: Path) -> None:
    """``load.ignore_eos`` adds vLLM's ``ignore_eos``/``min_tokens``: transformers answers
    422, and every request becomes an http_4xx record naming the field, none lost."""
    prompts = harness.distinct_length_prompts(tmp_path / "prompts.jsonl", 2)
    spec = RunSpec(
        endpoints=(EndpointSpec("hf", hf_server.base_url),),
        models=(hf_model(hf_server, "hf-rand-3m"),),
        load=LoadSpec(requests=2, ignore_eos=True),
        prompts=PromptsSpec(paths=(str(prompts),), max_tokens=8),
        output=OutputSpec(dir=str(tmp_path), run_id="eos", report=False),
    )
    result = run_benchmark(spec)
    records = load_run(result.run_dir).records.to_dicts()
    assert len(records) == 2
    for rec in records:
        assert rec["status"] == "error" and rec["error_class"] == "http_4xx"
        assert rec["http_status"] == 422
        assert "ignore_eos" in rec["error_message"], rec["error_message"]


def test_size_chart_falls_with_size_under_the_cpu_bound(hf_server: Server, tmp_path: Path) -> None:
    """One run over every transformers size, reported against a CPU profile: the
    size-vs-speed points fall with size and sit under the memory-bandwidth bound of
    4-byte (float32) weights, as on llama.cpp."""
    import itertools

    from tokrate.hardware import get_hardware
    from tokrate.report.build import build_report
    from tokrate.report.data import combine_runs, size_speed_points, targets_frame
    from tokrate.spec.types import ClientSpec

    hardware_name = "cpu-ddr5-2ch"
    prompts = harness.distinct_length_prompts(tmp_path / "prompts.jsonl", 4)
    spec = RunSpec(
        endpoints=(EndpointSpec("hf", hf_server.base_url, model_check="off"),),
        models=tuple(hf_model(hf_server, name) for name in SIZES),
        load=LoadSpec(concurrency=(1,), requests=3, warmup_requests=1, targets="sequential"),
        prompts=PromptsSpec(paths=(str(prompts),), max_tokens=MAX_TOKENS),
        client=ClientSpec(unique_prompts=False),
        output=OutputSpec(dir=str(tmp_path), run_id="hf-sizes", report=False),
    )
    result = run_benchmark(spec)
    assert result.exit_code == 0
    run = load_run(result.run_dir)
    hardware = get_hardware(hardware_name)
    points, notes = size_speed_points(
        combine_runs([(run.name, run.records)]), targets_frame([(run.name, run.info)]), hardware
    )
    assert notes == []
    rows = points.sort("x_params_b").to_dicts()
    assert len(rows) == len(SIZES)
    speeds = [r["tps_p50"] for r in rows]
    assert all(a > b for a, b in itertools.pairwise(speeds)), speeds
    for r in rows:
        bound = hardware.bandwidth_bytes_per_s / (r["x_params_b"] * 1e9 * 4.0)
        assert r["bound_tps"] == pytest.approx(bound)
        assert r["tps_p90"] < bound, (r["model"], r["tps_p90"], bound)
    out = build_report([run.path], hardware=hardware_name, formats=("svg",))
    assert (
        f"bound: {hardware_name}, 4 B/param" in (out / "charts" / "size_vs_speed.svg").read_text()
    )
