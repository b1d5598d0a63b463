"""The bundled prompt sets, shipped once as package data (tokrate/data/prompts/*.jsonl).

Config validation (which names exist) and prompt loading (their text) both read them
here, so neither imports the other.
"""

from __future__ import annotations

import importlib.resources
from importlib.resources.abc import Traversable

__all__ = ["bundled_set_bytes", "bundled_sets"]


def _root() -> Traversable:
    return importlib.resources.files("tokrate") / "data" / "prompts"


def bundled_sets() -> tuple[str, ...]:
    """Names of the bundled prompt sets, sorted (``chat``, ``classification``, ...)."""
    return tuple(
        sorted(p.name[: -len(".jsonl")] for p in _root().iterdir() if p.name.endswith(".jsonl"))
    )


def bundled_set_bytes(name: str) -> bytes:
    """The JSONL bytes of one bundled set (the name must be one of :func:`bundled_sets`)."""
    return (_root() / f"{name}.jsonl").read_bytes()
