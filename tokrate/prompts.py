"""Prompts: user files, bundled sets, synthetic lengths.

:func:`load_prompts` resolves a :class:`~tokrate.spec.PromptsSpec` into a tuple of
frozen :class:`Prompt`. Sources, in this order:

- ``paths``: JSONL files (``.jsonl``/``.json``; one object per line with ``messages``
  or ``prompt``, optional ``id``, ``task``, ``max_tokens``; other keys are ignored),
  plain-text files (``.txt``/``.md``/``.prompt``; every blank-line-separated block is
  one prompt, or the whole file with ``text_split = "file"``), or a folder of them
  (recursively, sorted by path).
- ``sets``: bundled sets by name (``chat``, ``classification``, ``code``,
  ``extraction``, ``summarization``), shipped as package data in tokrate/data/prompts/.
- ``synthetic``: seeded generated text with target input/output lengths.

With no paths, sets or synthetic, every bundled set is used. ``max_tokens`` (when set)
replaces every prompt's own; ``limit`` keeps the first N prompts.

Token estimate: ``input_tokens_est`` is exactly what the simulator counts for the
prompt sent through the chat API (``tokrate.physics.count_chat_tokens``: per message
4 template tokens + ceil(UTF-8 bytes / 4) of its content, plus 2 reply-priming
tokens; a plain ``prompt`` is sent as one user message). :func:`estimate_input_tokens`
gives the completions-API figure too (ceil(bytes / 4) of the flattened text, at least
1). Real tokenizers differ by model; the server's ``usage`` remains the measured truth.

Errors are :class:`~tokrate.errors.PromptError`, one line naming the file and line.
"""

from __future__ import annotations

import json
import math
import random
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from tokrate.bundled import bundled_set_bytes, bundled_sets
from tokrate.errors import PromptError
from tokrate.fileio import path_exists, path_is_dir
from tokrate.physics import count_chat_tokens, count_text_tokens
from tokrate.spec import PromptsSpec, SyntheticSpec

__all__ = [
    "JSONL_SUFFIXES",
    "TEXT_SUFFIXES",
    "Prompt",
    "bundled_sets",
    "estimate_input_tokens",
    "estimate_tokens",
    "load_prompts",
    "parse_jsonl",
    "parse_text",
    "prompt_text",
    "synthetic_prompts",
]

JSONL_SUFFIXES: Final = (".jsonl", ".json")
TEXT_SUFFIXES: Final = (".txt", ".md", ".prompt")
_ROLES: Final = ("system", "user", "assistant", "developer", "tool")


@dataclass(frozen=True, slots=True)
class Prompt:
    """One prompt. Exactly one of ``messages`` (chat messages, each a dict with
    ``role`` and ``content``) and ``prompt`` (plain text) is set. ``max_tokens`` is the
    output cap this prompt asks for (None: the server's default); ``input_tokens_est``
    is :func:`estimate_tokens` of :func:`prompt_text`; ``source`` is "FILE:LINE",
    "set:NAME:LINE" or "synthetic:N"."""

    id: str
    task: str
    messages: tuple[dict[str, Any], ...] | None
    prompt: str | None
    max_tokens: int | None
    input_tokens_est: int
    source: str


#: Tokens the simulator's chat template adds to a one-message prompt (4 around the
#: message, 2 priming the reply); synthetic text is shortened by this much so the chat
#: estimate equals the requested length.
_ONE_MESSAGE_OVERHEAD: Final = 6


def estimate_tokens(text: str) -> int:
    """ceil(UTF-8 bytes / 4): the simulator's deterministic text approximation
    (``tokrate.physics.count_text_tokens``)."""

    return count_text_tokens(text)


def estimate_input_tokens(
    messages: Sequence[Any] | None, prompt: str | None, api: str = "chat"
) -> int:
    """Input tokens the simulator counts for this prompt sent through ``api``.

    chat: ``count_chat_tokens`` of the messages (a plain prompt becomes one user
    message); completions: ceil(bytes / 4) of :func:`prompt_text`, at least 1.
    """
    if api == "completions":
        return max(1, estimate_tokens(prompt_text(messages, prompt)))

    msgs = messages if messages is not None else ({"role": "user", "content": prompt or ""},)
    return count_chat_tokens(m if isinstance(m, dict) else {} for m in msgs)


def prompt_text(messages: Sequence[Any] | None, prompt: str | None) -> str:
    """The text a server tokenizes: ``prompt``, or message contents (text parts of a
    content list) joined by a blank line."""
    if prompt is not None:
        return prompt
    parts = []
    for m in messages or ():
        content = m.get("content") if isinstance(m, dict) else None
        if isinstance(content, list):
            content = " ".join(
                str(p.get("text", "")) for p in content if isinstance(p, dict) and p.get("text")
            )
        parts.append(str(content or ""))
    return "\n\n".join(parts)


def _make(
    *,
    id: str,
    task: str,
    messages: Sequence[dict[str, Any]] | None,
    prompt: str | None,
    max_tokens: int | None,
    source: str,
) -> Prompt:
    msgs = tuple(messages) if messages is not None else None
    return Prompt(
        id=id,
        task=task,
        messages=msgs,
        prompt=prompt,
        max_tokens=max_tokens,
        input_tokens_est=estimate_input_tokens(msgs, prompt),
        source=source,
    )


# --- parsing ------------------------------------------------------------------------


def _decode(data: bytes, where: str) -> str:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        line = data[: err.start].count(b"\n") + 1
        raise PromptError(
            f"{where} line {line}: not valid UTF-8 (byte 0x{data[err.start]:02x} at "
            f"offset {err.start}); save the file as UTF-8"
        ) from None
    return text.removeprefix("\ufeff")  # a BOM is harmless; drop it


def _check_messages(value: object, where: str) -> list[dict[str, Any]]:
    if not isinstance(value, list) or not value:
        raise PromptError(f"{where}: 'messages' must be a non-empty list of objects")
    out = []
    for i, m in enumerate(value):
        if not isinstance(m, dict):
            raise PromptError(f"{where}: messages[{i}] must be an object with role and content")
        role = m.get("role")
        if role not in _ROLES:
            raise PromptError(
                f"{where}: messages[{i}].role must be one of {', '.join(_ROLES)}, got {role!r}"
            )
        content = m.get("content")
        if not isinstance(content, str | list):
            raise PromptError(f"{where}: messages[{i}].content must be a string or a list")
        out.append(dict(m))
    return out


def _parse_line(obj: object, where: str, default_id: str, default_task: str) -> Prompt:
    if not isinstance(obj, dict):
        raise PromptError(f"{where}: expected a JSON object, got {type(obj).__name__}")
    has_messages = "messages" in obj
    has_prompt = "prompt" in obj
    if has_messages == has_prompt:
        what = "both" if has_messages else "neither"
        raise PromptError(f"{where}: needs exactly one of 'messages' or 'prompt' (has {what})")
    messages = _check_messages(obj["messages"], where) if has_messages else None
    prompt = obj.get("prompt")
    if has_prompt and (not isinstance(prompt, str) or not prompt.strip()):
        raise PromptError(f"{where}: 'prompt' must be a non-empty string")
    pid = obj.get("id", default_id)
    if isinstance(pid, bool) or not isinstance(pid, str | int) or not str(pid).strip():
        raise PromptError(f"{where}: 'id' must be a non-empty string or an integer")
    task = obj.get("task", default_task)
    if not isinstance(task, str) or not task.strip():
        raise PromptError(f"{where}: 'task' must be a non-empty string")
    max_tokens = obj.get("max_tokens")
    if max_tokens is not None and (
        isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1
    ):
        raise PromptError(f"{where}: 'max_tokens' must be a positive integer, got {max_tokens!r}")
    return _make(
        id=str(pid),
        task=task,
        messages=messages,
        prompt=prompt if has_prompt else None,
        max_tokens=max_tokens,
        source=where,
    )


def parse_jsonl(data: bytes, name: str, *, default_task: str | None = None) -> list[Prompt]:
    """Prompts from JSONL bytes; ``name`` labels errors and sources ("FILE line N").

    Blank lines are skipped. Default id: "<stem>:<line>"; default task: the file stem.

    Raises:
        PromptError: not UTF-8, bad JSON, a line that is not a prompt, or no prompts.
    """
    text = _decode(data, name)
    stem = Path(name).stem
    task = default_task or stem
    out = []
    # Split on "\n" only: str.splitlines() would also break on U+2028 and other
    # separators that are legal, unescaped, inside JSON strings.
    for n, raw_line in enumerate(text.split("\n"), start=1):
        line = raw_line.removesuffix("\r")
        if not line.strip():
            continue
        where = f"{name} line {n}"
        try:
            obj = json.loads(line)
        except (json.JSONDecodeError, RecursionError) as err:
            msg = err.msg if isinstance(err, json.JSONDecodeError) else "nested too deeply"
            raise PromptError(f"{where}: invalid JSON ({msg})") from None
        out.append(_parse_line(obj, where, f"{stem}:{n}", task))
    if not out:
        raise PromptError(f"{name}: empty (no prompts)")
    return out


def parse_text(
    data: bytes, name: str, *, split: str = "blocks", default_task: str | None = None
) -> list[Prompt]:
    """Prompts from a plain-text file: each blank-line-separated block (``split =
    "blocks"``) or the whole file (``"file"``) is one user prompt (sent as a single
    user message). Ids: "<stem>:<first line of the block>".

    Raises:
        PromptError: not UTF-8, or no text at all.
    """
    text = _decode(data, name).replace("\r\n", "\n")
    stem = Path(name).stem
    task = default_task or stem
    blocks: list[tuple[int, str]] = []
    if split == "file":
        if text.strip():
            first = next(i for i, ln in enumerate(text.split("\n"), 1) if ln.strip())
            blocks.append((first, text.strip()))
    else:
        start, lines = 0, list[str]()
        for n, line in enumerate([*text.split("\n"), ""], start=1):
            if line.strip():
                if not lines:
                    start = n
                lines.append(line)
            elif lines:
                blocks.append((start, "\n".join(lines).strip()))
                lines = []
    if not blocks:
        raise PromptError(f"{name}: empty (no prompts)")
    return [
        _make(
            id=f"{stem}:{line}",
            task=task,
            messages=({"role": "user", "content": body},),
            prompt=None,
            max_tokens=None,
            source=f"{name} line {line}",
        )
        for line, body in blocks
    ]


# --- bundled sets -------------------------------------------------------------------


def _load_set(name: str) -> list[Prompt]:
    if name not in bundled_sets():
        known = ", ".join(bundled_sets())
        raise PromptError(f"no bundled prompt set {name!r} (known: {known})")
    data = bundled_set_bytes(name)
    prompts = parse_jsonl(data, f"set:{name}", default_task=name)
    return prompts


# --- files --------------------------------------------------------------------------


def _files_under(folder: Path) -> list[Path]:
    suffixes = (*JSONL_SUFFIXES, *TEXT_SUFFIXES)
    return sorted(
        p
        for p in folder.rglob("*")
        if p.is_file() and p.suffix.lower() in suffixes and not p.name.startswith(".")
    )


def _load_file(path: Path, label: str, split: str) -> list[Prompt]:
    try:
        data = path.read_bytes()
    except OSError as err:
        raise PromptError(f"{label}: cannot read ({err.strerror})") from None
    suffix = path.suffix.lower()
    if suffix in JSONL_SUFFIXES:
        return parse_jsonl(data, label)
    if suffix in TEXT_SUFFIXES:
        return parse_text(data, label, split=split)
    known = ", ".join((*JSONL_SUFFIXES, *TEXT_SUFFIXES))
    raise PromptError(f"{label}: unknown prompt file type {suffix or '(none)'!r} (use {known})")


def _load_path(raw: str, base_dir: Path, split: str) -> list[Prompt]:
    path = Path(raw).expanduser()
    if not path.is_absolute():
        path = base_dir / path
    if path_is_dir(path):
        files = _files_under(path)
        if not files:
            raise PromptError(f"{raw}: folder has no prompt files (.jsonl, .txt, .md)")
        out: list[Prompt] = []
        for f in files:
            out.extend(_load_file(f, str(Path(raw) / f.relative_to(path)), split))
        return out
    if not path_exists(path):
        raise PromptError(f"{raw}: prompt file not found (looked in {path.parent})")
    return _load_file(path, raw, split)


# --- synthetic ----------------------------------------------------------------------

# Words for synthetic text: varied vocabulary so caches and compressors see natural-ish
# text, not one repeated token.
_WORDS_TEXT: Final = """
    the a of to and in that is for on with as by at from this an be it are was or
    system network latency request server client model token stream queue batch cache
    memory bandwidth kernel thread process scheduler buffer packet route region cluster
    node replica shard index query table column record file folder report chart metric
    signal budget window sample window measure compare release version update patch
    engineer team customer partner vendor product service market quarter forecast
    river mountain forest harbor village garden bridge tower valley island desert coast
    morning evening season winter summer autumn spring weather storm cloud rain light
    quick careful steady bright quiet heavy gentle rapid narrow broad distant local
    build check explain describe summarize estimate improve reduce increase balance
    choose follow deliver observe record review prepare measure design consider detail
    because although while after before during unless until whether however therefore
"""
_WORDS: Final = tuple(_WORDS_TEXT.split())
_TOPICS: Final = (
    "a distributed storage system",
    "a small coastal town",
    "a quarterly planning meeting",
    "a mountain railway",
    "a customer support queue",
    "a compiler optimisation",
    "a community garden",
    "an inventory forecast",
)


def _sentence(rng: random.Random) -> str:
    n = rng.randint(6, 16)
    words = [rng.choice(_WORDS) for _ in range(n)]
    words[0] = words[0].capitalize()
    return " ".join(words) + rng.choice(".....?;")


def _text_of_tokens(tokens: int, rng: random.Random) -> str:
    """ASCII text of exactly 4 x ``tokens`` bytes (estimate_tokens == tokens)."""
    target = 4 * tokens
    head = f"Write about {rng.choice(_TOPICS)}. Context: "
    parts = [head]
    size = len(head)
    while size < target:
        s = _sentence(rng) + " "
        parts.append(s)
        size += len(s)
    text = "".join(parts)[:target]
    return text.rstrip() + "." * (target - len(text.rstrip()))


def _draw_length(rng: random.Random, mean: int, stddev: float, dist: str) -> int:
    if stddev <= 0:
        return mean
    if dist == "uniform":
        half = stddev * math.sqrt(3.0)
        value = rng.uniform(mean - half, mean + half)
    elif dist == "lognormal":
        # Parameters of the underlying normal so the lognormal has this mean and stddev.
        sigma2 = math.log1p((stddev / mean) ** 2)
        value = rng.lognormvariate(math.log(mean) - sigma2 / 2, math.sqrt(sigma2))
    else:
        value = rng.gauss(mean, stddev)
    return max(1, round(value))


def synthetic_prompts(spec: SyntheticSpec) -> list[Prompt]:
    """``spec.count`` seeded prompts: input lengths (``input_tokens_est``, exact, at
    least 7 = the chat template's 6 plus one text token) and output caps
    (``max_tokens``) drawn from ``spec.distribution`` around the means. Pure: the same
    spec gives the same prompts."""
    rng = random.Random(spec.seed)
    out = []
    for i in range(spec.count):
        n_in = _draw_length(rng, spec.input_tokens, spec.input_stddev, spec.distribution)
        n_out = _draw_length(rng, spec.output_tokens, spec.output_stddev, spec.distribution)
        # The chat template adds a fixed overhead; the text carries the rest, so the
        # prompt's estimate is exactly n_in (or the 7-token minimum).
        text = _text_of_tokens(max(1, n_in - _ONE_MESSAGE_OVERHEAD), rng)
        out.append(
            _make(
                id=f"synthetic-{i:04d}",
                task=spec.task,
                messages=({"role": "user", "content": text},),
                prompt=None,
                max_tokens=n_out,
                source=f"synthetic:{i}",
            )
        )
    return out


# --- the one entry point ------------------------------------------------------------


def _dedupe(prompts: Iterable[Prompt]) -> Iterator[Prompt]:
    seen: dict[str, str] = {}
    for p in prompts:
        if p.id in seen:
            raise PromptError(
                f"{p.source}: duplicate prompt id {p.id!r} (first at {seen[p.id]}); "
                "ids must be unique across all prompt sources"
            )
        seen[p.id] = p.source
        yield p


def load_prompts(spec: PromptsSpec, *, base_dir: Path | str = ".") -> tuple[Prompt, ...]:
    """Resolve ``spec`` into prompts (see the module docstring for sources and order).

    ``base_dir``: where relative paths are read from (``tokrate.spec.prompts_base_dir``
    gives the config file's folder).

    Raises:
        PromptError: one line naming the file (and line) at fault: missing file,
            unknown suffix, empty file, not UTF-8, bad JSON, missing messages/prompt,
            an unknown bundled set, or duplicate ids.
    """
    base = Path(base_dir)
    collected: list[Prompt] = []
    for raw in spec.paths:
        collected.extend(_load_path(raw, base, spec.text_split))
    sets = spec.sets
    if not spec.paths and not sets and spec.synthetic is None:
        sets = bundled_sets()
    for name in sets:
        collected.extend(_load_set(name))
    if spec.synthetic is not None:
        collected.extend(synthetic_prompts(spec.synthetic))
    prompts = list(_dedupe(collected))
    if spec.limit is not None:
        prompts = prompts[: spec.limit]
    if spec.max_tokens is not None:
        from dataclasses import replace

        prompts = [replace(p, max_tokens=spec.max_tokens) for p in prompts]
    if not prompts:
        raise PromptError("no prompts: the configured sources are empty")
    return tuple(prompts)
