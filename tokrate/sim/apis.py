"""The four generation protocols the simulator speaks, as one table: :data:`API_ROUTES`.

Each :class:`Api` says how its route authenticates, parses a body into the shared
:class:`~tokrate.sim.request_plan.RequestPlan`, makes the response's
:class:`~tokrate.sim.wire.StreamWire`, and shapes errors and injected HTTP faults
(OpenAI's error object and statuses, or Anthropic's). Everything else (engines, fault
draw, truth log) is one code path in :mod:`tokrate.sim.app`.
"""

from __future__ import annotations

import hmac
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from tokrate.sim.bad_request import BadRequest, invalid
from tokrate.sim.faults import FaultRule
from tokrate.sim.model import TierTiming
from tokrate.sim.protocol import ChunkBytes, error_body
from tokrate.sim.request_apis import plan_messages, plan_responses
from tokrate.sim.request_plan import RequestPlan, plan_request
from tokrate.sim.wire import StreamWire
from tokrate.sim.wire_messages import ANTHROPIC_VERSIONS, MessagesWire, anthropic_error_body
from tokrate.sim.wire_responses import ResponsesWire

__all__ = ["API_ROUTES", "Api", "Headers", "check_any_key", "check_bearer"]

Headers = list[tuple[bytes, bytes]]
_JSON: Headers = [(b"content-type", b"application/json")]
#: (body, timings, length rngs, block_keys: key the prompt for the prefix cache) -> plan.
Planner = Callable[
    [bytes, Mapping[str, TierTiming], Mapping[str, random.Random], bool], RequestPlan
]


def check_bearer(headers: Any, api_key: bytes | None) -> None:
    """OpenAI-style ``Authorization: Bearer KEY`` (when the simulator has a key)."""
    if api_key is None:
        return
    got = next((v for k, v in headers if k == b"authorization"), b"")
    # Compare in constant time and never echo what was sent (it may be a real key).
    if not hmac.compare_digest(got, b"Bearer " + api_key):
        raise BadRequest(
            401,
            "Incorrect API key provided." if got else "Missing bearer authentication in header.",
            "invalid_request_error",
            None,
            "invalid_api_key",
        )


def check_any_key(headers: Any, api_key: bytes | None) -> None:
    """Routes both kinds of client call (``/v1/models``): Bearer or ``x-api-key``."""
    if api_key is None:
        return
    got = next((v for k, v in headers if k == b"x-api-key"), None)
    if got is None or not hmac.compare_digest(got, api_key):
        check_bearer(headers, api_key)


def _check_anthropic(headers: Any, api_key: bytes | None) -> None:
    """``x-api-key`` (when the simulator has a key), then ``anthropic-version``."""
    found = {k: v for k, v in headers if k in (b"x-api-key", b"anthropic-version")}
    if api_key is not None:
        got = found.get(b"x-api-key", b"")
        if not got:
            raise BadRequest(
                401, "x-api-key header is required", "authentication_error", None, None
            )
        if not hmac.compare_digest(got, api_key):
            raise BadRequest(401, "invalid x-api-key", "authentication_error", None, None)
    version = found.get(b"anthropic-version")
    if version is None:
        raise invalid("anthropic-version: header is required")
    if version.decode("latin-1") not in ANTHROPIC_VERSIONS:
        raise invalid(f"anthropic-version: {version.decode('latin-1')!r} is not a valid version")


def _openai_fault(fault: FaultRule) -> tuple[int, bytes, Headers]:
    if fault.kind == "http_429":
        body = error_body(
            "Rate limit reached for requests (simulated fault http_429).",
            "requests",
            code="rate_limit_exceeded",
        )
        return 429, body, [*_JSON, (b"retry-after", f"{fault.param('retry_after'):g}".encode())]
    if fault.kind == "http_503":
        body = error_body(
            "The engine is currently overloaded (simulated fault http_503).",
            "server_error",
            code="overloaded",
        )
        return 503, body, _JSON
    body = error_body(
        "The server had an error while processing your request (simulated fault http_500).",
        "server_error",
    )
    return 500, body, _JSON


def _anthropic_fault(fault: FaultRule, request_id: str) -> tuple[int, bytes, Headers]:
    headers = [*_JSON, (b"request-id", request_id.encode())]
    if fault.kind == "http_429":
        body = anthropic_error_body(429, "Rate limited (simulated fault http_429).", request_id)
        return 429, body, [*headers, (b"retry-after", f"{fault.param('retry_after'):g}".encode())]
    if fault.kind == "http_503":
        return 529, anthropic_error_body(529, "Overloaded", request_id), headers
    message = "Internal server error (simulated fault http_500)."
    return 500, anthropic_error_body(500, message, request_id), headers


@dataclass(frozen=True, slots=True)
class Api:
    """One generation protocol. ``name`` is what the truth log records."""

    name: str
    id_prefix: str
    plan: Planner
    anthropic: bool = False

    def check_headers(self, headers: Any, api_key: bytes | None) -> None:
        (_check_anthropic if self.anthropic else check_bearer)(headers, api_key)

    def wire(self, response_id: str, plan: RequestPlan, created: int) -> StreamWire:
        if self.name == "responses":
            return ResponsesWire(response_id, plan.model, created, dict(plan.echo))
        if self.anthropic:
            return MessagesWire(response_id, plan.model, plan.input_tokens)
        return ChunkBytes(
            response_id,
            plan.model,
            created,
            chat=self.name == "chat",
            include_usage=plan.include_usage,
        )

    def error(self, err: BadRequest, request_id: str) -> tuple[bytes, Headers]:
        """The body and headers answering ``err`` in this protocol's shape."""
        if self.anthropic:
            body = anthropic_error_body(err.status, err.message, request_id)
            return body, [*_JSON, (b"request-id", request_id.encode())]
        return error_body(err.message, err.type_, param=err.param, code=err.code), _JSON

    def fault(self, fault: FaultRule, request_id: str) -> tuple[int, bytes, Headers]:
        """Status, body, headers of an injected ``http_500``/``http_429``/``http_503``
        (Anthropic's overloaded is 529)."""
        return _anthropic_fault(fault, request_id) if self.anthropic else _openai_fault(fault)


def _chat(
    raw: bytes,
    t: Mapping[str, TierTiming],
    r: Mapping[str, random.Random],
    block_keys: bool = False,
) -> RequestPlan:
    return plan_request(raw, chat=True, timings=t, length_rng=r, block_keys=block_keys)


def _text(
    raw: bytes,
    t: Mapping[str, TierTiming],
    r: Mapping[str, random.Random],
    block_keys: bool = False,
) -> RequestPlan:
    return plan_request(raw, chat=False, timings=t, length_rng=r, block_keys=block_keys)


#: Path -> protocol.
API_ROUTES: Mapping[str, Api] = {
    "/v1/chat/completions": Api("chat", "chatcmpl-", _chat),
    "/v1/completions": Api("completions", "cmpl-", _text),
    "/v1/responses": Api("responses", "resp_", plan_responses),
    "/v1/messages": Api("messages", "msg_", plan_messages, anthropic=True),
}
