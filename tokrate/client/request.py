"""Build the exact bytes of one streaming request, before the clock starts.

:func:`build_request` turns (endpoint, model, prompt, client settings) into a
:class:`PreparedRequest`: URL, JSON body bytes (orjson) and headers. All the work of
serialising happens here, so nothing but the write remains between t0 and the wire.

The API key is passed in (read from the endpoint's env var by the caller) and lives
only in the protocol's key header (``Authorization: Bearer``; ``x-api-key`` for
Anthropic; ``api-key`` for Azure OpenAI); ``repr()`` of a PreparedRequest redacts it.
Four protocols: Chat Completions, legacy Completions, the Responses API
(``/responses``: ``input``, ``instructions``, ``max_output_tokens``) and Anthropic
Messages (``/messages``: ``messages``, ``system``, ``max_tokens``). A prompt is written
as a Chat Completions request; its messages and its own request fields (tools,
response_format, sampling settings, ...) reach another protocol through
:mod:`tokrate.client.translate`.
"""

from __future__ import annotations

import dataclasses
import functools
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final
from urllib.parse import quote

import orjson

from tokrate.client.accumulate import MAX_RESPONSE_BYTES, MAX_RESPONSE_CHUNKS
from tokrate.client.translate import Untranslatable, translate_fields, translate_messages
from tokrate.errors import ConfigError, PromptError
from tokrate.inputs.prompt_base import Prompt
from tokrate.inputs.targets import Target
from tokrate.redact import Redactor
from tokrate.spec.expect import Expect
from tokrate.spec.types import RESERVED_BODY_KEYS

__all__ = [
    "ANTHROPIC_DEFAULT_MAX_TOKENS",
    "ANTHROPIC_VERSION",
    "PreparedRequest",
    "RequestSettings",
    "auth_headers",
    "build_request",
    "check_translations",
    "new_unique_prefix",
    "probe_request",
    "request_id_value",
    "request_url",
    "target_api",
    "with_max_completion_tokens",
    "without_stream_options",
]

_SYSTEM_ROLES = frozenset({"system", "developer"})
#: The ``anthropic-version`` header sent unless a configured header sets another.
ANTHROPIC_VERSION: Final = "2023-06-01"
#: The Messages API requires ``max_tokens``: sent when a prompt has no limit.
ANTHROPIC_DEFAULT_MAX_TOKENS: Final = 4096
#: A response may have CHUNKS_PER_TOKEN x max tokens + CHUNKS_OVER_LIMIT chunks at most
#: (see :func:`response_chunk_limit`).
CHUNKS_PER_TOKEN: Final = 4
CHUNKS_OVER_LIMIT: Final = 256


@dataclass(frozen=True, slots=True)
class PreparedRequest:
    """One request, ready to send. ``body`` is the final JSON bytes; ``headers`` include
    Content-Type, Accept and (when a key was given) the protocol's key header. ``api``
    is "chat", "completions", "responses" or "anthropic"; ``endpoint``/``model`` are names for records. ``include_usage`` says
    whether the body asks for ``stream_options.include_usage``. ``max_response_chunks``
    / ``max_response_bytes`` bound what the client reads of the response (riding on the
    request, so every client and the fast client's proxy fallback enforce the same)."""

    url: str
    body: bytes
    headers: tuple[tuple[str, str], ...]
    api: str
    endpoint: str
    model: str
    include_usage: bool = False
    prompt_id: str = ""
    max_response_chunks: int = MAX_RESPONSE_CHUNKS
    max_response_bytes: int = MAX_RESPONSE_BYTES
    #: What set ``max_response_chunks`` (said in the response_limit message).
    chunk_limit_source: str = "[client] max_response_chunks"
    #: The chat body's name of the output limit (None: not a chat body with a limit).
    max_tokens_field: str | None = None
    #: Keep the answer's text (``StreamResult.answer_text``): multi-turn sessions only.
    keep_text: bool = False

    def __repr__(self) -> str:
        return (
            f"PreparedRequest(url={self.url!r}, body=<{len(self.body)} bytes>, "
            f"headers={Redactor().headers(self.headers)!r}, api={self.api!r}, "
            f"endpoint={self.endpoint!r}, model={self.model!r}, "
            f"include_usage={self.include_usage!r}, prompt_id={self.prompt_id!r})"
        )

    __str__ = __repr__


def new_unique_prefix() -> str:
    """A short random tag (``[ref:1a2b3c4d5e6f]``) that defeats provider prompt caching
    (caches match on the prompt's prefix) at a cost of ~8 input tokens."""
    return f"[ref:{secrets.token_hex(6)}]"


def _prefixed_messages(messages: Sequence[Any], prefix: str | None, at: int = 0) -> list[Any]:
    out = [dict(m) if isinstance(m, dict) else m for m in messages]
    if prefix is None or not out:
        return out
    first = out[min(at, len(out) - 1)]
    if not isinstance(first, dict):
        return out
    content = first.get("content")
    if isinstance(content, str):
        first["content"] = f"{prefix} {content}"
    elif isinstance(content, list):
        first["content"] = [{"type": "text", "text": prefix}, *content]
    return out


def _flatten(messages: Sequence[Any]) -> str:
    parts = []
    for m in messages:
        content = m.get("content") if isinstance(m, dict) else m
        if isinstance(content, list):
            content = " ".join(
                str(p.get("text", "")) for p in content if isinstance(p, dict) and p.get("text")
            )
        parts.append(str(content or ""))
    return "\n\n".join(parts)


@dataclass(frozen=True, slots=True)
class RequestSettings:
    """How every request of a run is built: the API (``chat`` | ``completions`` |
    ``responses`` | ``anthropic``; an endpoint's own ``api`` wins), whether to ask for
    usage in the stream, ``ignore_eos`` (vLLM/SGLang: generate exactly max_tokens; a
    model's own ``ignore_eos`` wins) and ``unique_prompts`` (a random prefix per
    request that defeats provider prompt caching), the per-response bounds
    (``[client] max_response_chunks`` / ``max_response_bytes``) and the run-wide knobs
    (``[client] extra_body`` / ``headers``, lowest precedence; ``body_overrides`` from
    ``--body``, highest)."""

    api: str = "chat"
    include_usage: bool = True
    ignore_eos: bool = False
    unique_prompts: bool = True
    max_response_chunks: int = MAX_RESPONSE_CHUNKS
    max_response_bytes: int = MAX_RESPONSE_BYTES
    extra_body: tuple[tuple[str, Any], ...] = ()
    headers: tuple[tuple[str, str], ...] = ()
    body_overrides: tuple[tuple[str, Any], ...] = ()
    #: ``[client] request_id_header``: the header a request's id rides in ("" none).
    request_id_header: str = "X-Request-ID"


def request_id_value(run_id: str, scenario: str, request_index: int, attempt: int = 1) -> str:
    """The id a request is sent with: ``{run_id}.{scenario}.{request_index}``, plus
    ``.a{attempt}`` on a retry; characters a header value or a log search would trip
    on (anything but letters, digits and ``._:=-``) become ``_``."""
    # The index and the attempt are digits: only the run's part needs cleaning, once.
    return (
        _request_id_prefix(run_id, scenario)
        + str(request_index)
        + (f".a{attempt}" if attempt > 1 else "")
    )


@functools.lru_cache(maxsize=64)
def _request_id_prefix(run_id: str, scenario: str) -> str:
    raw = f"{run_id}.{scenario}."
    return "".join(ch if ch.isascii() and (ch.isalnum() or ch in "._:=-") else "_" for ch in raw)


def target_api(target: Target, settings: RequestSettings) -> str:
    """The protocol ``target`` is spoken in: its endpoint's ``api``, else the run's."""
    return target.endpoint.api or settings.api


def _turns(prompt: Prompt, unique_prefix: str | None) -> list[Any]:
    """The prompt as chat messages (a text prompt becomes one user turn), prefixed."""
    if prompt.messages:
        return _prefixed_messages(prompt.messages, unique_prefix, prompt.shared_messages)
    if prompt.prompt is not None:
        text = prompt.prompt
        return [{"role": "user", "content": f"{unique_prefix} {text}" if unique_prefix else text}]
    raise PromptError(f"prompt {prompt.id!r}: no messages or prompt")


#: Anthropic's cache breakpoint (a five-minute cache entry).
_CACHE_CONTROL: Final = {"type": "ephemeral"}


def _with_breakpoint(content: Any) -> Any:
    """A message's content with a cache breakpoint on its last block (a string becomes
    one text block)."""
    if isinstance(content, str):
        return [{"type": "text", "text": content, "cache_control": _CACHE_CONTROL}]
    if isinstance(content, list) and content and isinstance(content[-1], dict):
        return [*content[:-1], {**content[-1], "cache_control": _CACHE_CONTROL}]
    return content


def _cache_breakpoint(body: dict[str, Any], prompt: Prompt) -> None:
    """Mark where Anthropic may cache (``[[model]] cache_control``): the end of the
    prompt's shared prefix (its ``shared_messages``: the system text when they are all
    system messages, else the last shared turn), or, where it declares none, the whole
    prompt (its last message), so a session's next turn reads what this one wrote."""
    shared = (prompt.messages or ())[: prompt.shared_messages]
    shared_turns = sum(
        1 for m in shared if not (isinstance(m, dict) and m.get("role") in _SYSTEM_ROLES)
    )
    turns = body["messages"]
    if shared and shared_turns == 0 and "system" in body:
        body["system"] = _with_breakpoint(body["system"])
        return
    at = shared_turns - 1 if shared else len(turns) - 1
    if 0 <= at < len(turns) and isinstance(turns[at], dict):
        turns[at] = {**turns[at], "content": _with_breakpoint(turns[at].get("content"))}


def _protocol_body(
    api: str,
    prompt: Prompt,
    unique_prefix: str | None,
    limit_field: str,
) -> tuple[dict[str, Any], str]:
    """The protocol's part of the body (without model/stream/usage) and its route."""
    body: dict[str, Any] = {}
    limit = prompt.max_tokens
    if api == "completions":
        text, shared = prompt.prompt, ""
        if text is None and prompt.messages:
            # The tag goes after the shared leading messages, as in chat.
            n = min(prompt.shared_messages, len(prompt.messages) - 1)
            shared = _flatten(prompt.messages[:n]) + "\n\n" if n else ""
            text = _flatten(prompt.messages[n:])
        if text is None:
            raise PromptError(f"prompt {prompt.id!r}: no messages or prompt")
        body["prompt"] = shared + (f"{unique_prefix} {text}" if unique_prefix else text)
        if limit is not None:
            body["max_tokens"] = int(limit)
        return body, "/completions"
    messages = _turns(prompt, unique_prefix)
    if api == "chat":
        body["messages"] = messages
        if limit is not None:
            body[limit_field] = int(limit)
        return body, "/chat/completions"
    system, turns = translate_messages(api, messages)
    if api == "responses":
        body["input"] = turns
        if system is not None:
            body["instructions"] = system
        if limit is not None:
            body["max_output_tokens"] = int(limit)
        return body, "/responses"
    body["messages"] = turns
    if system is not None:
        body["system"] = system
    # The Messages API requires a limit.
    body["max_tokens"] = int(limit) if limit is not None else ANTHROPIC_DEFAULT_MAX_TOKENS
    return body, "/messages"


def _ignore_eos(
    body: dict[str, Any], target: Target, settings: RequestSettings, prompt: Prompt
) -> None:
    """The run-wide ``[load] ignore_eos`` sends vLLM/SGLang's pair (ignore_eos +
    min_tokens), and so does a prompt that wants exactly its ``max_tokens``
    (``exact_output``: length grids); a model's own ``ignore_eos = true`` sends only
    ``ignore_eos`` (what llama.cpp wants; add min_tokens in its extra_body where
    wanted), ``false`` nothing."""
    wanted = target.model.ignore_eos
    limit = prompt.max_tokens
    if prompt.exact_output and limit is not None and wanted is not False:
        body["ignore_eos"] = True
        body["min_tokens"] = int(limit)
    elif wanted is None and settings.ignore_eos:
        body["ignore_eos"] = True
        if limit is not None:
            body["min_tokens"] = int(limit)
    elif wanted:
        body["ignore_eos"] = True


def _merge_knobs(
    body: dict[str, Any], target: Target, settings: RequestSettings, prompt_fields: dict[str, Any]
) -> None:
    """Body knobs in rising precedence: run-wide, endpoint, model, the prompt's own
    fields (its ``body``, in the target's protocol), --body. A field replaces the same
    top-level field of a lower layer whole."""
    layers = (
        ("client", settings.extra_body),
        (f"endpoint {target.endpoint.name!r}", target.endpoint.extra_body),
        (f"model {target.model.name!r}", target.model.extra_body),
    )
    for owner, pairs in layers:
        for key, value in pairs:
            if key in RESERVED_BODY_KEYS:
                raise ConfigError(f"{owner}: extra_body may not set {key!r}")
            body[key] = value
    body.update(prompt_fields)
    for key, value in settings.body_overrides:
        if key in RESERVED_BODY_KEYS:
            raise ConfigError(f"--body: may not set {key!r}")
        body[key] = value


def _merge_headers(*layers: Sequence[tuple[str, str]]) -> tuple[tuple[str, str], ...]:
    """Header layers in rising precedence; a later name replaces an earlier one
    whatever its case."""
    merged: dict[str, tuple[str, str]] = {}
    for layer in layers:
        for name, value in layer:
            merged[name.lower()] = (name, value)
    return tuple(merged.values())


def auth_headers(target: Target, api: str, api_key: str | None) -> list[tuple[str, str]]:
    """How the protocol carries the key: Anthropic ``x-api-key`` (plus the default
    ``anthropic-version``, which a configured header overrides), Azure ``api-key``,
    otherwise ``Authorization: Bearer``."""
    out: list[tuple[str, str]] = []
    if api == "anthropic":
        if api_key:
            out.append(("x-api-key", api_key))
        out.append(("anthropic-version", ANTHROPIC_VERSION))
    elif api_key:
        if target.endpoint.kind == "azure":
            out.append(("api-key", api_key))
        else:
            out.append(("Authorization", f"Bearer {api_key}"))
    return out


def request_url(target: Target, api: str, route: str) -> str:
    """The URL of ``route`` on ``target``: ``base_url + route``, or on Azure OpenAI the
    deployment URL ``{base}/openai/deployments/{model}{route}?api-version=...``
    (Responses: ``{base}/openai/responses?...``; the model rides in the body)."""
    endpoint = target.endpoint
    base = endpoint.base_url.rstrip("/")
    if endpoint.kind != "azure":
        return base + route
    query = "?api-version=" + quote(endpoint.api_version or "", safe="")
    if api == "responses":
        return f"{base}/openai{route}{query}"
    return f"{base}/openai/deployments/{quote(target.model.name, safe='')}{route}{query}"


def probe_request(target: Target, api: str) -> tuple[str, dict[str, Any]]:
    """(URL, JSON body) of the pre-flight's one tiny, non-streamed request to
    ``target`` in protocol ``api`` (the Responses API wants max_output_tokens >= 16)."""
    ping = [{"role": "user", "content": "ping"}]
    body: dict[str, Any] = {"model": target.model.name, "stream": False}
    if api == "completions":
        body.update(prompt="ping", max_tokens=1)
        route = "/completions"
    elif api == "responses":
        body.update(input=ping, max_output_tokens=16)
        route = "/responses"
    elif api == "anthropic":
        body.update(messages=ping, max_tokens=1)
        route = "/messages"
    else:
        body.update(messages=ping)
        body[target.model.max_tokens_field or "max_tokens"] = 1
        route = "/chat/completions"
    return request_url(target, api, route), body


#: The body field that tells a simulator target the right answer
#: (``tokrate.sim.answers.ANSWER_FIELD``; the client does not import the simulator).
SIM_ANSWER_FIELD: Final = "tokrate_answer"


def sim_reference(expect: Expect) -> dict[str, Any] | None:
    """What a simulator target is told of a right answer (``tokrate.sim.answers``): the
    right call of a ``tool_call`` check (its arguments when given), that a
    ``no_tool_call`` check wants none, the schema of a ``json_schema`` check without an
    example, else the check's example text; None where there is none."""
    if expect.kind == "tool_call":
        call = {"name": expect.value["name"]}
        if "arguments" in expect.value:
            call["arguments"] = expect.value["arguments"]
        return {"tool_call": call}
    if expect.kind == "no_tool_call":
        return {"no_tool_call": True, **({"text": expect.example} if expect.example else {})}
    if expect.example is not None:
        return {"text": expect.example}
    if expect.kind == "json_schema":
        return {"json_schema": expect.value}
    return None


def build_request(
    target: Target,
    prompt: Prompt,
    settings: RequestSettings,
    *,
    include_usage: bool,
    unique_prefix: str | None,
    api_key: str | None,
    max_tokens_field: str | None = None,
    keep_text: bool = False,
    request_id: str | None = None,
) -> PreparedRequest:
    """Build the request for one prompt against one target.

    ``prompt.max_tokens`` is the output limit (``[prompts] max_tokens`` was applied to
    every prompt when they were loaded), sent as the protocol names it (chat:
    ``max_tokens_field`` when given (a learned fallback), else the model's
    ``max_tokens_field``, else ``max_tokens``; responses: ``max_output_tokens``;
    anthropic: ``max_tokens``, which it requires: 4096 when the prompt has none).
    ``unique_prefix`` is prepended to the first message after the prompt's
    ``shared_messages`` (or to the prompt text), so a shared prefix stays cacheable.
    A prompt with ``exact_output`` asks for exactly ``max_tokens`` (ignore_eos +
    min_tokens). ``keep_text`` makes the client keep the answer's text (session
    turns). ``request_id`` rides in ``settings.request_id_header`` (configured headers
    may replace it). A model's ``cache_control`` marks Anthropic cache breakpoints
    (:func:`_cache_breakpoint`), its ``prompt_cache_key`` rides in chat and Responses
    bodies. The prompt's own request fields (``prompt.body``) go as written to a chat
    target and translated to another protocol (:mod:`tokrate.client.translate`); body
    knobs and those fields are merged last (see :func:`_merge_knobs`) but may not
    replace model/messages/prompt/input/stream. ``include_usage`` only matters to chat
    and completions (the typed protocols always report usage).

    Raises:
        ConfigError: an extra_body tries to override a reserved key.
        PromptError: the prompt has neither messages nor prompt text.
        Untranslatable: a prompt field or message part with no equivalent in the
            target's protocol (the run's preparation checks every prompt first).
    """
    endpoint, model = target.endpoint, target.model
    api = target_api(target, settings)
    limit_field = (
        max_tokens_field or model.max_tokens_field or prompt.max_tokens_field or "max_tokens"
    )
    prompt_fields = translate_fields(api, prompt.body) if prompt.body else {}
    body: dict[str, Any] = {"model": model.name}
    part, route = _protocol_body(api, prompt, unique_prefix, limit_field)
    body.update(part)
    if model.cache_control and api == "anthropic":
        _cache_breakpoint(body, prompt)
    if model.prompt_cache_key is not None and api in ("chat", "responses"):
        body["prompt_cache_key"] = model.prompt_cache_key
    body["stream"] = True
    if include_usage and api in ("chat", "completions"):
        body["stream_options"] = {"include_usage": True}
    _ignore_eos(body, target, settings, prompt)
    expect = prompt.expect
    reference = sim_reference(expect) if target.tokrate_simulator and expect is not None else None
    if reference is not None:
        # The simulator cannot know a right answer; it is told one, and answers it with
        # its tier's declared accuracy (docs/quality.md). Never sent to a real server.
        body[SIM_ANSWER_FIELD] = {**reference, "task": prompt.task, "key": prompt.id}
    _merge_knobs(body, target, settings, prompt_fields)
    headers = _merge_headers(
        [("Content-Type", "application/json"), ("Accept", "text/event-stream")],
        auth_headers(target, api, api_key),
        [(settings.request_id_header, request_id)]
        if request_id and settings.request_id_header
        else [],
        settings.headers,
        endpoint.headers,
        model.headers,
    )
    chunks, chunks_why = response_chunk_limit(body, settings.max_response_chunks)
    return PreparedRequest(
        url=request_url(target, api, route),
        body=orjson.dumps(body),
        headers=headers,
        api=api,
        endpoint=endpoint.name,
        model=model.name,
        include_usage="stream_options" in body,
        prompt_id=prompt.id,
        max_response_chunks=chunks,
        chunk_limit_source=chunks_why,
        max_response_bytes=settings.max_response_bytes,
        max_tokens_field=limit_field if api == "chat" and limit_field in body else None,
        keep_text=keep_text,
    )


#: Output-limit fields of the four protocols' bodies.
_LIMIT_FIELDS: Final = ("max_tokens", "max_completion_tokens", "max_output_tokens")


def response_chunk_limit(body: Mapping[str, Any], configured: int) -> tuple[int, str]:
    """The most chunks a response to ``body`` may have, and what set it: a request
    that asks for at most N tokens cannot be answered in more than N content chunks,
    so past 4 x N + 256 (room for tokens split over chunks, role, usage, typed events
    and keep-alives) the server is streaming something else (an endless stream at 100
    chunks/s stayed under the configured chunk cap for the whole 600 s total timeout).
    Without a limit in the body, ``configured`` ([client] max_response_chunks)."""
    limits = [
        v
        for f in _LIMIT_FIELDS
        if isinstance(v := body.get(f), int) and not isinstance(v, bool) and v > 0
    ]
    if not limits:
        return configured, "[client] max_response_chunks"
    derived = CHUNKS_PER_TOKEN * max(limits) + CHUNKS_OVER_LIMIT
    if derived >= configured:
        return configured, "[client] max_response_chunks"
    return (
        derived,
        f"{CHUNKS_PER_TOKEN} x the request's {max(limits)} max tokens + {CHUNKS_OVER_LIMIT}",
    )


def _with_body(req: PreparedRequest, body: dict[str, Any], **changes: Any) -> PreparedRequest:
    return dataclasses.replace(req, body=orjson.dumps(body), **changes)


def with_max_completion_tokens(req: PreparedRequest) -> PreparedRequest:
    """The same chat request with its ``max_tokens`` renamed ``max_completion_tokens``
    (for models that reject the older name)."""
    body = orjson.loads(req.body)
    if "max_tokens" in body:
        body["max_completion_tokens"] = body.pop("max_tokens")
    return _with_body(req, body, max_tokens_field="max_completion_tokens")


def without_stream_options(req: PreparedRequest) -> PreparedRequest:
    """The same request without ``stream_options`` (for servers that reject it)."""
    body = orjson.loads(req.body)
    body.pop("stream_options", None)
    return _with_body(req, body, include_usage=False)


def _completions_messages(messages: Sequence[Any]) -> None:
    """Legacy Completions flattens messages into text: a part or a tool call that is
    not text would be lost, so it is refused (raises Untranslatable)."""
    for i, m in enumerate(messages):
        if not isinstance(m, dict):
            continue
        if m.get("tool_calls") or m.get("role") == "tool":
            raise Untranslatable(
                "completions", f"messages[{i}]", "tool calls have no place in legacy Completions"
            )
        content = m.get("content")
        for j, part in enumerate(content if isinstance(content, list) else ()):
            if not (isinstance(part, dict) and part.get("type") == "text"):
                kind = part.get("type") if isinstance(part, dict) else None
                raise Untranslatable(
                    "completions",
                    f"messages[{i}].content[{j}]",
                    f"a {kind!r} part has no place in legacy Completions (text only)",
                )


def check_translations(
    targets: Sequence[Target], prompts: Sequence[Prompt], settings: RequestSettings
) -> None:
    """Every prompt's request fields and message parts reach every target's protocol
    (:mod:`tokrate.client.translate`); called before anything is sent.

    Raises:
        PromptError: "SOURCE: FIELD: WHY (target LABEL speaks API)" for the first
            prompt field or part with no equivalent there.
    """
    first: dict[str, Target] = {}
    for target in targets:
        first.setdefault(target_api(target, settings), target)
    for api, target in first.items():
        if api == "chat":
            continue
        for p in prompts:
            try:
                if p.body:
                    translate_fields(api, p.body)
                if p.messages and api == "completions":
                    _completions_messages(p.messages)
                elif p.messages:
                    translate_messages(api, p.messages)
            except Untranslatable as err:
                raise PromptError(
                    f"{p.source}: {err.field}: {err.why} (target {target.label} speaks {api})"
                ) from None
