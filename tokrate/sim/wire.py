"""The seam between the timing engine and a protocol's bytes: :class:`StreamWire`.

The engine (:mod:`tokrate.sim.scheduler`) decides *when* tokens are due; a StreamWire
decides *which bytes* carry them. One subclass per protocol: Chat Completions and
legacy Completions (:class:`tokrate.sim.protocol.ChunkBytes`), the Responses API
(:mod:`tokrate.sim.wire_responses`), Anthropic Messages (:mod:`tokrate.sim.wire_messages`).
One instance per response; it may keep state (an open block, a sequence number), so
the same instance sees every event of its response, in order.

Invariant: every method returns zero or more *whole* SSE events (each ending in a blank
line), except :meth:`StreamWire.malformed`, whose point is to be broken. Token texts
are plain ASCII without quotes or backslashes (:func:`tokrate.sim.model.token_text`),
so they are pasted into JSON strings as they are.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any

__all__ = ["StreamWire", "TokenUsage"]


@dataclass(frozen=True, slots=True)
class TokenUsage:
    """Exact token counts of one response; ``output_tokens`` includes
    ``reasoning_tokens``, as every one of the protocols bills them."""

    input_tokens: int
    output_tokens: int
    reasoning_tokens: int
    #: Prompt tokens the prefix cache served (None: the cache is off).
    cached_tokens: int | None = None
    #: Prompt tokens written to the cache up to an Anthropic cache_control breakpoint
    #: (None: the cache is off, or the protocol has no breakpoints).
    cache_write_tokens: int | None = None
    #: A vLLM-style per-request metrics object (``--request-metrics``), sent beside
    #: usage by the chat and completions wires.
    metrics: dict[str, Any] | None = None


class StreamWire(ABC):
    """The bytes of one response of one protocol, streamed or whole.

    ``finish_reason`` arguments use the engine's words, ``"stop"``, ``"length"`` or
    ``"tool_calls"`` (Chat Completions' own); each wire maps them to its protocol's
    vocabulary.
    """

    __slots__ = ()

    @abstractmethod
    def opening(self) -> bytes:
        """Events sent as soon as the request is admitted (may be ``b""``); no token."""

    @abstractmethod
    def reasoning(self, text: bytes) -> bytes:
        """Events carrying one chunk of reasoning ``text``."""

    @abstractmethod
    def content(self, text: bytes) -> bytes:
        """Events carrying one chunk of answer ``text``."""

    @abstractmethod
    def start_call(self, name: str, arguments: str) -> None:
        """The answer is a call of tool ``name`` (its whole ``arguments`` JSON text,
        which :meth:`tool_call` then streams in pieces): called before any event."""

    @abstractmethod
    def tool_call(self, text: bytes) -> bytes:
        """Events carrying one piece of the call's arguments ``text`` (JSON string
        content); the first also names the call (or opens its item or block)."""

    @abstractmethod
    def malformed(self, text: bytes) -> bytes:
        """A delta event cut off mid-JSON (the ``malformed`` fault); state unchanged."""

    @abstractmethod
    def closing(self, finish_reason: str, usage: TokenUsage) -> bytes:
        """Everything after the last token: open parts closed, finish, usage, end."""

    @abstractmethod
    def failure(self, usage: TokenUsage) -> bytes:
        """The in-band error that ends a stream early (the ``stream_error`` fault)."""

    @abstractmethod
    def whole(self, finish_reason: str, usage: TokenUsage, text: bytes) -> bytes:
        """The non-streaming JSON body of the same response; ``text`` is its answer
        (the bytes its stream would have carried after the reasoning: a right answer's
        text where the tier answers right, the filler words otherwise)."""
