"""One prepared request and its record, the way the engine builds them, for client tests."""

from __future__ import annotations

from typing import Any

import uvloop

from tokrate.client.factory import open_client
from tokrate.client.request import PreparedRequest, RequestSettings, build_request
from tokrate.client.result import RecordContext, StreamResult, build_record
from tokrate.inputs.prompt_base import Prompt
from tokrate.inputs.targets import Target
from tokrate.runfolder.records import RequestRecord
from tokrate.spec.types import EndpointSpec, ModelSpec, TimeoutsSpec


def prompt(
    *,
    id: str = "p1",
    messages: tuple[dict[str, Any], ...] | None = ({"role": "user", "content": "hi"},),
    text: str | None = None,
    max_tokens: int | None = 8,
    task: str = "chat",
) -> Prompt:
    return Prompt(
        id=id,
        task=task,
        messages=None if text is not None else messages,
        prompt=text,
        max_tokens=max_tokens,
        input_tokens_est=8,
        source="test",
    )


def target(
    base_url: str,
    model: str = "m",
    *,
    headers: tuple[tuple[str, str], ...] = (),
    extra_body: tuple[tuple[str, Any], ...] = (),
) -> Target:
    endpoint = EndpointSpec(name="e", base_url=base_url, headers=headers)
    return Target(endpoint, ModelSpec(endpoint="e", name=model, extra_body=extra_body))


def request(
    base_url: str,
    model: str = "m",
    *,
    api: str = "chat",
    key: str | None = None,
    include_usage: bool = True,
    ignore_eos: bool = False,
    unique_prefix: str | None = None,
    p: Prompt | None = None,
    **prompt_kw: Any,
) -> PreparedRequest:
    return build_request(
        target(base_url, model),
        p or prompt(**prompt_kw),
        RequestSettings(api=api, ignore_eos=ignore_eos),
        include_usage=include_usage,
        unique_prefix=unique_prefix,
        api_key=key,
    )


def record(result: StreamResult, **context: Any) -> RequestRecord:
    ctx: dict[str, Any] = {
        "run_id": "r",
        "scenario": "s",
        "prompt_id": "p1",
        "task": "chat",
        "request_index": 0,
        **context,
    }
    return build_record(result, RecordContext(**ctx))


def req_for(base: str, *, api: str = "chat", key: str | None = None, **kw: Any) -> Any:
    return request(base, api=api, key=key, **_prompt_kw(**kw))


def _prompt_kw(**kw: Any) -> dict[str, Any]:
    """P-style keywords (``prompt=``, ``messages=``, ``max_tokens=``) for helpers.prompt."""
    out = dict(kw)
    if "prompt" in out:
        out["text"] = out.pop("prompt")
    return out


def stream_one(kind: str, req: Any, timeouts: TimeoutsSpec | None = None) -> StreamResult:
    async def main() -> StreamResult:
        client = open_client(kind, pool_size=2, timeouts=timeouts or TimeoutsSpec())
        try:
            return await client.stream(req)
        finally:
            await client.aclose()

    return uvloop.run(main())


KINDS = ("fast", "httpx", "openai")
