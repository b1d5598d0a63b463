"""Generated workloads: multi-turn sessions, length grids, shared-prefix prompts.

Every length here is in tokens as the simulator counts them (``tokrate.physics``: a
chat message costs 4 template tokens plus ceil(UTF-8 bytes / 4) of its content, a
chat prompt 2 more priming the reply), and the text is ASCII of exactly 4 bytes per
token (:func:`tokrate.inputs.prompt_base.text_of_tokens`), so a requested length is the
server's count exactly, not approximately. ``reserve_tokens`` is what the request
adds in front of the first user message (the cache-busting tag of ``[client]
unique_prompts``: :data:`UNIQUE_TAG_TOKENS`); grid prompts leave room for it so the
prompt that reaches the server has the requested length.

Pure and seeded: the same spec gives the same prompts.
"""

from __future__ import annotations

import random
from typing import Final

from tokrate.errors import PromptError
from tokrate.inputs.prompt_base import (
    ONE_MESSAGE_OVERHEAD,
    Prompt,
    Turn,
    make_prompt,
    text_of_tokens,
)
from tokrate.physics import CHAT_MESSAGE_OVERHEAD_TOKENS
from tokrate.spec.types import GridSpec, SessionsSpec, SharedPrefixSpec

__all__ = [
    "SHARED_TASK",
    "UNIQUE_TAG_TOKENS",
    "UNSHARED_TASK",
    "grid_prompts",
    "session_prompts",
    "shared_prefix_prompts",
]

#: Tokens the cache-busting tag adds: "[ref:" + 12 hex digits + "] " is 19 bytes, so
#: in front of text of a multiple of 4 bytes it adds exactly 5 (ceil(19 / 4)).
UNIQUE_TAG_TOKENS: Final = 5
SHARED_TASK: Final = "shared-prefix"
UNSHARED_TASK: Final = "unique-prefix"
#: A prefix's first 12 bytes name it, so no two control prefixes share even a block.
_LABEL_BYTES: Final = 12


def _user(tokens: int, rng: random.Random) -> dict[str, str]:
    return {"role": "user", "content": text_of_tokens(tokens, rng)}


def session_prompts(spec: SessionsSpec) -> list[Prompt]:
    """``spec.count`` sessions of ``spec.turns`` turns. The first turn's prompt is
    ``input_tokens`` (plus the system prompt when ``system_tokens`` is set); every
    later user message is ``input_tokens`` long with its template."""
    rng = random.Random(spec.seed)
    need = ONE_MESSAGE_OVERHEAD + 1
    if spec.input_tokens < need:
        raise PromptError(f"[prompts] sessions.input_tokens must be >= {need}")
    if spec.system_tokens and spec.system_tokens <= CHAT_MESSAGE_OVERHEAD_TOKENS:
        raise PromptError(
            f"[prompts] sessions.system_tokens must be 0 or > {CHAT_MESSAGE_OVERHEAD_TOKENS}"
        )
    out = []
    for i in range(spec.count):
        messages = []
        if spec.system_tokens:
            body = text_of_tokens(spec.system_tokens - CHAT_MESSAGE_OVERHEAD_TOKENS, rng)
            messages.append({"role": "system", "content": body})
        messages.append(_user(spec.input_tokens - ONE_MESSAGE_OVERHEAD, rng))
        follow = spec.input_tokens - CHAT_MESSAGE_OVERHEAD_TOKENS
        turns = [
            Turn(text_of_tokens(follow, rng), spec.output_tokens) for _ in range(spec.turns - 1)
        ]
        out.append(
            make_prompt(
                id=f"session-{i:04d}",
                task=spec.task,
                messages=messages,
                prompt=None,
                max_tokens=spec.output_tokens,
                source=f"sessions:{i}",
                turns=turns,
                think_time_s=spec.think_time_s,
                # A session is one conversation: its tag is fixed for all its turns, so
                # the server may cache the growing history (and nothing across sessions).
                shared_messages=0,
            )
        )
    return out


def grid_prompts(spec: GridSpec, *, reserve_tokens: int = 0) -> list[Prompt]:
    """``spec.count`` prompts per (input, output) cell, in cell order; each one user
    message of exactly ``input_tokens`` (with ``reserve_tokens`` of it left for the
    request's tag) asking for exactly ``output_tokens`` (``exact_output``)."""
    rng = random.Random(spec.seed)
    out = []
    need = ONE_MESSAGE_OVERHEAD + reserve_tokens + 1
    for n_in in spec.input_tokens:
        if n_in < need:
            raise PromptError(
                f"[prompts] grid.input_tokens: {n_in} is below the {need} tokens a chat "
                "prompt needs (template, cache-busting tag, one token of text)"
            )
        for n_out in spec.output_tokens:
            task = f"grid-in{n_in}-out{n_out}"
            for j in range(spec.count):
                out.append(
                    make_prompt(
                        id=f"{task}-{j:03d}",
                        task=task,
                        messages=[_user(n_in - ONE_MESSAGE_OVERHEAD - reserve_tokens, rng)],
                        prompt=None,
                        max_tokens=n_out,
                        source=f"grid:{task}:{j}",
                        exact_output=True,
                    )
                )
    return out


def _labelled(label: str, tokens: int, rng: random.Random) -> str:
    text = text_of_tokens(tokens, rng)
    tag = f"[{label}]".ljust(_LABEL_BYTES, "-")[:_LABEL_BYTES]
    return tag + text[_LABEL_BYTES:] if len(text) > _LABEL_BYTES else text


def shared_prefix_prompts(spec: SharedPrefixSpec) -> list[Prompt]:
    """``spec.count`` prompts of task "shared-prefix" (one system prefix of
    ``prefix_tokens`` shared by all, then a question of ``input_tokens``) and as many
    of task "unique-prefix" (the same lengths, every prefix its own). The unique tag
    goes after the prefix (``shared_messages = 1``) in both, so only sharing differs.
    Each prompt is ``prefix_tokens + input_tokens`` long."""
    if spec.prefix_tokens <= CHAT_MESSAGE_OVERHEAD_TOKENS + _LABEL_BYTES // 4:
        raise PromptError(
            f"[prompts] shared_prefix.prefix_tokens must be > "
            f"{CHAT_MESSAGE_OVERHEAD_TOKENS + _LABEL_BYTES // 4}"
        )
    need = ONE_MESSAGE_OVERHEAD + 1
    if spec.input_tokens < need:
        raise PromptError(f"[prompts] shared_prefix.input_tokens must be >= {need}")
    rng = random.Random(spec.seed)
    prefix_body = spec.prefix_tokens - CHAT_MESSAGE_OVERHEAD_TOKENS
    # The question is the prompt's last message: its template, its text, the priming.
    question = spec.input_tokens - ONE_MESSAGE_OVERHEAD
    shared = _labelled("shared", prefix_body, rng)
    out = []
    for task in (SHARED_TASK, UNSHARED_TASK):
        for i in range(spec.count):
            system = shared if task == SHARED_TASK else _labelled(f"ctx{i:07d}", prefix_body, rng)
            messages = [{"role": "system", "content": system}, _user(question, rng)]
            out.append(
                make_prompt(
                    id=f"{task}-{i:04d}",
                    task=task,
                    messages=messages,
                    prompt=None,
                    max_tokens=spec.output_tokens,
                    source=f"shared_prefix:{task}:{i}",
                    shared_messages=1,
                )
            )
    return out
