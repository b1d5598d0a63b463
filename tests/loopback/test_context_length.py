"""Issue 15: a prompt that does not fit the server's context gets the error class
``context_length`` (not ``http_4xx``), a one-line hint naming the prompts, and a
pre-flight warning where the server reports its context size; an answer llama.cpp cut
short at its context slot (status ok, finish_reason "length", fewer tokens than asked)
is flagged. Also T1: a /models 500 that drops the connection does not fail the probe.

Real loopback servers: the simulator (``context_length_exceeded`` like OpenAI, its
context in /models as ``max_model_len`` like vLLM) and the hostile server (llama.cpp's
and others' wording, llama-server's /models with ``meta.n_ctx``).
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
from tokrate.client.failures import is_context_overflow
from tokrate.client.model_names import context_size

LLAMA_400 = (
    b'{"error": {"code": 400, "type": "exceed_context_size_error", "message": "request (3010'
    b' tokens) exceeds the available context size (2048 tokens), try increasing it",'
    b' "n_prompt_tokens": 3010, "n_ctx": 2048}}'
)


@pytest.fixture(scope="module")
def hostile() -> Iterator[HostileServer]:
    with HostileServer() as s:
        yield s


@pytest.mark.parametrize(
    ("status", "body", "overflow"),
    [
        (400, LLAMA_400, True),
        (400, b'{"error": {"message": "too long", "code": "context_length_exceeded"}}', True),
        (400, b"This model's maximum context length is 4096 tokens. However, you requested", True),
        (400, b"The input (5000 tokens) is longer than the model's context length (4096)", True),
        (422, b"Input validation error: `inputs` tokens + `max_new_tokens` must be <= 4096", True),
        (400, b'{"error": {"message": "Unexpected fields: ignore_eos", "type": "x"}}', False),
        (500, b"maximum context length is 4096 tokens", False),  # a 5xx is the server's fault
        (404, b'{"error": {"code": "context_length_exceeded"}}', False),
    ],
)
def test_overflow_wordings(status: int, body: bytes, overflow: bool) -> None:
    assert is_context_overflow(status, body) is overflow


def test_the_hint_reads_the_context_size_from_each_wording() -> None:
    assert context_size("exceeds the available context size (2048 tokens), try") == 2048
    assert context_size("This model's maximum context length is 4096 tokens. However") == 4096
    assert context_size("Unexpected fields") is None


@pytest.mark.parametrize("kind", KINDS)
def test_simulator_overflow_is_context_length_on_every_client(sim_url: str, kind: str) -> None:
    # sim-7b's context is 4096 tokens: 5000 output tokens cannot fit.
    rec = record(stream_one(kind, req_for(sim_url, model="sim-7b", max_tokens=5000)))
    assert rec.error_class == "context_length", rec.error_message
    assert rec.http_status == 400 and "maximum context length is 4096" in (rec.error_message or "")


@pytest.mark.parametrize("kind", KINDS)
def test_llama_wording_is_context_length(hostile: HostileServer, kind: str) -> None:
    body = "request_(3010_tokens)_exceeds_the_available_context_size_(2048_tokens)"
    rec = record(stream_one(kind, req_for(hostile.base_url("status", code=400, body=body))))
    assert rec.error_class == "context_length", rec.error_message


def test_other_400s_stay_http_4xx(hostile: HostileServer) -> None:
    url = hostile.base_url("status", code=400, body="Unexpected_fields_in_the_request")
    assert record(stream_one("fast", req_for(url))).error_class == "http_4xx"


def _run(out: Path, url: str, model: str, *extra: str) -> tuple[int, dict[str, Any], str]:
    argv = ["run", "--base-url", url, "-m", model, "--output-dir", str(out), "--no-report"]
    code = main([*argv, "--quiet", *extra])
    (run_dir,) = out.iterdir()
    return code, orjson.loads((run_dir / "run.json").read_bytes()), str(run_dir)


def test_preflight_names_prompts_that_cannot_fit_and_the_run_hints(
    sim_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, run, _ = _run(tmp_path, sim_url, "sim-7b", "--requests", "4", "--max-tokens", "5000")
    assert code == 1  # no ok request at all
    err = capsys.readouterr().err
    (pre,) = [w for w in run["warnings"] if "cannot fit" in w]
    host = sim_url.split("/")[2]  # --base-url's endpoint is named by its host and port
    assert pre.startswith(f"target {host}/sim-7b: ")
    assert "prompts cannot fit its 4096-token context (estimated prompt + max_tokens)" in pre
    (hint,) = [w for w in run["warnings"] if "exceed the" in w]
    assert hint.startswith(f"target {host}/sim-7b: 4 prompts (")
    assert "exceed the 4096-token context: use shorter prompts, a smaller max_tokens" in hint
    assert "(context_length 4)" in err and f"warning: {pre}" in err


def test_llama_preflight_reads_meta_n_ctx(hostile: HostileServer, tmp_path: Path) -> None:
    url = hostile.base_url("llama", n_ctx=64, answer_model="m")
    code, run, _ = _run(tmp_path, url, "m", "--requests", "2", "--max-tokens", "60")
    (pre,) = [w for w in run["warnings"] if "cannot fit" in w]
    assert "its 64-token context" in pre
    assert code == 0  # the hostile server answers anyway; the warning came first


def test_an_answer_cut_at_the_context_slot_is_flagged(
    hostile: HostileServer, tmp_path: Path
) -> None:
    # llama.cpp's T6: status ok, finish_reason "length", 3 tokens of the 8 asked for.
    url = hostile.base_url("ok", tokens=3)
    code, run, _ = _run(tmp_path, url, "m", "--requests", "2", "--max-tokens", "8")
    assert code == 0
    (line,) = [w for w in run["warnings"] if "finish_reason 'length'" in w]
    assert "stopped at 3 of max_tokens 8" in line and "context slot" in line


def test_full_length_answers_are_not_flagged(hostile: HostileServer, tmp_path: Path) -> None:
    code, run, _ = _run(
        tmp_path, hostile.base_url("ok"), "m", "--requests", "2", "--max-tokens", "8"
    )
    assert code == 0 and not [w for w in run["warnings"] if "finish_reason" in w]


def test_models_500_that_drops_the_connection_still_probes(
    hostile: HostileServer, tmp_path: Path
) -> None:
    # T1: transformers serve answers /models with a 500 and closes the connection
    # without a Connection: close header; the probe must not reuse it.
    url = hostile.base_url("models500", tokens=3)
    code, run, _ = _run(tmp_path, url, "m", "--requests", "2", "--max-tokens", "3")
    assert code == 0, run["warnings"]
    assert run["counts"]["ok"] == 2


def test_a_chunk_count_is_never_taken_for_a_short_answer() -> None:
    from tokrate.load.record_warnings import RecordWarnings
    from tokrate.runfolder.records import RequestRecord

    def rec(source: str) -> RequestRecord:
        return RequestRecord(
            run_id="r",
            endpoint="e",
            model="m",
            scenario="s",
            prompt_id="p",
            task="t",
            request_index=0,
            started_at=0.0,
            t0_ns=0,
            status="ok",
            finish_reason="length",
            output_tokens=3,
            tokens_source=source,
        )

    # Without usage, 3 chunks may hold all 8 tokens (servers group tokens in chunks).
    assert RecordWarnings({"p": 8}, unique_prompts=True).add(rec("chunks")) == []
    ((kind, _),) = RecordWarnings({"p": 8}, unique_prompts=True).add(rec("usage"))
    assert kind == "short_length"


def test_an_in_band_overflow_error_is_context_length() -> None:
    from tokrate.client.accumulate import StreamState

    state = StreamState()
    assert state.feed(b"data: " + LLAMA_400 + b"\n\n", 1)
    assert state.error_class == "context_length"
    other = StreamState()
    assert other.feed(b'data: {"error": {"message": "overloaded", "code": 503}}\n\n', 1)
    assert other.error_class == "http_5xx"
