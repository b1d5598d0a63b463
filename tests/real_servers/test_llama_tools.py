"""Tool calls and structured output from a real llama-server (issue 39): started with
``--jinja`` and a chat template that describes tools, it streams a call for a request
with tools, and a ``response_format`` with a JSON schema gives schema-valid JSON even
from random weights, because the schema becomes a grammar that constrains sampling.
tokrate keeps the call (name, arguments) and the JSON answer on the records, the
``tool_call`` and ``json_schema`` checks pass, and TTFT with and without the schema is
recorded side by side.

Random weights and ``tool_choice: "required"``: llama.cpp's required-call grammar lets
free text come before the call's ``<tool_call>`` marker, which an untrained model never
writes, so the tool prompt ends with the assistant's ``<tool_call>`` already begun (a
prefill llama-server continues); from there the grammar holds the name to the offered
tool and the arguments to its schema. A trained model needs no prefill.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from real_servers import harness
from real_servers import models as model_files
from real_servers.paths import ServerMissing, cache_dir, missing
from real_servers.servers import Server, llama_server
from tokrate.spec.types import ModelSpec

pytestmark = pytest.mark.real_server

TEMPLATE = Path(__file__).with_name("tool_template.jinja")
SIZE = "rand-24m"
CITY = {
    "type": "object",
    "properties": {"city": {"type": "string", "enum": ["Paris", "Rome"]}},
    "required": ["city"],
    "additionalProperties": False,
}
ANSWER = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "enum": ["Paris", "Rome"]},
        "rain": {"type": "boolean"},
        "degrees": {"type": "integer", "minimum": -30, "maximum": 45},
    },
    "required": ["city", "rain", "degrees"],
    "additionalProperties": False,
}
QUESTION = {"role": "user", "content": "What is the weather like in Paris today?"}
TOOLS = [
    {
        "type": "function",
        "function": {"name": "get_weather", "description": "Weather in a city", "parameters": CITY},
    }
]


@pytest.fixture(scope="module")
def jinja_server() -> Iterator[Server]:
    log = cache_dir() / "logs" / "llama-jinja.log"
    try:
        path = model_files.gguf_model(next(s for s in model_files.GGUF_SHAPES if s.name == SIZE))
        argv = ("--jinja", "--chat-template-file", str(TEMPLATE))
        with llama_server(path, SIZE, log, slots=2, extra_args=argv) as server:
            yield server
    except ServerMissing as exc:
        missing(str(exc))


def _prompts(folder: Path) -> Path:
    lines: list[dict[str, Any]] = [
        {
            "id": "tool",
            "task": "tools",
            "messages": [QUESTION, {"role": "assistant", "content": "<tool_call>\n"}],
            # The grammar lets whitespace in between every JSON token, and random
            # weights take it: room for the call to close.
            "max_tokens": 256,
            "body": {"tools": TOOLS, "tool_choice": "required", "parallel_tool_calls": False},
            "expect": {"tool_call": {"name": "get_weather", "arguments_schema": CITY}},
        },
        {
            "id": "schema",
            "task": "structured",
            "messages": [QUESTION],
            "max_tokens": 96,
            "body": {
                "response_format": {
                    "type": "json_schema",
                    "json_schema": {"name": "weather", "strict": True, "schema": ANSWER},
                },
                "temperature": 0,
            },
            "expect": {"json_schema": ANSWER},
        },
        {"id": "plain", "task": "structured", "messages": [QUESTION], "max_tokens": 96},
    ]
    path = folder / "tools.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def test_a_streamed_tool_call_and_schema_json_are_kept_and_pass_their_checks(
    jinja_server: Server, tmp_path: Path
) -> None:
    model = ModelSpec("llama", SIZE, extra_body=(("cache_prompt", False),))
    run = harness.bench_run(
        tmp_path,
        "tools",
        jinja_server.base_url,
        [model],
        _prompts(tmp_path),
        requests=6,
        max_tokens=None,
        warmup_requests=0,
    )
    rows = {}
    for row in run.records.to_dicts():
        assert row["status"] == "ok", row
        rows.setdefault(row["prompt_id"], []).append(row)
    assert sorted(rows) == ["plain", "schema", "tool"]
    for row in rows["tool"]:
        calls = json.loads(row["tool_calls"])
        assert calls and calls[0]["index"] == 0 and calls[0]["name"] == "get_weather", calls
        jsonschema.validate(json.loads(calls[0]["arguments"]), CITY)
        assert row["check_passed"] is True, row
        assert row["first_tool_call_s"] is not None and row["first_tool_call_s"] <= row["e2e_s"]
        assert row["tool_call_tokens"] == row["output_tokens"]  # nothing else was output
    for row in rows["schema"]:
        jsonschema.validate(json.loads(row["answer"]), ANSWER)
        assert row["check_passed"] is True, row
        assert row["tool_calls"] is None
    # TTFT with and without the schema, recorded side by side (the grammar is built
    # before the first token: whatever it costs is inside TTFT).
    ttft = {p: [r["ttft_s"] for r in rows[p]] for p in ("schema", "plain")}
    assert all(v is not None and v > 0 for vs in ttft.values() for v in vs)
    print(f"llama-server {SIZE}: TTFT with a JSON schema {ttft['schema']}, without {ttft['plain']}")  # noqa: T201
