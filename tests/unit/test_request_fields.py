"""A prompt's request fields (docs/config.md "Request fields"): read from a batch line's
or a prompt line's ``body`` as written, refused in one line when a stream cannot honour
them, translated to the Responses API and Anthropic Messages where a documented mapping
exists; media files read relative to the prompts file; images, sounds, tools and output
schemas counted as prompt tokens by the documented rules."""

from __future__ import annotations

import base64
import json
import struct
import zlib
from pathlib import Path
from typing import Any

import orjson
import pytest

from tokrate.cli import main
from tokrate.client.request import RequestSettings, build_request, check_translations
from tokrate.client.translate import Untranslatable, translate_fields, translate_messages
from tokrate.errors import ConfigError, PromptError
from tokrate.inputs.prompts import load_prompts, parse_jsonl
from tokrate.inputs.targets import Target
from tokrate.inputs.traces import parse_sharegpt
from tokrate.physics import (
    IMAGE_BASE_TOKENS,
    UNKNOWN_IMAGE_TOKENS,
    count_request_tokens,
    image_size,
    image_tokens,
    media_part_tokens,
    wav_seconds,
)
from tokrate.spec.config_file import load_spec
from tokrate.spec.types import EndpointSpec, ModelSpec, PromptsSpec

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Current weather in a city",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}, "unit": {"enum": ["c", "f"]}},
                "required": ["city"],
            },
        },
    },
    {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object"}}},
]
SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
FIELDS: dict[str, Any] = {
    "tools": TOOLS,
    "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
    "parallel_tool_calls": False,
    "response_format": {"type": "json_schema", "json_schema": {"name": "city", "schema": SCHEMA}},
    "temperature": 0.2,
    "top_p": 0.9,
    "seed": 7,
    "stop": ["\n\n"],
    "reasoning_effort": "low",
    "logit_bias": {"1234": -100},
    "user": "u-1",
}
MESSAGES = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Weather in Paris?"},
]


def _batch(body: dict[str, Any], **line: Any) -> bytes:
    obj = {"custom_id": "r1", "method": "POST", "url": "/v1/chat/completions", "body": body}
    return (json.dumps({**obj, **line}) + "\n").encode()


def _png(width: int, height: int) -> bytes:
    """A real (all black, greyscale) PNG of this size."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        crc = zlib.crc32(kind + data)
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", crc)

    rows = b"".join(b"\x00" + b"\x00" * width for _ in range(height))
    header = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(rows))
        + chunk(b"IEND", b"")
    )


# --- reading a body ------------------------------------------------------------------------


def test_a_batch_body_is_kept_as_written_but_for_the_fields_tokrate_owns() -> None:
    body = {
        "model": "gpt-4o",
        "messages": MESSAGES,
        **FIELDS,
        "max_completion_tokens": 64,
        "stream": True,
        "stream_options": {"include_usage": False},
    }
    (p,) = parse_jsonl(_batch(body), "b.jsonl")
    assert p.body == tuple(FIELDS.items())  # order and values as written
    assert (p.max_tokens, p.max_tokens_field) == (64, "max_completion_tokens")
    assert list(p.messages or ()) == MESSAGES
    # The tools and the schema are prompt tokens (a chat template writes them in).
    tools = [
        (t["function"]["name"], t["function"].get("description", ""), t["function"]["parameters"])
        for t in TOOLS
    ]
    assert p.input_tokens_est == count_request_tokens(MESSAGES, tools, SCHEMA)
    assert p.input_tokens_est > count_request_tokens(MESSAGES) + 40


def test_a_prompt_line_takes_a_body_too() -> None:
    line = {"id": "a", "messages": MESSAGES, "body": {"temperature": 0, "tools": TOOLS}}
    (p,) = parse_jsonl((json.dumps(line) + "\n").encode(), "p.jsonl")
    assert p.body == (("temperature", 0), ("tools", TOOLS))
    assert p.max_tokens is None


@pytest.mark.parametrize(
    ("field", "value", "words"),
    [
        ("n", 3, "body.n: 3 asks for several answers in one stream"),
        ("stream", False, "body.stream: False: tokrate measures streamed answers"),
        ("best_of", 2, "body.best_of: 2 has the server generate several answers"),
        ("echo", True, "body.echo: True streams the prompt back"),
        ("use_beam_search", True, "body.use_beam_search: True: beam search does not stream"),
        ("max_tokens", 0, "body.max_tokens: must be a positive integer, got 0"),
        ("tools", {"a": 1}, "body.tools: must be a list of tool objects"),
        ("tools", [{"type": "function"}], "body.tools[0].function: must be an object with"),
        ("tool_choice", "always", "body.tool_choice: must be one of"),
        ("response_format", {"type": "xml"}, "body.response_format: must be an object"),
        ("input", "hi", "body.input: is a Responses API field"),
    ],
)
def test_a_field_a_stream_cannot_honour_is_refused_naming_file_line_and_field(
    field: str, value: Any, words: str
) -> None:
    body = {"messages": MESSAGES, field: value}
    data = b"\n" + _batch(body)
    with pytest.raises(PromptError) as err:
        parse_jsonl(data, "prompts/mine.jsonl")
    assert str(err.value).startswith("prompts/mine.jsonl line 2: "), err.value
    assert words in str(err.value)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize(
    ("value", "words"),
    [
        ("NaN", "invalid JSON (NaN is not JSON: a server refuses it, or reads it as null)"),
        ("-Infinity", "invalid JSON (-Infinity is not JSON"),
        ("1e999", "invalid JSON (1e999 is too large for a number: it would be read as infinity)"),
        (str(2**64), f"invalid JSON (integer {2**64} does not fit in 64 bits"),
        (str(-(2**63) - 1), "does not fit in 64 bits, so it cannot be sent"),
        ("9" * 5000, "invalid JSON (integer 99999999999999999999... (5000 digits) does not fit"),
    ],
)
def test_a_value_a_request_cannot_carry_as_written_is_refused(value: str, words: str) -> None:
    """Python's parser takes these; orjson would send NaN as null and fail mid-run on
    the integers (the 5,000 digits even before: past Python's int-string limit)."""
    line = '{"custom_id": "r", "body": {"messages": [], "seed": VALUE}}'.replace("VALUE", value)
    with pytest.raises(PromptError) as err:
        parse_jsonl(f"\n{line}\n".encode(), "prompts/mine.jsonl")
    assert str(err.value).startswith("prompts/mine.jsonl line 2: invalid JSON ("), err.value
    assert words in str(err.value) and "\n" not in str(err.value)
    sharegpt = '[{"id": "a", "conversations": [], "x": VALUE}]'.replace("VALUE", value)
    with pytest.raises(PromptError, match=r"^share\.json: invalid JSON"):
        parse_sharegpt(sharegpt.encode(), "share.json")


def test_the_widest_integers_a_request_can_carry_go_as_written() -> None:
    for seed in (2**64 - 1, -(2**63)):
        body = {"messages": MESSAGES, "seed": seed, "temperature": 1e-300}
        (p,) = parse_jsonl(_batch(body), "b.jsonl")
        assert dict(p.body) == {"seed": seed, "temperature": 1e-300}
        assert orjson.loads(orjson.dumps(dict(p.body))) == {"seed": seed, "temperature": 1e-300}


def test_a_conversation_line_sends_its_body_with_every_turn() -> None:
    line = {"id": "s", "turns": ["Hi", "And tomorrow?"], "body": {"tools": TOOLS, "seed": 1}}
    (p,) = parse_jsonl((json.dumps(line) + "\n").encode(), "s.jsonl")
    assert p.is_session and p.body == (("tools", TOOLS), ("seed", 1))


def test_n_of_one_and_a_streaming_body_are_fine() -> None:
    (p,) = parse_jsonl(_batch({"messages": MESSAGES, "n": 1, "stream": True}), "b.jsonl")
    assert p.body == (("n", 1),)


def test_a_prompt_line_body_may_not_carry_the_prompt_or_a_second_limit() -> None:
    line = {"messages": MESSAGES, "body": {"messages": MESSAGES}}
    with pytest.raises(PromptError, match=r"body\.messages: goes at the top level"):
        parse_jsonl((json.dumps(line) + "\n").encode(), "p.jsonl")
    line = {"messages": MESSAGES, "max_tokens": 5, "body": {"max_tokens": 9}}
    with pytest.raises(PromptError, match="has 'max_tokens' already"):
        parse_jsonl((json.dumps(line) + "\n").encode(), "p.jsonl")


def test_extra_body_and_body_flags_refuse_what_a_stream_cannot_honour(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text(
        '[[endpoint]]\nname = "e"\nbase_url = "http://127.0.0.1:1/v1"\n'
        '[[model]]\nname = "m"\nextra_body = { n = 2 }\n'
    )
    with pytest.raises(ConfigError, match=r"'model\[0\]\.extra_body\.n': 2 asks for several"):
        load_spec(path)


def test_the_body_flag_refuses_what_a_stream_cannot_honour(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["run", "--body", "n=4", "--output-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("tokrate: error: tokrate run: --body n: 4 asks for several"), err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("flag", "words"),
    [
        (f"seed={2**64}", f"the value is not JSON (integer {2**64} does not fit in 64 bits"),
        ('logit_bias={"50256": -1e999}', "(-1e999 is too large for a number"),
        ("temperature=NaN", "(NaN is not JSON: a server refuses it, or reads it as null)"),
    ],
)
def test_the_body_flag_reads_strict_json_too(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], flag: str, words: str
) -> None:
    """orjson reads 2**64 as a float, which would be sent as 1.8446744073709552e19."""
    assert main(["run", "--body", flag, "--output-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    key = flag.split("=")[0]
    assert err.startswith(f"tokrate: error: tokrate run: --body {key}: "), err
    assert words in err and "\n" not in err
    assert list(tmp_path.iterdir()) == []


# --- media files ---------------------------------------------------------------------------


def test_an_image_file_is_read_relative_to_the_prompts_file(tmp_path: Path) -> None:
    (tmp_path / "img").mkdir()
    png = _png(1024, 2048)
    (tmp_path / "img" / "chart.png").write_bytes(png)
    part = {"type": "image_url", "image_url": {"file": "img/chart.png", "detail": "high"}}
    line = {
        "id": "v",
        "messages": [{"role": "user", "content": [{"type": "text", "text": "?"}, part]}],
    }
    (tmp_path / "v.jsonl").write_text(json.dumps(line) + "\n")
    (p,) = load_prompts(PromptsSpec(paths=("v.jsonl",)), base_dir=tmp_path)
    sent = p.messages[0]["content"][1]  # type: ignore[index]
    url = "data:image/png;base64," + base64.b64encode(png).decode()
    assert sent == {"type": "image_url", "image_url": {"url": url, "detail": "high"}}
    assert p.media_parts == 1
    assert p.media_bytes == len(orjson.dumps(sent))
    # 1024 x 2048 at high detail: 768 x 1536 after scaling, 6 tiles (OpenAI's own example).
    assert media_part_tokens(sent) == 1105


@pytest.mark.parametrize(
    ("make", "words"),
    [
        (lambda d: None, "not found (looked in"),
        (lambda d: (d / "a.png").mkdir(), "is a directory, not a regular file"),
        (lambda d: (d / "a.png").write_bytes(b"") or _grow(d / "a.png"), "over the 20.0 MiB limit"),
    ],
)
def test_a_media_file_that_cannot_be_read_is_one_clear_line(
    tmp_path: Path, make: Any, words: str
) -> None:
    make(tmp_path)
    part = {"type": "image_url", "image_url": {"file": "a.png"}}
    line = {"messages": [{"role": "user", "content": [part]}]}
    (tmp_path / "v.jsonl").write_text("\n" + json.dumps(line) + "\n")
    with pytest.raises(PromptError) as err:
        load_prompts(PromptsSpec(paths=("v.jsonl",)), base_dir=tmp_path)
    text = str(err.value)
    assert text.startswith("v.jsonl line 2: messages[0].content[0].image_url.file 'a.png': ")
    assert words in text and "\n" not in text


def _grow(path: Path) -> None:
    with path.open("r+b") as f:
        f.truncate(21 * 1024 * 1024)  # sparse: no 21 MB written


def test_a_media_file_of_an_unknown_type_or_in_a_bundled_line_is_refused(tmp_path: Path) -> None:
    part = {"type": "input_audio", "input_audio": {"file": "a.ogg"}}
    line = json.dumps({"messages": [{"role": "user", "content": [part]}]}) + "\n"
    with pytest.raises(PromptError, match=r"unknown file type \(use \.wav, \.mp3\)"):
        parse_jsonl(line.encode(), "x.jsonl", base_dir=tmp_path)
    with pytest.raises(PromptError, match="only a prompts file can name a local file"):
        parse_jsonl(line.encode(), "set:x")


def test_a_sound_file_becomes_input_audio_data(tmp_path: Path) -> None:
    wav = _wav(seconds=2.5)
    (tmp_path / "q.wav").write_bytes(wav)
    part = {"type": "input_audio", "input_audio": {"file": "q.wav"}}
    line = json.dumps({"messages": [{"role": "user", "content": [part]}]}) + "\n"
    (p,) = parse_jsonl(line.encode(), "x.jsonl", base_dir=tmp_path)
    sent = p.messages[0]["content"][0]  # type: ignore[index]
    assert sent["input_audio"] == {"data": base64.b64encode(wav).decode(), "format": "wav"}
    assert wav_seconds(wav) == 2.5
    assert media_part_tokens(sent) == 25  # 10 tokens a second


def _wav(seconds: float, rate: int = 8000) -> bytes:
    data = b"\x00\x00" * int(rate * seconds)
    fmt = struct.pack("<HHIIHH", 1, 1, rate, rate * 2, 2, 16)
    riff = b"WAVE" + b"fmt " + struct.pack("<I", 16) + fmt + b"data" + struct.pack("<I", len(data))
    return b"RIFF" + struct.pack("<I", len(riff) + len(data)) + riff + data


# --- token rules ---------------------------------------------------------------------------


def test_image_sizes_are_read_from_png_gif_webp_and_jpeg_headers() -> None:
    assert image_size(_png(31, 17)) == (31, 17)
    assert image_size(b"GIF89a" + struct.pack("<HH", 640, 480) + b"\x00" * 8) == (640, 480)
    vp8x = (
        b"RIFF\x00\x00\x00\x00WEBPVP8X"
        + b"\x00" * 8
        + (799).to_bytes(3, "little")
        + (599).to_bytes(3, "little")
    )
    assert image_size(vp8x) == (800, 600)
    app0 = b"\xff\xe0" + struct.pack(">H", 16) + b"JFIF\x00" + b"\x00" * 9
    sof = b"\xff\xc0" + struct.pack(">HBHH", 17, 8, 300, 400) + b"\x00" * 10
    assert image_size(b"\xff\xd8" + app0 + sof) == (400, 300)
    assert image_size(b"not an image") is None


def test_the_image_rule_is_openais_tile_rule() -> None:
    assert image_tokens((1024, 2048), "low") == IMAGE_BASE_TOKENS
    assert image_tokens((512, 512), "high") == 85 + 170
    assert image_tokens((4096, 8192), None) == 1105  # fit 2048, then short side 768
    assert image_tokens(None, "auto") == UNKNOWN_IMAGE_TOKENS == 765
    link = {"type": "image_url", "image_url": {"url": "https://example.com/a.png"}}
    assert media_part_tokens(link) == UNKNOWN_IMAGE_TOKENS


# --- translation ---------------------------------------------------------------------------


def _fields(*keys: str) -> tuple[tuple[str, Any], ...]:
    return tuple((k, FIELDS[k]) for k in keys)


def test_chat_fields_map_to_the_responses_api() -> None:
    keys = (
        "tools",
        "tool_choice",
        "parallel_tool_calls",
        "response_format",
        "temperature",
        "top_p",
        "reasoning_effort",
        "user",
    )
    out = translate_fields("responses", _fields(*keys))
    assert out == {
        "tools": [
            {"type": "function", **TOOLS[0]["function"]},
            {"type": "function", **TOOLS[1]["function"]},
        ],
        "tool_choice": {"type": "function", "name": "get_weather"},
        "parallel_tool_calls": False,
        "temperature": 0.2,
        "top_p": 0.9,
        "reasoning": {"effort": "low"},
        "user": "u-1",
        "text": {"format": {"type": "json_schema", "name": "city", "schema": SCHEMA}},
    }


def test_chat_fields_map_to_anthropic_messages() -> None:
    keys = (
        "tools",
        "tool_choice",
        "parallel_tool_calls",
        "response_format",
        "temperature",
        "top_p",
        "stop",
        "reasoning_effort",
        "user",
    )
    out = translate_fields("anthropic", _fields(*keys))
    assert out == {
        "tools": [
            {
                "name": "get_weather",
                "description": "Current weather in a city",
                "input_schema": TOOLS[0]["function"]["parameters"],
            },
            {"name": "get_time", "input_schema": {"type": "object"}},
        ],
        "tool_choice": {"type": "tool", "name": "get_weather", "disable_parallel_tool_use": True},
        "temperature": 0.2,
        "top_p": 0.9,
        "stop_sequences": ["\n\n"],
        "metadata": {"user_id": "u-1"},
        "output_config": {"format": {"type": "json_schema", "schema": SCHEMA}, "effort": "low"},
    }
    assert translate_fields("anthropic", (("tool_choice", "required"),)) == {
        "tool_choice": {"type": "any"}
    }
    assert translate_fields("anthropic", (("stop", "END"),)) == {"stop_sequences": ["END"]}
    thinking = {"type": "enabled", "budget_tokens": 2048}
    assert translate_fields("anthropic", (("thinking", thinking),)) == {"thinking": thinking}


@pytest.mark.parametrize(
    ("api", "field", "value", "words"),
    [
        ("responses", "stop", ["x"], "stop: has no equivalent in the Responses API"),
        ("responses", "seed", 1, "seed: has no equivalent in the Responses API"),
        ("responses", "thinking", {"type": "enabled"}, "thinking: has no equivalent"),
        ("anthropic", "seed", 1, "seed: has no equivalent in Anthropic Messages"),
        ("anthropic", "temperature", 1.5, "temperature: 1.5 is over Anthropic's range"),
        ("anthropic", "reasoning_effort", "minimal", "'minimal' is none of Anthropic's efforts"),
        ("anthropic", "response_format", {"type": "json_object"}, "type 'json_object' has no"),
        ("completions", "tools", TOOLS, "tools: has no equivalent in legacy Completions"),
    ],
)
def test_a_field_without_a_documented_mapping_is_refused(
    api: str, field: str, value: Any, words: str
) -> None:
    with pytest.raises(Untranslatable) as err:
        translate_fields(api, ((field, value),))
    assert words in str(err.value)
    assert "extra_body" in str(err.value)  # what to do instead


def test_messages_with_images_and_earlier_tool_calls_translate() -> None:
    data = base64.b64encode(_png(4, 4)).decode()
    messages = [
        {"role": "developer", "content": "Use tools."},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "What is here?"},
                {
                    "type": "image_url",
                    "image_url": {"url": f"data:image/png;base64,{data}", "detail": "low"},
                },
            ],
        },
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "get_time", "arguments": "{}"},
                },
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "12:00"},
    ]
    system, items = translate_messages("responses", messages)
    assert system == "Use tools."
    assert items == [
        {
            "role": "user",
            "content": [
                {"type": "input_text", "text": "What is here?"},
                {
                    "type": "input_image",
                    "image_url": f"data:image/png;base64,{data}",
                    "detail": "low",
                },
            ],
        },
        {"type": "function_call", "call_id": "c1", "name": "get_time", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "12:00"},
    ]
    system, turns = translate_messages("anthropic", messages)
    assert system == "Use tools."
    assert turns == [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "What is here?"},
                {
                    "type": "image",
                    "source": {"type": "base64", "media_type": "image/png", "data": data},
                },
            ],
        },
        {
            "role": "assistant",
            "content": [
                {"type": "tool_use", "id": "c1", "name": "get_time", "input": {}},
            ],
        },
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "c1", "content": "12:00"}],
        },
    ]


def test_audio_and_unknown_message_keys_are_refused_where_they_have_no_place() -> None:
    audio = {"type": "input_audio", "input_audio": {"data": "AAAA", "format": "wav"}}
    with pytest.raises(Untranslatable, match=r"messages\[0\]\.content\[0\]: a 'input_audio'"):
        translate_messages("anthropic", [{"role": "user", "content": [audio]}])
    with pytest.raises(Untranslatable, match=r"messages\[0\]\.name: has no equivalent"):
        translate_messages("responses", [{"role": "user", "content": "x", "name": "bob"}])


def _target(api: str) -> Target:
    endpoint = EndpointSpec("e", "http://127.0.0.1:1/v1", api=api)  # type: ignore[arg-type]
    return Target(endpoint, ModelSpec("e", "m"))


def test_the_check_before_sending_names_the_prompt_field_and_target() -> None:
    (p,) = parse_jsonl(_batch({"messages": MESSAGES, "seed": 3}), "prompts/mine.jsonl")
    check_translations([_target("chat")], [p], RequestSettings())
    with pytest.raises(PromptError) as err:
        check_translations([_target("chat"), _target("responses")], [p], RequestSettings())
    assert str(err.value).startswith(
        "prompts/mine.jsonl line 1: seed: has no equivalent in the Responses API"
    )
    assert str(err.value).endswith("(target e/m speaks responses)")


def test_a_built_request_carries_the_prompt_fields_over_the_models_extra_body() -> None:
    (p,) = parse_jsonl(
        _batch({"messages": MESSAGES, "temperature": 0.0, "max_completion_tokens": 9}), "b.jsonl"
    )
    model = ModelSpec("e", "m", extra_body=(("temperature", 1.0), ("top_k", 5)))
    target = Target(EndpointSpec("e", "http://127.0.0.1:1/v1"), model)
    req = build_request(
        target, p, RequestSettings(), include_usage=True, unique_prefix=None, api_key=None
    )
    body = orjson.loads(req.body)
    assert body["temperature"] == 0.0 and body["top_k"] == 5
    assert body["max_completion_tokens"] == 9 and "max_tokens" not in body
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
