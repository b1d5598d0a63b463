"""Request fields end to end (docs/config.md "Request fields"): a batch file's body
fields reach the server as the same JSON values they were written as (the simulator's
truth log digests, the hostile server's raw bodies), through every client, translated for the Responses API and
Anthropic Messages; a field a stream cannot honour, or one with no mapping for a target,
is refused in one line before anything is sent; an image read from a file is counted as
prompt tokens by the documented rule and moves TTFT by its prefill."""

from __future__ import annotations

import base64
import json
import struct
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import polars as pl
import pytest
from helpers.hostile_server import hostile_server
from helpers.sim_wire import truth_rows

from tokrate.cli import main
from tokrate.client.translate import translate_fields
from tokrate.inputs.prompts import parse_jsonl
from tokrate.sim.capture import field_digest
from tokrate.sim.server import SimConfig, build_state

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Current weather in a city. " + "Long description. " * 40,
            "parameters": {
                "type": "object",
                "properties": {
                    "city": {"type": "string", "description": "A city name"},
                    "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                },
                "required": ["city"],
                "additionalProperties": False,
            },
            "strict": True,
        },
    }
]
SCHEMA = {"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"]}
#: Fields every protocol has a mapping for.
PORTABLE: dict[str, Any] = {
    "tools": TOOLS,
    "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
    "parallel_tool_calls": False,
    "response_format": {"type": "json_schema", "json_schema": {"name": "a", "schema": SCHEMA}},
    "temperature": 0.3,
    "top_p": 0.95,
    "user": "tenant-42",
}
#: Chat Completions only (and what a server accepts beyond the standard).
CHAT_ONLY: dict[str, Any] = {
    "seed": 1234,
    "stop": ["\n\nUser:", "###"],
    "frequency_penalty": 0.5,
    "logit_bias": {"50256": -100},
    "metadata": {"team": "search"},
    "top_k": 40,
    "chat_template_kwargs": {"enable_thinking": False},
}
MESSAGES = [
    {"role": "system", "content": "Answer with one word."},
    {"role": "user", "content": "Which city hosts the Louvre?"},
]


def _batch_file(path: Path, fields: dict[str, Any], n: int = 2) -> Path:
    lines = []
    for i in range(n):
        body = {"model": "gpt-4o-mini", "messages": MESSAGES, **fields, "max_tokens": 16}
        lines.append(
            json.dumps(
                {
                    "custom_id": f"r{i}",
                    "method": "POST",
                    "url": "/v1/chat/completions",
                    "body": body,
                }
            )
        )
    path.write_text("\n".join(lines) + "\n")
    return path


def _config(tmp_path: Path, url: str, prompts: Path, api: str = "chat", kind: str = "fast") -> Path:
    path = tmp_path / f"{api}.toml"
    path.write_text(
        f"""
[client]
kind = "{kind}"
unique_prompts = false
[[endpoint]]
name = "e"
base_url = "{url}"
api = "{api}"
[[model]]
name = "sim-1b"
[load]
concurrency = [1]
requests = 2
[prompts]
paths = ["{prompts}"]
"""
    )
    return path


def _run(config: Path, out: Path) -> int:
    return main(["run", "-c", str(config), "--output-dir", str(out), "--no-report", "--quiet"])


def _streamed(log: Path) -> list[dict[str, Any]]:
    return [r for r in truth_rows(log) if r["request"]["body"].get("stream")]


@pytest.mark.parametrize("kind", ["fast", "httpx", "openai"])
def test_every_chat_body_field_arrives_as_the_same_json_value(
    start_sim: Callable[..., str], tmp_path: Path, kind: str
) -> None:
    log = tmp_path / "truth.jsonl"
    url = start_sim(truth_log=str(log))
    fields = {**PORTABLE, **CHAT_ONLY}
    prompts = _batch_file(tmp_path / "batch.jsonl", fields)
    assert _run(_config(tmp_path, url, prompts, kind=kind), tmp_path / "out") == 0
    rows = _streamed(log)
    assert len(rows) == 2
    (prompt, _) = parse_jsonl(prompts.read_bytes(), "batch.jsonl")
    for row in rows:
        request = row["request"]
        for key, value in fields.items():
            assert request["digests"][key] == field_digest(value), key
        assert request["digests"]["messages"] == field_digest(MESSAGES)
        # tokrate's own: the target's model, a stream asking for usage; the limit kept.
        assert request["body"]["model"] == "sim-1b"
        assert request["body"]["stream_options"] == {"include_usage": True}
        assert request["body"]["max_tokens"] == 16
        # The tools and schema were counted as prompt tokens, exactly as tokrate estimates.
        assert row["input_tokens"] == prompt.input_tokens_est > 200


@pytest.mark.parametrize(
    ("api", "kind"),
    [("responses", "fast"), ("anthropic", "fast"), ("responses", "openai"), ("anthropic", "httpx")],
)
def test_portable_fields_arrive_translated_for_other_protocols(
    start_sim: Callable[..., str], tmp_path: Path, api: str, kind: str
) -> None:
    log = tmp_path / "truth.jsonl"
    url = start_sim(truth_log=str(log))
    fields = dict(PORTABLE)
    if api == "anthropic":
        fields["stop"] = ["###"]
        fields["reasoning_effort"] = "low"
        fields["response_format"] = PORTABLE["response_format"]
    else:
        fields["reasoning_effort"] = "low"
    prompts = _batch_file(tmp_path / "batch.jsonl", fields)
    assert _run(_config(tmp_path, url, prompts, api, kind), tmp_path / "out") == 0
    expected = translate_fields(api, tuple(fields.items()))
    rows = _streamed(log)
    assert len(rows) == 2
    for row in rows:
        assert row["protocol"] == ("messages" if api == "anthropic" else "responses")
        for key, value in expected.items():
            assert row["request"]["digests"][key] == field_digest(value), key
    records = pl.read_parquet(next((tmp_path / "out").iterdir()) / "records.parquet")
    assert records["status"].to_list() == ["ok", "ok"]


def _refused(
    start_sim: Callable[..., str], tmp_path: Path, fields: dict[str, Any], api: str
) -> tuple[int, str, Path]:
    log = tmp_path / "truth.jsonl"
    url = start_sim(truth_log=str(log))
    prompts = _batch_file(tmp_path / "batch.jsonl", fields)
    out = tmp_path / "out"
    code = _run(_config(tmp_path, url, prompts, api), out)
    return code, log.read_text() if log.exists() else "", out


def test_n_3_is_refused_with_nothing_sent(
    start_sim: Callable[..., str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, truth, out = _refused(start_sim, tmp_path, {"n": 3}, "chat")
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert len(err.splitlines()) == 1
    assert "batch.jsonl line 1: body.n: 3 asks for several answers in one stream" in err
    assert truth == ""  # not even the pre-flight probe went out
    assert not out.exists() or list(out.iterdir()) == []


def test_a_field_with_no_mapping_for_a_target_is_refused_with_nothing_sent(
    start_sim: Callable[..., str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, truth, out = _refused(start_sim, tmp_path, {"stop": ["###"]}, "responses")
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert len(err.splitlines()) == 1
    assert "batch.jsonl line 1: stop: has no equivalent in the Responses API" in err
    assert "(target e/sim-1b speaks responses)" in err
    assert truth == ""
    assert not out.exists() or list(out.iterdir()) == []


def test_the_hostile_server_receives_every_field_as_written(tmp_path: Path) -> None:
    fields = {**PORTABLE, **CHAT_ONLY}
    prompts = _batch_file(tmp_path / "batch.jsonl", fields)
    with hostile_server() as server:
        url = server.base_url("ok", tokens=3)
        assert _run(_config(tmp_path, url, prompts), tmp_path / "out") == 0
        sent = [r["body"] for r in server.requests if r["body"].get("stream")]
    assert len(sent) == 2
    for body in sent:
        assert {k: body[k] for k in fields} == fields
        assert body["messages"] == MESSAGES
        assert set(body) == {*fields, "model", "messages", "max_tokens", "stream", "stream_options"}


def _png(width: int, height: int) -> bytes:
    def chunk(kind: bytes, data: bytes) -> bytes:
        return (
            struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
        )

    rows = b"".join(b"\x00" + b"\x00" * width for _ in range(height))
    header = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(rows))
        + chunk(b"IEND", b"")
    )


def test_an_image_prompt_is_charged_its_tiles_and_moves_ttft_by_their_prefill(
    start_sim: Callable[..., str], tmp_path: Path
) -> None:
    log = tmp_path / "truth.jsonl"
    config = SimConfig(time_scale=1.0)
    url = start_sim(time_scale=1.0, truth_log=str(log))
    png = _png(1024, 2048)
    (tmp_path / "chart.png").write_bytes(png)
    question = [{"type": "text", "text": "What does this chart show?"}]
    image = {"type": "image_url", "image_url": {"file": "chart.png"}}
    lines = [
        {"id": "text", "messages": [{"role": "user", "content": question}], "max_tokens": 4},
        {
            "id": "vision",
            "messages": [{"role": "user", "content": [*question, image]}],
            "max_tokens": 4,
        },
    ]
    prompts = tmp_path / "vision.jsonl"
    prompts.write_text("".join(json.dumps(line) + "\n" for line in lines))
    path = _config(tmp_path, url, prompts)
    path.write_text(path.read_text().replace('name = "sim-1b"', 'name = "sim-70b"'))
    assert _run(path, tmp_path / "out") == 0
    run_dir = next((tmp_path / "out").iterdir())
    records = pl.read_parquet(run_dir / "records.parquet").sort("prompt_id")
    assert records["prompt_id"].to_list() == ["text", "vision"]
    assert records["media_parts"].to_list() == [0, 1]
    sent = {
        "type": "image_url",
        "image_url": {"url": "data:image/png;base64," + base64.b64encode(png).decode()},
    }
    assert records["media_bytes"].to_list() == [0, len(orjson.dumps(sent))]
    # The image reached the server as the same JSON value the file became.
    vision = [r for r in truth_rows(log) if r["request"]["body"].get("stream")]
    sent_messages = [{"role": "user", "content": [*question, sent]}]
    assert field_digest(sent_messages) in {r["request"]["digests"]["messages"] for r in vision}
    text_tokens, vision_tokens = records["input_tokens"].to_list()
    # 1024 x 2048 at the default (high) detail: 6 tiles, 85 + 6 x 170 (docs/simulator.md).
    assert vision_tokens - text_tokens == 1105
    # Prefill is the physics' 2 x params x tokens FLOPs: the vision request cannot have
    # its first token before the prefill of its 1,100 more tokens.
    timing = build_state(config).timings["sim-70b"]
    _ttft_text, ttft_vision = records["ttft_s"].to_list()
    assert ttft_vision >= timing.prefill_s(vision_tokens)
    assert timing.prefill_s(vision_tokens) > 10 * timing.prefill_s(text_tokens)
