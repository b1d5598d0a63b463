"""The simulator speaks the OpenAI Responses API: parsed by the openai SDK and strict httpx."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import openai
import pydantic
import pytest
from helpers.sim_wire import STRADDLER, truth_rows, words
from helpers.sse_stamps import StampedStream, is_token_event, stream_stamped
from openai.types.responses import Response, ResponseStreamEvent

from tokrate.physics import count_chat_tokens

_EVENT = pydantic.TypeAdapter(ResponseStreamEvent)

REASONING_ITEM = [
    "response.output_item.added",
    "response.content_part.added",
    *["response.reasoning_text.delta"] * 4,
    "response.reasoning_text.done",
    "response.content_part.done",
    "response.output_item.done",
]
SUMMARY_ITEM = [
    "response.output_item.added",
    "response.reasoning_summary_part.added",
    *["response.reasoning_summary_text.delta"] * 4,
    "response.reasoning_summary_text.done",
    "response.reasoning_summary_part.done",
    "response.output_item.done",
]
MESSAGE_ITEM = [
    "response.output_item.added",
    "response.content_part.added",
    *["response.output_text.delta"] * 6,
    "response.output_text.done",
    "response.content_part.done",
    "response.output_item.done",
]


def _strict(stream: StampedStream) -> list[dict[str, Any]]:
    """Every event validates against the SDK's own models; sequence numbers count."""
    assert stream.status == 200
    datas = [e.data for e in stream.events]
    assert "[DONE]" not in datas  # the Responses API has no terminator
    for i, d in enumerate(datas):
        _EVENT.validate_python(d)
        assert d["sequence_number"] == i
    return datas


def test_sdk_parses_stream_reasoning_text_then_answer(thinker: tuple[str, Path]) -> None:
    url, log = thinker
    sdk = openai.OpenAI(base_url=url, api_key="unused", max_retries=0)
    events = list(
        sdk.responses.create(
            model="sim-thinker", input="Say hi", instructions="Be brief.", stream=True
        )
    )
    sdk.close()
    kinds = [e.type for e in events]
    assert kinds == [
        "response.created",
        "response.in_progress",
        *REASONING_ITEM,
        *MESSAGE_ITEM,
        "response.completed",
    ]
    reasoning = "".join(e.delta for e in events if e.type == "response.reasoning_text.delta")
    answer = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert (reasoning, answer) == (words(0, 4), words(4, 10))
    done = events[-1]
    assert done.type == "response.completed"
    usage = done.response.usage
    assert usage is not None
    prompt = [{"role": "developer", "content": "Be brief."}, {"role": "user", "content": "Say hi"}]
    assert usage.input_tokens == count_chat_tokens(prompt)
    assert usage.output_tokens == 10 and usage.output_tokens_details.reasoning_tokens == 4
    assert usage.total_tokens == usage.input_tokens + 10
    assert usage.input_tokens_details.cached_tokens == 0
    assert done.response.output_text == words(4, 10)
    assert done.response.instructions == "Be brief."
    (row,) = truth_rows(log)
    assert row["id"] == done.response.id == events[0].response.id
    assert row["protocol"] == "responses"
    assert (row["output_tokens"], row["reasoning_tokens"]) == (10, 4)
    assert len(row["content_write_ns"]) == 10  # one stamp per delta, reasoning included


def test_sdk_stream_helper_accumulates_a_consistent_snapshot(thinker: tuple[str, Path]) -> None:
    """The SDK's own accumulator (responses.stream) checks item identities and indexes."""
    url, _ = thinker
    sdk = openai.OpenAI(base_url=url, api_key="unused", max_retries=0)
    with sdk.responses.stream(
        model="sim-thinker", input="hi", reasoning={"summary": "auto"}
    ) as stream:
        texts = [e.delta for e in stream if e.type == "response.output_text.delta"]
        final = stream.get_final_response()
    sdk.close()
    assert "".join(texts) == final.output_text == words(4, 10)
    assert [o.type for o in final.output] == ["reasoning", "message"]
    assert final.usage is not None and final.usage.output_tokens == 10


def test_summary_stream_strict_shapes(thinker: tuple[str, Path], http_client: httpx.Client) -> None:
    url, _ = thinker
    body = {
        "model": "sim-thinker",
        "input": [{"role": "user", "content": [{"type": "input_text", "text": "hi"}]}],
        "reasoning": {"effort": "high", "summary": "auto"},
        "stream": True,
    }
    datas = _strict(stream_stamped(http_client, f"{url}/responses", body))
    assert [d["type"] for d in datas] == [
        "response.created",
        "response.in_progress",
        *SUMMARY_ITEM,
        *MESSAGE_ITEM,
        "response.completed",
    ]
    created = datas[0]["response"]
    assert created["status"] == "in_progress" and created["usage"] is None
    assert created["reasoning"] == {"effort": "high", "summary": "auto"}
    rs_added, msg_added = datas[2]["item"], datas[11]["item"]
    assert rs_added["type"] == "reasoning" and datas[2]["output_index"] == 0
    assert msg_added["type"] == "message" and datas[11]["output_index"] == 1
    deltas = [d for d in datas if d["type"].endswith(".delta")]
    assert {d["item_id"] for d in deltas[:4]} == {rs_added["id"]}
    assert {d["item_id"] for d in deltas[4:]} == {msg_added["id"]}
    final = datas[-1]["response"]
    assert final["status"] == "completed" and final["incomplete_details"] is None
    assert [o["type"] for o in final["output"]] == ["reasoning", "message"]
    assert final["output"][0]["summary"] == [{"type": "summary_text", "text": words(0, 4)}]
    assert final["usage"]["output_tokens_details"] == {"reasoning_tokens": 4}


def test_max_output_tokens_ends_incomplete(
    start_sim: Callable[..., str], http_client: httpx.Client
) -> None:
    url = start_sim()
    body = {"model": "sim-1b", "input": "hi", "max_output_tokens": 16, "stream": True}
    body["ignore_eos"] = True
    datas = _strict(stream_stamped(http_client, f"{url}/responses", body))
    final = datas[-1]
    assert final["type"] == "response.incomplete"
    assert final["response"]["status"] == "incomplete"
    assert final["response"]["incomplete_details"] == {"reason": "max_output_tokens"}
    assert final["response"]["usage"]["output_tokens"] == 16
    assert final["response"]["output"][0]["status"] == "incomplete"
    assert sum(d["type"] == "response.output_text.delta" for d in datas) == 16
    assert not any("reasoning" in d["type"] for d in datas)


def test_effort_none_skips_reasoning(thinker: tuple[str, Path], http_client: httpx.Client) -> None:
    url, log = thinker
    body = {"model": "sim-thinker", "input": "hi", "reasoning": {"effort": "none"}, "stream": True}
    datas = _strict(stream_stamped(http_client, f"{url}/responses", body))
    assert [d["type"] for d in datas[2:-1]] == [
        *MESSAGE_ITEM[:2],
        *["response.output_text.delta"] * 10,
        *MESSAGE_ITEM[-3:],
    ]
    assert datas[-1]["response"]["usage"]["output_tokens_details"]["reasoning_tokens"] == 0
    assert truth_rows(log)[0]["reasoning_tokens"] == 0


def test_non_streaming_body_through_the_sdk(thinker: tuple[str, Path]) -> None:
    url, log = thinker
    sdk = openai.OpenAI(base_url=url, api_key="unused", max_retries=0)
    resp = sdk.responses.create(model="sim-thinker", input="hi", max_output_tokens=64)
    sdk.close()
    Response.model_validate(resp.model_dump())
    assert resp.status == "completed" and resp.output_text == words(4, 10)
    assert resp.usage is not None and resp.usage.output_tokens == 10
    assert resp.usage.output_tokens_details.reasoning_tokens == 4
    (row,) = truth_rows(log)
    assert row["protocol"] == "responses" and row["content_write_ns"] == []


@pytest.mark.parametrize(
    ("body", "status", "param"),
    [
        ({"model": "sim-1b"}, 400, "input"),
        ({"input": "hi"}, 400, "model"),
        ({"model": "nope", "input": "hi"}, 404, "model"),
        ({"model": "sim-1b", "input": "hi", "max_output_tokens": 15}, 400, "max_output_tokens"),
        ({"model": "sim-1b", "input": "hi", "max_output_tokens": "9"}, 400, "max_output_tokens"),
        (
            {"model": "sim-1b", "input": "hi", "reasoning": {"effort": "max"}},
            400,
            "reasoning.effort",
        ),
        ({"model": "sim-1b", "input": [3]}, 400, "input[0]"),
        ({"model": "sim-1b", "input": "hi", "max_output_tokens": 9000}, 400, "input"),
    ],
)
def test_bad_requests_get_openai_errors(
    sim_url: str, http_client: httpx.Client, body: dict[str, Any], status: int, param: str
) -> None:
    resp = http_client.post(f"{sim_url}/responses", json=body)
    assert resp.status_code == status
    err = resp.json()["error"]
    assert err["param"] == param and err["type"] == "invalid_request_error", err


def test_bearer_key_required(
    start_sim: Callable[..., str], http_client: httpx.Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = start_sim(api_key="sk-sim-test")
    body = {"model": "sim-1b", "input": "hi", "max_output_tokens": 16}
    assert http_client.post(f"{url}/responses", json=body).status_code == 401
    ok = http_client.post(
        f"{url}/responses", json=body, headers={"Authorization": "Bearer sk-sim-test"}
    )
    assert ok.status_code == 200 and ok.json()["status"] in ("completed", "incomplete")


@pytest.mark.parametrize(
    ("fault", "status", "code"),
    [
        ("http_500", 500, None),
        ("http_429", 429, "rate_limit_exceeded"),
        ("http_503", 503, "overloaded"),
    ],
)
def test_http_faults(
    start_sim: Callable[..., str],
    http_client: httpx.Client,
    tmp_path: Path,
    fault: str,
    status: int,
    code: str | None,
) -> None:
    log = tmp_path / "truth.jsonl"
    url = start_sim(faults=f"{fault}=1", truth_log=str(log))
    resp = http_client.post(
        f"{url}/responses", json={"model": "sim-1b", "input": "hi", "stream": True}
    )
    assert resp.status_code == status and resp.json()["error"]["code"] == code
    (row,) = truth_rows(log)
    assert (row["protocol"], row["fault"], row["output_tokens"]) == ("responses", fault, 0)


def test_stream_error_fault_sends_error_then_failed(
    start_sim: Callable[..., str], http_client: httpx.Client, tmp_path: Path
) -> None:
    log = tmp_path / "truth.jsonl"
    url = start_sim(faults="stream_error=1:at=0.5", truth_log=str(log))
    body = {
        "model": "sim-1b",
        "input": "hi",
        "max_output_tokens": 20,
        "stream": True,
        "ignore_eos": True,
    }
    datas = _strict(stream_stamped(http_client, f"{url}/responses", body))
    assert sum(d["type"] == "response.output_text.delta" for d in datas) == 10
    assert [d["type"] for d in datas[-2:]] == ["error", "response.failed"]
    assert datas[-2]["code"] == "server_error"
    failed = datas[-1]["response"]
    assert failed["status"] == "failed" and failed["error"]["code"] == "server_error"
    assert failed["usage"]["output_tokens"] == 10
    (row,) = truth_rows(log)
    assert (row["fault"], row["output_tokens"], len(row["content_write_ns"])) == (
        "stream_error",
        10,
        10,
    )


def test_token_events_are_the_truth_logs_writes(
    thinker: tuple[str, Path], http_client: httpx.Client
) -> None:
    url, log = thinker
    stream = stream_stamped(
        http_client, f"{url}/responses", {"model": "sim-thinker", "input": "x", "stream": True}
    )
    stamps = [e.stamp_ns for e in stream.events if is_token_event(e)]
    (row,) = truth_rows(log)
    assert len(stamps) == len(row["content_write_ns"]) == 10
    assert all(got >= wrote for got, wrote in zip(stamps, row["content_write_ns"], strict=True))


def test_chunk_straddling_reasoning_and_answer(
    start_sim: Callable[..., str], http_client: httpx.Client, tmp_path: Path
) -> None:
    log = tmp_path / "truth.jsonl"
    url = start_sim(tiers=(STRADDLER,), truth_log=str(log), time_scale=1.0)
    body = {"model": "sim-straddler", "input": "hi", "stream": True}
    datas = _strict(stream_stamped(http_client, f"{url}/responses", body))
    deltas = [(d["type"], d["delta"]) for d in datas if d["type"].endswith(".delta")]
    assert deltas == [
        ("response.reasoning_text.delta", words(0, 4)),
        ("response.reasoning_text.delta", words(4, 6)),
        ("response.output_text.delta", words(6, 8)),
        ("response.output_text.delta", words(8, 12)),
        ("response.output_text.delta", words(12, 16)),
    ]
    usage = datas[-1]["response"]["usage"]
    assert (usage["output_tokens"], usage["output_tokens_details"]["reasoning_tokens"]) == (16, 6)
    (row,) = truth_rows(log)
    # one stamp per token-bearing event; the straddling chunk's two share one write
    assert (
        len(row["content_write_ns"]) == 5
        and row["content_write_ns"][1] == row["content_write_ns"][2]
    )
