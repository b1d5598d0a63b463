"""The simulator's prefix cache: prompts that start like an earlier one skip that part
of their prefill, as vLLM's automatic prefix caching and SGLang's radix cache do.

Tokens: the simulator does not tokenize; it counts (``tokrate.physics``): per chat
message 4 template tokens plus one token per started 4 bytes of its UTF-8 content,
then 2 reply-priming tokens (a completions prompt: one token per 4 bytes). This module
spells out that same sequence as byte pieces (a template token is its role and
position, a content token its 4 bytes), so the count here equals the server's count
exactly, and cuts it into blocks of :data:`BLOCK_TOKENS`. A block's key hashes its
pieces and the previous block's key (blake2b), so a block matches only when the whole
prompt up to its end matches. Only full blocks are kept.

:class:`PrefixCache` is one tier's cache: a bounded LRU of block keys (the capacity,
in blocks, is the tier's KV capacity: the cache lives in the memory the batch is not
using). :meth:`PrefixCache.admit` is called when a request joins the batch: its
leading blocks that are cached count as cached tokens (their prefill is skipped),
every block of the prompt is then cached (most recent). At least one prompt token is
always prefilled (the one that yields the first output token), so ``cached_tokens <=
input_tokens - 1``. A prefix counts as cached from its request's admission on.

Pure and synchronous; the engine's loop is its only caller.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Final

from tokrate.physics import CHAT_MESSAGE_OVERHEAD_TOKENS, CHAT_REPLY_PRIMING_TOKENS

__all__ = [
    "BLOCK_TOKENS",
    "PrefixCache",
    "breakpoint_tokens",
    "chat_block_keys",
    "text_block_keys",
]

#: Tokens per cache block (vLLM's default block size).
BLOCK_TOKENS: Final = 16
_BYTES_PER_TOKEN: Final = 4


def _content_bytes(content: object) -> bytes:
    # As tokrate.physics counts it: a string, or the text parts of a content list.
    if isinstance(content, str):
        return content.encode("utf-8")
    if isinstance(content, list):
        texts = (str(p.get("text", "")) for p in content if isinstance(p, dict) and "text" in p)
        return "".join(texts).encode("utf-8")
    return b""


def _text_pieces(data: bytes) -> Iterator[bytes]:
    for i in range(0, len(data), _BYTES_PER_TOKEN):
        yield data[i : i + _BYTES_PER_TOKEN]


def _chat_pieces(messages: Iterable[Mapping[str, object]]) -> Iterator[bytes]:
    for m in messages:
        role = str(m.get("role", "")).encode("utf-8", "replace")
        for k in range(CHAT_MESSAGE_OVERHEAD_TOKENS):
            yield b"\x00<" + role + b">" + bytes((k,))
        yield from _text_pieces(_content_bytes(m.get("content")))
    for k in range(CHAT_REPLY_PRIMING_TOKENS):
        yield b"\x00<reply>" + bytes((k,))


def _block_keys(pieces: Iterable[bytes]) -> tuple[bytes, ...]:
    keys: list[bytes] = []
    prev = b""
    block: list[bytes] = []
    for piece in pieces:
        block.append(piece)
        if len(block) == BLOCK_TOKENS:
            # Length-prefixed pieces: two different splits can never hash the same.
            h = hashlib.blake2b(prev, digest_size=16)
            for p in block:
                h.update(bytes((len(p),)) + p)
            prev = h.digest()
            keys.append(prev)
            block = []
    return tuple(keys)


def breakpoint_tokens(messages: Sequence[Mapping[str, object]]) -> int | None:
    """Anthropic prompt caching: the prompt tokens up to the end of its last content
    block marked ``cache_control`` (counted as :func:`chat_block_keys` spells them;
    a block ending inside a 4-byte token covers the tokens before it), None when no
    block is marked (then nothing may be cached)."""
    position = 0
    found: int | None = None
    for m in messages:
        position += CHAT_MESSAGE_OVERHEAD_TOKENS
        content = m.get("content")
        if isinstance(content, list):
            size = 0
            for part in content:
                if isinstance(part, dict) and "text" in part:
                    size += len(str(part.get("text", "")).encode("utf-8"))
                if isinstance(part, dict) and part.get("cache_control") is not None:
                    found = position + size // _BYTES_PER_TOKEN
        position += -(-len(_content_bytes(content)) // _BYTES_PER_TOKEN)
    return found


def chat_block_keys(messages: Iterable[Mapping[str, object]]) -> tuple[bytes, ...]:
    """Keys of the full blocks of a chat prompt (see the module doc)."""
    return _block_keys(_chat_pieces(messages))


def text_block_keys(prompt: str) -> tuple[bytes, ...]:
    """Keys of the full blocks of a completions prompt."""
    return _block_keys(_text_pieces(prompt.encode("utf-8")))


class PrefixCache:
    """A bounded LRU of prompt blocks for one tier (see the module doc)."""

    def __init__(self, capacity_blocks: int) -> None:
        if capacity_blocks < 0:
            raise ValueError("capacity_blocks must be >= 0")
        self.capacity_blocks = capacity_blocks
        self._blocks: OrderedDict[bytes, None] = OrderedDict()
        #: Totals since start: prompt tokens looked up, and those found cached.
        self.lookup_tokens = 0
        self.hit_tokens = 0

    def __len__(self) -> int:
        return len(self._blocks)

    def admit(self, keys: Sequence[bytes], input_tokens: int, limit: int | None = None) -> int:
        """Cached tokens of a prompt of ``input_tokens`` whose blocks are ``keys``; then
        every one of its blocks is cached (most recently used). ``limit``: only the
        first that many tokens may be cached or found (Anthropic's breakpoint,
        :func:`breakpoint_tokens`); the lookup still counts the whole prompt."""
        if limit is not None:
            keys = keys[: limit // BLOCK_TOKENS]
        blocks = self._blocks
        hit = 0
        for key in keys:
            if key not in blocks:
                break
            hit += 1
        for key in keys:
            if key in blocks:
                blocks.move_to_end(key)
            else:
                blocks[key] = None
        while len(blocks) > self.capacity_blocks:
            blocks.popitem(last=False)
        cached = max(0, min(hit * BLOCK_TOKENS, input_tokens - 1))
        self.lookup_tokens += input_tokens
        self.hit_tokens += cached
        return cached
