"""Images and sounds in a prompt's messages: local files read into the parts, and what
the parts weigh.

Content parts are sent as written: an ``image_url`` part (``{"url": "https://..."}`` or
a base64 ``data:`` URL, with an optional ``detail``) and an ``input_audio`` part
(``{"data": BASE64, "format": "wav"}``). The convenience form names a local file
instead, relative to the prompts file's folder (docs/config.md "Request fields")::

    {"type": "image_url", "image_url": {"file": "img/receipt.png", "detail": "low"}}
    {"type": "input_audio", "input_audio": {"file": "audio/question.wav"}}

:func:`resolve_media` reads each named file (at most :data:`MAX_MEDIA_FILE_BYTES`;
images .png/.jpg/.jpeg/.gif/.webp, sounds .wav/.mp3) into a base64 data URL (images) or
``data`` + ``format`` (sounds) when the prompts load, so the measured request carries
the bytes and nothing is read while measuring. :func:`media_weight` counts a prompt's
media parts and the bytes they add to the request body.
"""

from __future__ import annotations

import base64
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

import orjson

from tokrate.errors import PromptError
from tokrate.fileio import FileRefused, read_regular

__all__ = [
    "AUDIO_TYPES",
    "IMAGE_TYPES",
    "MAX_MEDIA_FILE_BYTES",
    "MEDIA_PART_TYPES",
    "media_weight",
    "resolve_media",
]

#: The largest image or sound file one part may read (OpenAI's per-image limit).
MAX_MEDIA_FILE_BYTES: Final = 20 * 1024 * 1024
#: Image file suffix -> media type of its data URL.
IMAGE_TYPES: Final = {
    ".png": "image/png",
    ".jpg": "image/jpeg",
    ".jpeg": "image/jpeg",
    ".gif": "image/gif",
    ".webp": "image/webp",
}
#: Sound file suffix -> ``input_audio.format``.
AUDIO_TYPES: Final = {".wav": "wav", ".mp3": "mp3"}
#: Content parts that carry media (counted in a record's ``media_parts``).
MEDIA_PART_TYPES: Final = frozenset({"image_url", "input_audio", "file"})


def _read(
    raw: object, base_dir: Path | None, where: str, kinds: dict[str, str]
) -> tuple[str, bytes]:
    """(the file's kind from ``kinds`` by suffix, its bytes)."""
    if not isinstance(raw, str) or not raw.strip():
        raise PromptError(f"{where}.file: must be a non-empty path")
    if base_dir is None:
        raise PromptError(f"{where}.file: only a prompts file can name a local file")
    path = Path(raw).expanduser()
    if not path.is_absolute():
        path = base_dir / path
    kind = kinds.get(path.suffix.lower())
    if kind is None:
        known = ", ".join(kinds)
        raise PromptError(f"{where}.file {raw!r}: unknown file type (use {known})")
    try:
        return kind, read_regular(path, MAX_MEDIA_FILE_BYTES)
    except FileRefused as err:
        raise PromptError(f"{where}.file {raw!r}: {err}") from None
    except FileNotFoundError:
        raise PromptError(f"{where}.file {raw!r}: not found (looked in {path.parent})") from None
    except OSError as err:
        raise PromptError(f"{where}.file {raw!r}: cannot read ({err.strerror})") from None


def _part(part: Any, base_dir: Path | None, where: str) -> Any:
    """One content part with a ``file`` it names read in (any other part unchanged)."""
    if not isinstance(part, dict):
        return part
    kind = part.get("type")
    inner = part.get(kind) if isinstance(kind, str) else None
    if not isinstance(inner, dict) or "file" not in inner:
        return part
    rest = {k: v for k, v in inner.items() if k != "file"}
    if kind == "image_url":
        media_type, data = _read(inner["file"], base_dir, f"{where}.image_url", IMAGE_TYPES)
        url = f"data:{media_type};base64,{base64.b64encode(data).decode('ascii')}"
        return {**part, "image_url": {"url": url, **rest}}
    if kind == "input_audio":
        fmt, data = _read(inner["file"], base_dir, f"{where}.input_audio", AUDIO_TYPES)
        encoded = base64.b64encode(data).decode("ascii")
        return {**part, "input_audio": {"data": encoded, "format": fmt, **rest}}
    raise PromptError(f"{where}.{kind}.file: only image_url and input_audio parts read files")


def resolve_media(
    messages: Sequence[dict[str, Any]], base_dir: Path | None, where: str
) -> list[dict[str, Any]]:
    """``messages`` with every media part that names a ``file`` carrying its bytes
    (see the module doc); messages without one come back as they are.

    Raises:
        PromptError: one line naming the file, line and part: a path that is empty,
            missing, unreadable, of an unknown type, over the size limit, or named where
            there is no prompts file (a bundled set, ``--prompt``).
    """
    out = []
    for i, message in enumerate(messages):
        content = message.get("content")
        if isinstance(content, list):
            parts = [
                _part(p, base_dir, f"{where}: messages[{i}].content[{j}]")
                for j, p in enumerate(content)
            ]
            if any(a is not b for a, b in zip(parts, content, strict=True)):
                message = {**message, "content": parts}
        out.append(message)
    return out


def media_weight(messages: Sequence[Any] | None) -> tuple[int, int]:
    """(media parts, bytes they add to the request body as compact JSON) of
    ``messages``: ``image_url``, ``input_audio`` and ``file`` parts."""
    parts = 0
    size = 0
    for message in messages or ():
        content = message.get("content") if isinstance(message, dict) else None
        for part in content if isinstance(content, list) else ():
            if isinstance(part, dict) and part.get("type") in MEDIA_PART_TYPES:
                parts += 1
                size += len(orjson.dumps(part))
    return parts, size
