"""The bundled prompt sets: the ``*.jsonl`` files of the repository's top-level ``prompts/``.

An installed wheel carries them as ``tokrate/prompts/`` (pyproject.toml maps the folder
into the package); a source checkout installed in editable mode reads the checkout's
``prompts/`` directly, so a set added there is usable at once. Config validation (which
names exist) and prompt loading (their text) both read them here, so neither imports
the other.
"""

from __future__ import annotations

import importlib.resources
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Final

from tokrate.errors import PromptError

__all__ = ["NAMED_ONLY_SETS", "SHIPPED_SETS", "bundled_set_bytes", "bundled_sets"]

#: The sets a run with no prompt source of its own uses. A file someone adds to a
#: checkout's prompts/ is a set too, usable by name, but never sent unless named.
SHIPPED_SETS: Final = ("chat", "classification", "code", "extraction", "summarization")
#: Sets tokrate ships but sends only when named (``[prompts] sets``, ``--set``): their
#: requests carry tools or a JSON schema, which a server without tool or
#: structured-output support refuses, so a default run never sends them.
NAMED_ONLY_SETS: Final = ("structured", "tools")


def _root() -> Traversable:
    installed = importlib.resources.files("tokrate") / "prompts"
    if installed.is_dir():
        return installed
    # An editable install imports tokrate/ from the checkout, beside prompts/.
    checkout = Path(__file__).resolve().parents[2] / "prompts"
    if checkout.is_dir():
        return checkout
    raise PromptError(
        "the bundled prompt sets are missing from this installation"
        f" (looked in {installed} and {checkout}); reinstall tokrate"
    )


def bundled_sets() -> tuple[str, ...]:
    """Names of the bundled prompt sets, sorted (``chat``, ``classification``, ...)."""
    return tuple(
        sorted(p.name[: -len(".jsonl")] for p in _root().iterdir() if p.name.endswith(".jsonl"))
    )


def bundled_set_bytes(name: str) -> bytes:
    """The JSONL bytes of one bundled set (the name must be one of :func:`bundled_sets`)."""
    return (_root() / f"{name}.jsonl").read_bytes()
