"""Issue 15, records side: the model name a response carries, prompt-cache hits and the
server's own timings, on every client, and the run warnings they lead to.

Real loopback servers: the simulator (answers with the model asked for) and the hostile
server in ``llama`` mode (llama-server's shapes: a .gguf path as the model, usage with
``prompt_tokens_details.cached_tokens``, a ``timings`` object in the usage chunk).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from helpers.hostile_server import HostileServer
from helpers.requests import KINDS, record, req_for, stream_one

from tokrate.cli import main
from tokrate.client.chunks import MAX_TIMING_KEYS, parse_timings
from tokrate.client.model_names import comparable_name, same_model
from tokrate.load.record_warnings import RecordWarnings
from tokrate.runfolder.records import RequestRecord
from tokrate.runfolder.records_frame import frame_to_records, records_to_frame


@pytest.fixture(scope="module")
def hostile() -> Iterator[HostileServer]:
    with HostileServer() as s:
        yield s


@pytest.mark.parametrize(
    ("requested", "answered", "same"),
    [
        ("m", "m", True),
        ("tiny", "/home/ci/models/tiny.gguf", True),  # llama-server without --alias
        ("tiny", "C:\\models\\TINY.GGUF", True),
        ("/ckpt/hf-rand-3m", "/ckpt/hf-rand-3m@main", True),  # transformers serve
        ("hf-rand-3m", "/ckpt/hf-rand-3m@main", True),
        ("gpt-4o", "gpt-4o-2024-08-06", True),  # OpenAI's dated snapshot
        ("sim-7b", "sim-70b", False),
        ("m", "/models/rand-3m.gguf", False),  # llama.cpp ignored the name asked for
        ("llama-3-8b", "llama-3-70b", False),
    ],
)
def test_model_names_compare_after_normalising(requested: str, answered: str, same: bool) -> None:
    assert same_model(requested, answered) is same
    assert comparable_name("/a/b/x.gguf@main") == "x"


def test_timings_keep_only_bounded_finite_numbers() -> None:
    got = parse_timings(
        {"prompt_ms": 1.5, "cache_n": 3, "bad": "x", "flag": True, "inf": float("inf"), 7: 1}
    )
    assert got == {"prompt_ms": 1.5, "cache_n": 3}
    assert parse_timings("nope") is None and parse_timings({"a": "b"}) is None
    many = parse_timings({f"k{i}": i for i in range(100)})
    assert many is not None and len(many) == MAX_TIMING_KEYS


@pytest.mark.parametrize("kind", KINDS)
def test_llama_shapes_fill_the_new_columns_on_every_client(
    hostile: HostileServer, kind: str
) -> None:
    base = hostile.base_url("llama", tokens=6, cached=9)
    rec = record(stream_one(kind, req_for(base, max_tokens=6)))
    assert rec.status == "ok", rec.error_message
    assert rec.response_model == "/models/rand-3m.gguf"  # raw, as the server sent it
    assert rec.cached_tokens == 9 and rec.input_tokens == 11
    assert rec.server_timings is not None
    assert rec.server_timings["predicted_n"] == 6 and rec.server_timings["cache_n"] == 9
    assert rec.server_timings["predicted_per_second"] == 400.0
    # Through parquet and back: the timing object survives as JSON.
    (back,) = frame_to_records(records_to_frame([rec]))
    assert back.server_timings == rec.server_timings and back.cached_tokens == 9


@pytest.mark.parametrize("kind", KINDS)
def test_cache_n_stands_in_when_usage_has_no_cached_count(
    hostile: HostileServer, kind: str
) -> None:
    rec = record(stream_one(kind, req_for(hostile.base_url("llama", tokens=3), max_tokens=3)))
    assert rec.status == "ok" and rec.cached_tokens == 0  # timings.cache_n = 0


@pytest.mark.parametrize("kind", KINDS)
def test_the_simulator_answers_as_the_model_asked_for(sim_url: str, kind: str) -> None:
    rec = record(stream_one(kind, req_for(sim_url, model="sim-1b", max_tokens=4)))
    assert rec.status == "ok", rec.error_message
    assert rec.response_model == rec.model
    assert rec.cached_tokens is None and rec.server_timings is None  # it sends neither


def _run(out: Path, url: str, *extra: str) -> tuple[int, dict[str, Any]]:
    argv = ["run", "--base-url", url, "-m", "m", "--output-dir", str(out), "--no-report"]
    code = main([*argv, "--requests", "4", "--max-tokens", "4", "--quiet", *extra])
    (run_dir,) = out.iterdir()
    return code, orjson.loads((run_dir / "run.json").read_bytes())


def test_a_swapped_model_warns_once_per_target(
    hostile: HostileServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, run = _run(tmp_path, hostile.base_url("llama", tokens=4, answer_model="other-7b"))
    assert code == 0
    lines = [w for w in run["warnings"] if "answered as model" in w]
    assert [w.split("/", 1)[1] for w in lines] == [
        "m: the server answered as model 'other-7b', not the 'm' requested"
        " (another backend may be answering; each record keeps it in response_model):"
        " check the endpoint's model routing"
    ]
    assert capsys.readouterr().err.count("answered as model 'other-7b'") == 1


def test_a_prompt_cache_that_flatters_ttft_is_named(hostile: HostileServer, tmp_path: Path) -> None:
    code, run = _run(tmp_path, hostile.base_url("llama", tokens=4, answer_model="m", cached=10))
    assert code == 0
    (line,) = [w for w in run["warnings"] if "prompt cache" in w]
    assert "took 91% of the prompt tokens" in line  # 10 of 11, every request
    assert "although [client] unique_prompts is on" in line and "cache_prompt = false" in line


def test_no_warning_when_names_match_and_nothing_was_cached(
    hostile: HostileServer, tmp_path: Path
) -> None:
    code, run = _run(tmp_path, hostile.base_url("llama", tokens=4, answer_model="m@main"))
    assert code == 0
    assert not [w for w in run["warnings"] if "model" in w or "cache" in w], run["warnings"]


def test_warnings_on_several_targets_collapse_with_a_count() -> None:
    watch = RecordWarnings({"p": 8}, unique_prompts=True)
    out = []
    for endpoint in ("a", "b", "a"):
        rec = RequestRecord(
            run_id="r",
            endpoint=endpoint,
            model="m",
            scenario="s",
            prompt_id="p",
            task="t",
            request_index=0,
            started_at=0.0,
            t0_ns=0,
            status="ok",
            response_model="x",
        )
        out += watch.add(rec)
    assert [kind for kind, _ in out] == ["response_model", "response_model"]  # once per target
    from tokrate.load.collector import collapse_warnings

    (line,) = collapse_warnings(out)
    assert line.startswith("target a/m: the server answered as model 'x'")
    assert line.endswith("(and 1 more like it)")
