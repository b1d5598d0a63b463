"""Whether the model a server names is the model asked for, and the context size a
server's error names: rules over the names and messages servers write, shared by the
pre-flight (:mod:`tokrate.client.preflight`: is the model served?) and the run's
record warnings (:mod:`tokrate.load.record_warnings`: did another model answer?).

Names differ in form, not in model: transformers serve ``<folder>@main``, llama.cpp
answers with the path to its ``.gguf``, OpenAI with a dated snapshot of the alias
asked for. Pure functions over strings.
"""

from __future__ import annotations

import functools
import re

__all__ = ["comparable_name", "context_size", "same_model"]

_REVISION = re.compile(r"@[\w.\-]+$")
_SNAPSHOT = re.compile(r"-(?:\d{4}-\d{2}-\d{2}|\d{8}|\d{4})$")
_CONTEXT_SIZE = re.compile(
    r"context (?:size|length|window)\D{0,24}?(\d{2,9})\s*tokens", re.IGNORECASE
)


def comparable_name(name: str) -> str:
    """The comparable form of a model name: no ``@revision`` (transformers serve), no
    folders (a path to a checkpoint or .gguf), no ``.gguf`` suffix, lower case."""
    key = _REVISION.sub("", name.strip())
    key = re.split(r"[/\\]", key)[-1]
    if key.lower().endswith(".gguf"):
        key = key[: -len(".gguf")]
    return key.lower()


# Asked once per record (the run's record warnings) with the same few names: cached.
@functools.lru_cache(maxsize=256)
def same_model(requested: str, answered: str) -> bool:
    """Whether ``answered`` (a response's ``model``) names the ``requested`` model: equal
    after :func:`comparable_name`, or ``requested`` plus a dated snapshot suffix
    (``gpt-4o`` answered as ``gpt-4o-2024-08-06``)."""
    want, got = comparable_name(requested), comparable_name(answered)
    return got == want or _SNAPSHOT.sub("", got) == want


def context_size(message: str | None) -> int | None:
    """The context size (tokens) a context-overflow message names, None when none."""
    found = _CONTEXT_SIZE.search(message or "")
    return int(found.group(1)) if found else None
