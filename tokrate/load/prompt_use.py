"""Which prompts a run used and sent, said on the terminal and in run.json ``prompts``.

At the start a run prints where its prompts come from, per source
(:func:`source_text`): a user who names one file must see that nothing else is sent.
At the end :func:`with_sent` fills in, per source, how many of its prompts at least one
request sent, and why not all were; :func:`unsent_warnings` turns that into one warning
per prompt *file* (a bundled set or a generator sampled in part is the expected case of
a short run, recorded but not warned about).

Why prompts go unsent (tokrate.load.plan): every target walks the same seeded shuffle
of all the run's prompts, every level from its start, so a level of m requests per
target (warm-up included) sends the first m of that shuffle; with fewer requests than
prompts, which ones are sent is a seeded sample over all sources together.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Iterable, Sequence

from tokrate.inputs.prompt_base import Prompt
from tokrate.inputs.prompts import LoadedPrompts
from tokrate.load.plan import Plan
from tokrate.runfolder.prompt_sources import PromptSourceInfo

__all__ = ["implied_checks_text", "source_text", "unsent_warnings", "with_sent"]


def _default_task(source: PromptSourceInfo) -> str:
    """The task a source's prompts get when they name none."""
    if source.kind == "file":
        stem = source.name.replace("\\", "/").rsplit("/", 1)[-1]
        return stem.rsplit(".", 1)[0] if "." in stem else stem
    return source.name


def source_text(sources: Sequence[PromptSourceInfo]) -> str:
    """ "file support.jsonl 5; set chat 20 (tasks chat 18, qa 2)": every source with
    its prompt count, and its tasks where they are not just the file's or set's name."""
    parts = []
    for s in sources:
        part = f"{s.label} {s.prompts}"
        if s.tasks and s.tasks != ((_default_task(s), s.prompts),):
            part += f" ({s.tasks_text})"
        if s.cut_by_limit:
            part += f" (+{s.cut_by_limit} cut by limit)"
        parts.append(part)
    return "; ".join(parts)


def implied_checks_text(prompts: Iterable[Prompt]) -> str | None:
    """ "the answers to 3 prompts are checked on what ...": the checks nobody wrote
    (tokrate.inputs.request_body.implied_expect), said before the load so a quality
    table the user did not ask for is not a surprise; None when there are none."""
    by_field: dict[str, int] = {}
    for prompt in prompts:
        for expect in (prompt.expect, *(t.expect for t in prompt.turns)):
            if expect is not None and expect.implied_by is not None:
                by_field[expect.implied_by] = by_field.get(expect.implied_by, 0) + 1
    if not by_field:
        return None
    what = {"tool_choice": "a forced tool call", "response_format": "a JSON response_format"}
    parts = ", ".join(f"{n} {what.get(field, field)}" for field, n in sorted(by_field.items()))
    total = sum(by_field.values())
    whose = "1 prompt is" if total == 1 else f"{total} prompts are"
    return (
        f"the answers to {whose} checked on what the request body asks ({parts}):"
        ' no "expect" was written for them; "expect": false turns one off'
        ' (docs/quality.md "Checks a body implies")'
    )


def _why(plan: Plan, interrupted: bool, seed: int) -> str:
    """Why a source's prompts were not all sent (the module doc's rule)."""
    n = plan.n_prompts
    planned = [s.planned_per_target for s in plan.scenarios]
    if interrupted:
        return "the run was stopped before every prompt's turn came"
    if planned and all(m is not None for m in planned):
        most = max(m for m in planned if m is not None)
        if most < n:
            return (
                f"each level sends {most} requests per target, fewer than the {n} prompts of"
                f" all sources, and every level sends the same first {most} of one seeded"
                f" shuffle of them all (load.seed {seed}); requests = {n} sends each once"
            )
    if any(m is None for m in planned):
        return (
            f"the levels are bounded by time (duration_s) and ended before all {n} prompts"
            f" came up in their seeded shuffle (load.seed {seed})"
        )
    return "requests that were planned never started (see the errors and warnings)"


def with_sent(
    loaded: LoadedPrompts,
    sent_ids: Collection[str],
    plan: Plan,
    *,
    interrupted: bool,
    seed: int,
) -> tuple[PromptSourceInfo, ...]:
    """``loaded.sources`` with ``sent`` (prompts of each that a request sent, warm-up
    included) and, where not all were, ``not_sent_why``."""
    sent = [0] * len(loaded.sources)
    for prompt, i in zip(loaded.prompts, loaded.origin, strict=True):
        if prompt.id in sent_ids:
            sent[i] += 1
    out = []
    for source, n in zip(loaded.sources, sent, strict=True):
        why = _why(plan, interrupted, seed) if n < source.prompts else None
        out.append(dataclasses.replace(source, sent=n, not_sent_why=why))
    return tuple(out)


def unsent_warnings(sources: Sequence[PromptSourceInfo]) -> list[str]:
    """One line per prompt file whose prompts were not all sent, or that ``limit``
    cut: the file's prompts the user expects to see measured."""
    lines = []
    for s in sources:
        if s.kind != "file":
            continue
        if s.sent is not None and s.sent < s.prompts:
            lines.append(
                f"prompts: {s.sent} of the {s.prompts} prompts of {s.name} were sent:"
                f" {s.not_sent_why}"
            )
        if s.cut_by_limit:
            lines.append(
                f"prompts: [prompts] limit left out {s.cut_by_limit} of the"
                f" {s.prompts + s.cut_by_limit} prompts of {s.name}"
            )
    return lines
