"""checks.json: the checks of a run's prompts, written before the load.

The run folder holds what every checked request's answer is judged by, so the checks
run after the load (and again from ``tokrate report`` or ``compare``) without the prompt
files: one entry per checked prompt (or session turn) with its ``expect`` object as
written (docs/quality.md), the prompt's content (a user check receives it), its task and
where it came from. Only runs with at least one ``expect`` have the file.

Layout 1::

    {"layout": 1, "checks": [{"prompt_id": "cls-001", "turn": null, "task":
      "classification", "source": "set:classification line 1", "expect": {"one_of":
      ["billing"]}, "prompt": {"messages": [...]} }, ...]}

``turn`` is null for a one-request prompt and the 1-based turn of a session.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from tokrate.errors import RunFolderError
from tokrate.runfolder.files import read_json
from tokrate.runfolder.jsondoc import from_json, to_json

__all__ = ["CHECKS_FILE", "CHECKS_LAYOUT", "CheckEntry", "checks_document", "read_checks"]

CHECKS_FILE: Final = "checks.json"
CHECKS_LAYOUT: Final = 1


@dataclass(frozen=True, slots=True)
class CheckEntry:
    """One checked prompt or session turn (module docstring)."""

    prompt_id: str
    turn: int | None
    task: str
    source: str
    expect: Mapping[str, Any]
    prompt: Mapping[str, Any] = field(default_factory=dict)

    @property
    def key(self) -> tuple[str, int | None]:
        """What a record matches it by: (prompt_id, turn)."""
        return (self.prompt_id, self.turn)


def checks_document(entries: Sequence[CheckEntry]) -> dict[str, Any]:
    """checks.json's content (written by :func:`tokrate.runfolder.store.write_checks`)."""
    return {"layout": CHECKS_LAYOUT, "checks": [to_json(e) for e in entries]}


def read_checks(run_dir: Path) -> tuple[CheckEntry, ...]:
    """The run's checks; empty when it has no checks.json. Raises RunFolderError (one
    line) for an unreadable file or an unknown layout."""
    path = run_dir / CHECKS_FILE
    data = read_json(path)
    if data is None:
        return ()
    if not isinstance(data, dict) or data.get("layout") != CHECKS_LAYOUT:
        raise RunFolderError(f"{path}: not a checks file of layout {CHECKS_LAYOUT}")
    checks = data.get("checks") or []
    if not isinstance(checks, list):
        raise RunFolderError(f"{path}: checks must be a list of objects")
    return tuple(from_json(CheckEntry, raw, f"{path}: checks[{i}]") for i, raw in enumerate(checks))
