"""run.json ``prompts``: where a run's prompts came from, one entry per source.

A source is one prompt file (a folder counts file by file), one bundled set, or one
generator (``synthetic``, ``sessions``, ``grid``, ``shared_prefix``). Each entry says
how many of its prompts the run used (after ``[prompts] limit``), their tasks, and, at
the end of the run, how many of them were sent at least once and, when not all were,
why. Written at the start with ``sent`` null; the end of the run fills it in.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal

__all__ = ["SOURCE_KINDS", "PromptSourceInfo", "SourceKind"]

SourceKind = Literal["file", "set", "generated"]
SOURCE_KINDS: Final = ("file", "set", "generated")


@dataclass(frozen=True, slots=True)
class PromptSourceInfo:
    """One source of prompts.

    ``name``: the file as the config or ``--prompts`` named it (a file inside a named
    folder: folder/file), the set's name, or the generator's table name.
    ``prompts``: its prompts the run used; ``cut_by_limit``: its prompts that
    ``[prompts] limit`` left out. ``tasks``: (task, prompts) pairs, most first.
    ``sent``: its prompts that at least one request sent (None until the run ends);
    ``not_sent_why``: one line when ``sent < prompts``.
    """

    kind: SourceKind
    name: str
    prompts: int
    tasks: tuple[tuple[str, int], ...] = ()
    cut_by_limit: int = 0
    sent: int | None = None
    not_sent_why: str | None = None

    @property
    def label(self) -> str:
        """How lines name it: "file support.jsonl", "set chat", "synthetic prompts"."""
        if self.kind == "generated":
            return f"{self.name} prompts"
        return f"{self.kind} {self.name}"

    @property
    def tasks_text(self) -> str:
        """``task chat`` or ``tasks qa 3, summary 2``."""
        if len(self.tasks) == 1:
            return f"task {self.tasks[0][0]}"
        return "tasks " + ", ".join(f"{task} {n}" for task, n in self.tasks)
