"""Exact token counts from a tokenizer the user has on disk, for servers that send no usage.

Without usage a record's ``output_tokens`` is a chunk count, and chunks are not tokens
(a real server merged 64 tokens into 59 chunks); input lengths are ceil(bytes / 4).
``[[model]] tokenizer`` names either a Hugging Face ``tokenizer.json`` file (read with
the ``tokenizers`` library) or ``tiktoken:ENCODING`` (an encoding tiktoken already has in
its cache): then the answer text is counted (``tokens_source = "tokenizer"``) and the
prompts' input lengths are counted the same way.

Nothing is ever downloaded: a tiktoken encoding that is not in the cache is a
ConfigError naming the folder it looked in. Both libraries are optional (the
``tokenizer`` extra); a missing one is a ConfigError that says how to install it.

What is counted: the text's own tokens, no special tokens. A chat prompt counts its
messages' content plus nothing for the chat template (the template lives outside
``tokenizer.json``), so a chat input count is a few tokens short of the server's, the
same few for every prompt of a model.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import os
import re
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from tokrate.errors import ConfigError
from tokrate.spec.types import TIKTOKEN_PREFIX

if TYPE_CHECKING:
    from tokrate.spec.types import ModelSpec

__all__ = [
    "TokenCounter",
    "cached_counter",
    "check_tokenizers",
    "load_counter",
    "tiktoken_cache_dir",
]

_INSTALL_HINT = "pip install 'tokrate[tokenizer]'"


class TokenCounter(Protocol):
    """Counts tokens of text as one model's tokenizer does."""

    @property
    def name(self) -> str:
        """What run.json records for this counter (a file name or an encoding)."""
        ...

    def count(self, text: str) -> int:
        """Tokens in ``text`` (no special tokens added)."""
        ...


@dataclass(frozen=True, slots=True)
class _HFCounter:
    name: str
    tokenizer: Any

    def count(self, text: str) -> int:
        if not text:
            return 0
        return len(self.tokenizer.encode(text, add_special_tokens=False).ids)


@dataclass(frozen=True, slots=True)
class _TiktokenCounter:
    name: str
    encoding: Any

    def count(self, text: str) -> int:
        # Special-token text in a user's prompt is counted as ordinary text, as the
        # provider's own tokenizer does for user content.
        return len(self.encoding.encode(text, disallowed_special=()))


def tiktoken_cache_dir() -> Path:
    """Where tiktoken keeps downloaded encodings (its documented environment variables,
    then its default under the temporary folder)."""
    for var in ("TIKTOKEN_CACHE_DIR", "DATA_GYM_CACHE_DIR"):
        value = os.environ.get(var)
        if value:
            return Path(value)
    return Path(tempfile.gettempdir()) / "data-gym-cache"


def _load_tiktoken(encoding_name: str, where: str) -> TokenCounter:
    try:
        import tiktoken
        import tiktoken.registry
    except ImportError:
        raise ConfigError(
            f"{where}: tokenizer 'tiktoken:...' needs tiktoken ({_INSTALL_HINT})"
        ) from None
    try:
        constructor = tiktoken.registry.ENCODING_CONSTRUCTORS
        if constructor is None:
            tiktoken.registry._find_constructors()  # fills tiktoken's registry
            constructor = tiktoken.registry.ENCODING_CONSTRUCTORS or {}
        make = constructor.get(encoding_name)
    except Exception:  # a broken encoding plugin: one line
        make = None
    if make is None:
        known = ", ".join(sorted(tiktoken.list_encoding_names()))
        raise ConfigError(f"{where}: unknown tiktoken encoding {encoding_name!r} (known: {known})")
    # tiktoken downloads a missing encoding; tokrate never does: every file the
    # encoding needs must already be in the cache.
    cache = tiktoken_cache_dir()
    for url in _encoding_urls(make):
        cached = cache / hashlib.sha1(url.encode()).hexdigest()  # tiktoken's cache key
        if not cached.is_file():
            raise ConfigError(
                f"{where}: tiktoken encoding {encoding_name!r} is not in the cache ({cache}); "
                "tokrate never downloads: load it once where there is network, or set "
                "TIKTOKEN_CACHE_DIR"
            )
    return _TiktokenCounter(
        name=TIKTOKEN_PREFIX + encoding_name, encoding=tiktoken.get_encoding(encoding_name)
    )


def _encoding_urls(constructor: Any) -> list[str]:
    # Calling the constructor would fetch what is missing, so the files it reads are
    # taken from its source: tiktoken's own encodings name their URLs as literals.
    try:
        source = inspect.getsource(constructor)
    except (OSError, TypeError):
        return []
    return re.findall(r"[\"'](https?://[^\"']+)[\"']", source)


def _load_hf(path: Path, where: str) -> TokenCounter:
    if not path.is_file():
        raise ConfigError(f"{where}: tokenizer file {str(path)!r} not found")
    try:
        from tokenizers import Tokenizer
    except ImportError:
        raise ConfigError(
            f"{where}: a tokenizer.json needs the tokenizers library ({_INSTALL_HINT})"
        ) from None
    try:
        tokenizer = Tokenizer.from_file(str(path))
    except Exception as exc:  # the library raises many kinds
        first = " ".join(str(exc).split())[:160]
        raise ConfigError(f"{where}: {str(path)!r} is not a tokenizer.json: {first}") from None
    return _HFCounter(name=path.name, tokenizer=tokenizer)


def load_counter(
    spec: str, *, base_dir: Path | None = None, where: str = "tokenizer"
) -> TokenCounter:
    """The counter ``spec`` names: ``tiktoken:ENCODING`` or a path to a tokenizer.json
    (relative paths from ``base_dir``, the config file's folder).

    Raises:
        ConfigError: the library is missing, the file is absent or not a tokenizer, or
            the encoding is unknown or not cached. One line naming ``where``.
    """
    if spec.startswith(TIKTOKEN_PREFIX):
        return _load_tiktoken(spec[len(TIKTOKEN_PREFIX) :], where)
    path = Path(spec).expanduser()
    if not path.is_absolute() and base_dir is not None:
        path = base_dir / path
    return _load_hf(path, where)


def check_tokenizers(models: Sequence[ModelSpec], where: str) -> None:
    """Load every model's ``tokenizer`` once, so a missing file or library is a
    ConfigError naming ``where`` and the model's key before any load (the spec made
    the paths absolute; workers load the same files again by those paths)."""
    for i, model in enumerate(models):
        if model.tokenizer is not None:
            load_counter(model.tokenizer, where=f"{where}: key 'model[{i}].tokenizer'")


@functools.lru_cache(maxsize=32)
def cached_counter(spec: str) -> TokenCounter:
    """:func:`load_counter` of an absolute ``spec``, loaded once per process (each
    worker process loads the tokenizer on its first request of that model)."""
    return load_counter(spec)
