"""The physics of LLM serving that the simulator, the report and prompt estimates share.

- Decode reads every active weight once per step, so single-stream decode speed is
  bounded by memory bandwidth: ``tokens/s <= bandwidth / (active params x bytes per
  param)`` (:func:`decode_bound_tps`).
- Prefill is compute-bound: ``2 x active params x input tokens`` FLOPs
  (:func:`prefill_s`).
- Token counts of text a client sends and the simulator receives follow one
  deterministic rule (:func:`count_text_tokens`, :func:`count_chat_tokens`), so both
  sides agree exactly; real tokenizers differ and a real server's usage is the truth.
  A request's tool definitions and output schema count by their compact JSON
  (:func:`count_request_tokens`), images by OpenAI's documented tile rule and sounds
  by their duration (:func:`media_part_tokens`; sizes read from the header bytes of
  a PNG, JPEG, GIF, WebP or WAV: :func:`image_size`, :func:`wav_seconds`), so a vision
  prompt moves the simulator's prefill as it moves a real server's.
- :data:`DEFAULT_TIER_SIZES`: the sizes of the built-in simulator tiers (the Llama and
  Mixtral sizes they stand for), which the simulator builds its tiers from and the
  report's synthetic runs reuse.

Units: parameters in billions (``*_b``), bandwidth bytes/s, compute FLOP/s, seconds.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import struct
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Final

__all__ = [
    "AUDIO_TOKENS_PER_S",
    "CHAT_MESSAGE_OVERHEAD_TOKENS",
    "CHAT_REPLY_PRIMING_TOKENS",
    "DEFAULT_TIER_SIZES",
    "IMAGE_BASE_TOKENS",
    "IMAGE_TILE_TOKENS",
    "UNKNOWN_IMAGE_TOKENS",
    "TierSize",
    "audio_tokens",
    "count_chat_tokens",
    "count_json_tokens",
    "count_request_tokens",
    "count_text_tokens",
    "count_tool_tokens",
    "image_size",
    "image_tokens",
    "media_part_tokens",
    "wav_seconds",
    "decode_bound_tps",
    "prefill_s",
]

#: Tokens a chat template adds around each message (role markers), and once for the
#: assistant reply header. Deterministic stand-ins for a real tokenizer's template.
CHAT_MESSAGE_OVERHEAD_TOKENS: Final = 4
CHAT_REPLY_PRIMING_TOKENS: Final = 2


def count_text_tokens(text: str) -> int:
    """Approximate token count of ``text``: ceil(UTF-8 bytes / 4), at least 1 if non-empty.

    Four bytes per token is the usual rule of thumb for English BPE vocabularies; the
    point is determinism (client and server agree exactly), not tokenizer fidelity.
    """
    n = len(text.encode("utf-8"))
    return (n + 3) // 4


# --- media sizes, from header bytes -------------------------------------------------

#: Base64 characters decoded to read a header: 192 KiB of bytes, past the EXIF block
#: and thumbnail a camera JPEG carries before its frame header.
HEADER_PREFIX_CHARS: Final = 256 * 1024
#: JPEG start-of-frame markers (SOF0-SOF15 but DHT, JPG and DAC, which share the range).
_JPEG_SOF: Final = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}


def data_url(url: str) -> tuple[str, str] | None:
    """``(media type, base64 text)`` of a ``data:<type>;base64,<data>`` URL, None for
    any other URL (an http link, a data URL that is not base64)."""
    if not url.startswith("data:"):
        return None
    head, comma, payload = url.partition(",")
    if not comma or not head.endswith(";base64"):
        return None
    media_type = head[len("data:") : -len(";base64")].split(";", 1)[0].strip().lower()
    return media_type, payload


def base64_prefix(text: str, chars: int = HEADER_PREFIX_CHARS) -> bytes:
    """The bytes of the first ``chars`` characters of base64 ``text`` (whitespace
    ignored, cut to whole 4-character groups); b"" when it is not base64."""
    head = "".join(text[: chars + chars // 16].split())[:chars]
    head = head[: len(head) - len(head) % 4]
    try:
        return base64.b64decode(head, validate=True)
    except (binascii.Error, ValueError):
        return b""


def image_size(data: bytes) -> tuple[int, int] | None:
    """``(width, height)`` in pixels of a PNG, GIF, WebP or JPEG from its first bytes
    (the header; a JPEG's frame header may come after its metadata), None when the
    bytes are none of these or are cut before the size."""
    if data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) >= 24:
        width, height = struct.unpack(">II", data[16:24])
        return _positive(width, height)
    if data[:6] in (b"GIF87a", b"GIF89a") and len(data) >= 10:
        width, height = struct.unpack("<HH", data[6:10])
        return _positive(width, height)
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return _webp_size(data)
    if data[:2] == b"\xff\xd8":
        return _jpeg_size(data)
    return None


def _positive(width: int, height: int) -> tuple[int, int] | None:
    return (width, height) if width > 0 and height > 0 else None


def _webp_size(data: bytes) -> tuple[int, int] | None:
    kind = data[12:16]
    if kind == b"VP8 " and len(data) >= 30:
        # The key frame's start code, then 14-bit width and height.
        width, height = struct.unpack("<HH", data[26:30])
        return _positive(width & 0x3FFF, height & 0x3FFF)
    if kind == b"VP8L" and len(data) >= 25:
        bits = int.from_bytes(data[21:25], "little")
        return _positive((bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1)
    if kind == b"VP8X" and len(data) >= 30:
        width = int.from_bytes(data[24:27], "little") + 1
        height = int.from_bytes(data[27:30], "little") + 1
        return _positive(width, height)
    return None


def _jpeg_size(data: bytes) -> tuple[int, int] | None:
    at = 2
    while at + 4 <= len(data):
        if data[at] != 0xFF:
            return None
        marker = data[at + 1]
        if marker == 0xFF:  # fill byte
            at += 1
            continue
        if marker in (0x01, *range(0xD0, 0xD9)):  # markers without a length
            at += 2
            continue
        (length,) = struct.unpack(">H", data[at + 2 : at + 4])
        if marker in _JPEG_SOF:
            if at + 9 > len(data):
                return None
            height, width = struct.unpack(">HH", data[at + 5 : at + 9])
            return _positive(width, height)
        at += 2 + length
    return None


def wav_seconds(data: bytes) -> float | None:
    """Duration of a RIFF/WAVE file from its ``fmt`` byte rate and ``data`` size, None
    when the bytes are not one (or are cut before its ``data`` chunk header)."""
    if data[:4] != b"RIFF" or data[8:12] != b"WAVE":
        return None
    at = 12
    byte_rate = 0
    while at + 8 <= len(data):
        chunk, size = data[at : at + 4], int.from_bytes(data[at + 4 : at + 8], "little")
        if chunk == b"fmt " and at + 16 <= len(data):
            byte_rate = int.from_bytes(data[at + 16 : at + 20], "little")
        elif chunk == b"data":
            return size / byte_rate if byte_rate > 0 else None
        at += 8 + size + (size & 1)
    return None


# --- media tokens ---------------------------------------------------------------------

# Images, by the tile rule OpenAI documents for its vision models: "low" detail is
# IMAGE_BASE_TOKENS; otherwise the image is scaled to fit 2048 x 2048, then its shorter
# side to 768 px (never up), and each 512 px tile costs IMAGE_TILE_TOKENS more.
IMAGE_BASE_TOKENS: Final = 85
IMAGE_TILE_TOKENS: Final = 170
_IMAGE_TILE_PX: Final = 512
_IMAGE_FIT_PX: Final = 2048
_IMAGE_SHORT_SIDE_PX: Final = 768
#: An image whose size cannot be read (an http URL, a header tokrate does not know):
#: charged as 1024 x 1024 at high detail (4 tiles).
UNKNOWN_IMAGE_TOKENS: Final = IMAGE_BASE_TOKENS + 4 * IMAGE_TILE_TOKENS
#: Sound: tokens per second of a WAV file's duration; other formats are charged by
#: their bytes as if they held 16 kB (a 128 kbit/s MP3) per second.
AUDIO_TOKENS_PER_S: Final = 10
_AUDIO_BYTES_PER_S: Final = 16_000


def image_tokens(size: tuple[int, int] | None, detail: str | None) -> int:
    """Prefill tokens of one image of ``size`` (width, height; None: unknown) at
    ``detail`` ("low", "high", "auto"/None: high): see the rule above."""
    if detail == "low":
        return IMAGE_BASE_TOKENS
    if size is None:
        return UNKNOWN_IMAGE_TOKENS
    width, height = float(size[0]), float(size[1])
    fit = min(1.0, _IMAGE_FIT_PX / max(width, height))
    width, height = width * fit, height * fit
    short = min(1.0, _IMAGE_SHORT_SIDE_PX / min(width, height))
    width, height = width * short, height * short
    tiles = math.ceil(width / _IMAGE_TILE_PX) * math.ceil(height / _IMAGE_TILE_PX)
    return IMAGE_BASE_TOKENS + IMAGE_TILE_TOKENS * tiles


def audio_tokens(seconds: float | None, data_bytes: int) -> int:
    """Prefill tokens of one sound: AUDIO_TOKENS_PER_S per second of ``seconds``
    (a WAV file's duration), else of ``data_bytes`` at 16 kB per second; at least 1."""
    if seconds is None:
        seconds = data_bytes / _AUDIO_BYTES_PER_S
    return max(1, math.ceil(seconds * AUDIO_TOKENS_PER_S))


def media_part_tokens(part: Mapping[str, object]) -> int:
    """Prefill tokens of one Chat Completions content part: an ``image_url`` part
    (size read from a base64 data URL's header, :func:`image_size`) or an
    ``input_audio`` part (base64 ``data``); 0 for any other part."""
    kind = part.get("type")
    if kind == "image_url":
        image = part.get("image_url")
        url = image.get("url") if isinstance(image, Mapping) else image
        detail = image.get("detail") if isinstance(image, Mapping) else None
        found = data_url(url) if isinstance(url, str) else None
        size = image_size(base64_prefix(found[1])) if found is not None else None
        return image_tokens(size, detail if isinstance(detail, str) else None)
    if kind == "input_audio":
        audio = part.get("input_audio")
        data = audio.get("data") if isinstance(audio, Mapping) else None
        if not isinstance(data, str):
            return audio_tokens(None, 0)
        n_bytes = len(data) * 3 // 4
        return audio_tokens(wav_seconds(base64_prefix(data, 4096)), n_bytes)
    return 0


def _content_tokens(content: object) -> int:
    """Tokens of a message's content: a string, or a list of parts whose text parts
    count by their bytes and media parts by :func:`media_part_tokens`."""
    if isinstance(content, str):
        return count_text_tokens(content)
    if not isinstance(content, list):
        return 0
    text = "".join(str(p.get("text", "")) for p in content if isinstance(p, dict) and "text" in p)
    media = sum(media_part_tokens(p) for p in content if isinstance(p, dict))
    return count_text_tokens(text) + media


def _tool_call_tokens(calls: object) -> int:
    """Tokens of an assistant message's earlier tool calls (chat ``tool_calls``):
    each function's name and arguments text."""
    if not isinstance(calls, list):
        return 0
    total = 0
    for call in calls:
        function = call.get("function") if isinstance(call, dict) else None
        if isinstance(function, dict):
            name, arguments = function.get("name"), function.get("arguments")
            total += count_text_tokens(name if isinstance(name, str) else "")
            total += count_text_tokens(arguments if isinstance(arguments, str) else "")
    return total


def count_chat_tokens(messages: Iterable[Mapping[str, object]]) -> int:
    """Approximate prompt tokens of a chat request.

    ``sum(CHAT_MESSAGE_OVERHEAD_TOKENS + content tokens) + CHAT_REPLY_PRIMING_TOKENS``
    over the messages; content may be a string or a list of parts (text by its bytes,
    images and sounds by :func:`media_part_tokens`), plus the name and arguments of an
    assistant message's ``tool_calls``.
    """
    total = CHAT_REPLY_PRIMING_TOKENS
    for m in messages:
        total += CHAT_MESSAGE_OVERHEAD_TOKENS + _content_tokens(m.get("content"))
        if "tool_calls" in m:
            total += _tool_call_tokens(m.get("tool_calls"))
    return total


def count_json_tokens(value: object) -> int:
    """ceil(bytes / 4) of ``value`` as compact JSON (no spaces, keys in their order,
    non-ASCII as UTF-8): the approximation for a tool's parameters or an output schema."""
    text = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    return count_text_tokens(text)


def count_tool_tokens(name: str, description: str, parameters: object) -> int:
    """Prompt tokens one tool definition adds: a message's overhead plus its name,
    description and parameters schema (:func:`count_json_tokens`), in whichever
    protocol's shape it came (the same tool counts the same everywhere)."""
    return (
        CHAT_MESSAGE_OVERHEAD_TOKENS
        + count_text_tokens(name)
        + count_text_tokens(description)
        + (count_json_tokens(parameters) if parameters is not None else 0)
    )


def count_request_tokens(
    messages: Iterable[Mapping[str, object]],
    tools: Iterable[tuple[str, str, object]] = (),
    output_schema: object = None,
) -> int:
    """Prompt tokens of a whole request: its messages (:func:`count_chat_tokens`),
    each tool as ``(name, description, parameters)`` (:func:`count_tool_tokens`) and
    an output JSON schema (a message's overhead plus the schema), as a chat template
    writes tool definitions and a schema into the prompt."""
    total = count_chat_tokens(messages)
    total += sum(count_tool_tokens(*tool) for tool in tools)
    if output_schema is not None:
        total += CHAT_MESSAGE_OVERHEAD_TOKENS + count_json_tokens(output_schema)
    return total


def decode_bound_tps(
    bandwidth_bytes_per_s: float, active_params_b: float, bytes_per_param: float
) -> float:
    """Single-stream decode ceiling, tokens/s: bandwidth / (active params x bytes).

    Raises ValueError for a size or width that is not positive.
    """
    if active_params_b <= 0 or bytes_per_param <= 0:
        raise ValueError("active_params_b and bytes_per_param must be > 0")
    return bandwidth_bytes_per_s / (active_params_b * 1e9 * bytes_per_param)


def prefill_s(active_params_b: float, input_tokens: int, flops_per_s: float) -> float:
    """Compute-bound prefill of one request: 2 x active params x input tokens FLOPs at
    ``flops_per_s`` (already multiplied by whatever efficiency applies), seconds."""
    return 2.0 * active_params_b * 1e9 * input_tokens / flops_per_s


@dataclass(frozen=True, slots=True)
class TierSize:
    """A model size: total and active parameters (billions), bytes per parameter, and
    the GPUs it is served on."""

    name: str
    params_b: float
    active_params_b: float
    bytes_per_param: float = 2.0
    gpus: int = 1


#: The built-in simulator tiers' sizes (fp16). 1B-34B fit one 80 GB GPU, 70B and the
#: 8x7B mixture of experts (46.7B total, 12.9B active) are served on two.
DEFAULT_TIER_SIZES: Final[tuple[TierSize, ...]] = (
    TierSize("sim-1b", 1.0, 1.0),
    TierSize("sim-7b", 7.0, 7.0),
    TierSize("sim-13b", 13.0, 13.0),
    TierSize("sim-34b", 34.0, 34.0),
    TierSize("sim-70b", 70.0, 70.0, gpus=2),
    TierSize("sim-8x7b", 46.7, 12.9, gpus=2),
)
