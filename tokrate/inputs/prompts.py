"""Prompts: user files, bundled sets, synthetic lengths.

:func:`load_prompts` resolves a :class:`~tokrate.spec.types.PromptsSpec` into a tuple of
frozen :class:`Prompt`. Sources, in this order:

- ``paths``: JSONL files (``.jsonl``/``.json``; one object per line with ``messages``
  or ``prompt``, optional ``id``, ``task``, ``max_tokens``, ``expect`` (what a right
  answer looks like: :mod:`tokrate.spec.expect`; without one, the check the ``body``
  implies, :func:`tokrate.inputs.request_body.line_expect`) and ``body`` (request
  fields sent as written: :mod:`tokrate.inputs.request_body`); other keys are ignored),
  plain-text files (``.txt``/``.md``/``.prompt``; every blank-line-separated block is
  one prompt, or the whole file with ``text_split = "file"``), or a folder of them
  (recursively, sorted by path).
- ``sets``: bundled sets by name (``chat``, ``classification``, ``code``,
  ``extraction``, ``summarization``): the repository's top-level prompts/ folder,
  shipped in the wheel (:mod:`tokrate.spec.bundled`).
- ``synthetic``: seeded generated text with target input/output lengths.

With no paths, sets or generated prompts, the five shipped sets are used. ``max_tokens`` (when set)
replaces every prompt's own, except a larger one of a prompt with an ``expect``; ``limit`` keeps the first N prompts.

Token estimate: ``input_tokens_est`` is exactly what the simulator counts for the
prompt sent through the chat API (``tokrate.physics.count_chat_tokens``: per message
4 template tokens + ceil(UTF-8 bytes / 4) of its content, plus 2 reply-priming
tokens; a plain ``prompt`` is sent as one user message). :func:`estimate_input_tokens`
gives the completions-API figure too (ceil(bytes / 4) of the flattened text, at least
1). Real tokenizers differ by model; the server's ``usage`` remains the measured truth.

Errors are :class:`~tokrate.errors.PromptError`, one line naming the file and line.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Final

from tokrate.errors import PromptError
from tokrate.fileio import FileRefused, path_exists, path_is_dir, read_regular
from tokrate.inputs.media_parts import resolve_media
from tokrate.inputs.prompt_base import (
    MAX_SESSION_TURNS,
    ONE_MESSAGE_OVERHEAD,
    Prompt,
    check_messages,
    decode_utf8,
    make_prompt,
    parse_json_text,
    text_of_tokens,
)
from tokrate.inputs.request_body import line_expect
from tokrate.inputs.traces import (
    is_batch_line,
    is_session_line,
    line_body,
    parse_batch_line,
    parse_session_line,
    parse_sharegpt,
)
from tokrate.inputs.workloads import grid_prompts, session_prompts, shared_prefix_prompts
from tokrate.runfolder.prompt_sources import PromptSourceInfo, SourceKind
from tokrate.spec.bundled import SHIPPED_SETS, bundled_set_bytes, bundled_sets
from tokrate.spec.types import PromptsSpec, SyntheticSpec

__all__ = [
    "JSONL_SUFFIXES",
    "TEXT_SUFFIXES",
    "LoadedPrompts",
    "load_prompt_sources",
    "load_prompts",
    "parse_jsonl",
    "parse_text",
    "synthetic_prompts",
]

JSONL_SUFFIXES: Final = (".jsonl", ".json")
#: The largest prompt file read (a full ShareGPT dump is ~670 MB); checked before reading.
MAX_PROMPT_FILE_BYTES: Final = 1 << 30
TEXT_SUFFIXES: Final = (".txt", ".md", ".prompt")


# --- parsing ------------------------------------------------------------------------


def _parse_line(
    obj: object, where: str, default_id: str, default_task: str, base_dir: Path | None
) -> Prompt:
    if not isinstance(obj, dict):
        raise PromptError(f"{where}: expected a JSON object, got {type(obj).__name__}")
    has_messages = "messages" in obj
    has_prompt = "prompt" in obj
    if has_messages == has_prompt:
        what = "both" if has_messages else "neither"
        raise PromptError(f"{where}: needs exactly one of 'messages' or 'prompt' (has {what})")
    messages = None
    if has_messages:
        messages = resolve_media(check_messages(obj["messages"], where), base_dir, where)
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
    body = line_body(obj, where)
    if body.limit is not None:
        if max_tokens is not None:
            raise PromptError(
                f"{where}: body.{body.limit_field}: the line has 'max_tokens' already; give one"
            )
        max_tokens = body.limit
    shared = obj.get("shared_messages", 0)
    if isinstance(shared, bool) or not isinstance(shared, int) or shared < 0:
        raise PromptError(f"{where}: 'shared_messages' must be an integer >= 0, got {shared!r}")
    expect = line_expect(obj.get("expect"), body, where)
    return make_prompt(
        id=str(pid),
        task=task,
        messages=messages,
        prompt=prompt if has_prompt else None,
        max_tokens=max_tokens,
        source=where,
        shared_messages=shared,
        expect=expect,
        body=body.fields,
        max_tokens_field=body.limit_field,
    )


def parse_jsonl(
    data: bytes,
    name: str,
    *,
    default_task: str | None = None,
    format: str = "auto",
    think_time_s: float = 0.0,
    base_dir: Path | None = None,
) -> list[Prompt]:
    """Prompts from JSONL bytes; ``name`` labels errors and sources ("FILE line N");
    ``base_dir`` is where media files named in messages are read from (the prompts
    file's folder; None: a line may name none).

    Blank lines are skipped. Default id: "<stem>:<line>"; default task: the file stem.
    ``format`` "auto" reads each line by its keys: ``turns`` is a session, ``custom_id``
    with ``body`` an OpenAI batch request (:mod:`tokrate.inputs.traces`), anything else a
    prompt; "prompts" / "openai-batch" read every line as that. ``think_time_s`` is the
    default of session lines.

    Raises:
        PromptError: not UTF-8, bad JSON, a line that is not a prompt, or no prompts.
    """
    text = decode_utf8(data, name)
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
        obj = parse_json_text(line, where)
        default_id = f"{stem}:{n}"
        if format == "openai-batch" or (format == "auto" and is_batch_line(obj)):
            if not isinstance(obj, dict):
                raise PromptError(f"{where}: expected a JSON object, got {type(obj).__name__}")
            out.append(parse_batch_line(obj, where, task, base_dir))
        elif format == "auto" and is_session_line(obj):
            assert isinstance(obj, dict)
            out.append(parse_session_line(obj, where, default_id, task, think_time_s))
        else:
            out.append(_parse_line(obj, where, default_id, task, base_dir))
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
    text = decode_utf8(data, name).replace("\r\n", "\n")
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
        make_prompt(
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


def _is_json_document(data: bytes) -> bool:
    """A file whose first non-blank byte opens a JSON list (ShareGPT), not JSONL."""
    return data.lstrip(b"\xef\xbb\xbf \t\r\n")[:1] == b"["


def _load_file(path: Path, label: str, spec: PromptsSpec) -> list[Prompt]:
    try:
        data = read_regular(path, MAX_PROMPT_FILE_BYTES)
    except FileRefused as err:
        raise PromptError(f"{label}: {err}") from None
    except OSError as err:
        raise PromptError(f"{label}: cannot read ({err.strerror})") from None
    suffix = path.suffix.lower()
    fmt = spec.format
    if fmt == "sharegpt" or (fmt == "auto" and suffix == ".json" and _is_json_document(data)):
        return parse_sharegpt(data, label)
    if suffix in JSONL_SUFFIXES or fmt != "auto":
        return parse_jsonl(
            data, label, format=fmt, think_time_s=spec.think_time_s, base_dir=path.parent
        )
    if suffix in TEXT_SUFFIXES:
        return parse_text(data, label, split=spec.text_split)
    known = ", ".join((*JSONL_SUFFIXES, *TEXT_SUFFIXES))
    raise PromptError(f"{label}: unknown prompt file type {suffix or '(none)'!r} (use {known})")


def _load_path(raw: str, base_dir: Path, spec: PromptsSpec) -> list[tuple[str, list[Prompt]]]:
    """(file label, its prompts) for ``raw``: one file, or every file of a folder."""
    path = Path(raw).expanduser()
    if not path.is_absolute():
        path = base_dir / path
    if path_is_dir(path):
        files = _files_under(path)
        if not files:
            raise PromptError(f"{raw}: folder has no prompt files (.jsonl, .txt, .md)")
        out: list[tuple[str, list[Prompt]]] = []
        for f in files:
            label = str(Path(raw) / f.relative_to(path))
            out.append((label, _load_file(f, label, spec)))
        return out
    if not path_exists(path):
        raise PromptError(f"{raw}: prompt file not found (looked in {path.parent})")
    return [(raw, _load_file(path, raw, spec))]


# --- synthetic ----------------------------------------------------------------------


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
        text = text_of_tokens(max(1, n_in - ONE_MESSAGE_OVERHEAD), rng)
        out.append(
            make_prompt(
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


@dataclass(frozen=True, slots=True)
class LoadedPrompts:
    """The prompts of a run and where each came from: ``origin[i]`` indexes
    ``sources`` for ``prompts[i]`` (run.json ``prompts``; ``sent`` is filled in
    after the run)."""

    prompts: tuple[Prompt, ...]
    sources: tuple[PromptSourceInfo, ...]
    origin: tuple[int, ...]


def load_prompts(
    spec: PromptsSpec, *, base_dir: Path | str = ".", reserve_tokens: int = 0
) -> tuple[Prompt, ...]:
    """The prompts of :func:`load_prompt_sources`."""
    return load_prompt_sources(spec, base_dir=base_dir, reserve_tokens=reserve_tokens).prompts


def load_prompt_sources(
    spec: PromptsSpec, *, base_dir: Path | str = ".", reserve_tokens: int = 0
) -> LoadedPrompts:
    """Resolve ``spec`` into prompts, with their sources (see the module docstring for
    sources and order).

    ``base_dir``: where relative paths are read from (``tokrate.spec.config_file.prompts_base_dir``
    gives the config file's folder). ``reserve_tokens``: tokens the request adds in
    front of the first message (the cache-busting tag,
    :data:`tokrate.inputs.workloads.UNIQUE_TAG_TOKENS`); length grids leave room for them so
    the server counts exactly the requested lengths.

    Raises:
        PromptError: one line naming the file (and line) at fault: missing file,
            unknown suffix, empty file, not UTF-8, bad JSON, missing messages/prompt,
            an unknown bundled set, or duplicate ids.
    """
    base = Path(base_dir)
    groups: list[tuple[SourceKind, str, list[Prompt]]] = []
    for raw in spec.paths:
        groups += [("file", label, found) for label, found in _load_path(raw, base, spec)]
    sets = spec.sets
    generated = (spec.synthetic, spec.sessions, spec.grid, spec.shared_prefix)
    if not spec.paths and not sets and all(g is None for g in generated):
        sets = SHIPPED_SETS
    groups += [("set", name, _load_set(name)) for name in sets]
    if spec.synthetic is not None:
        groups.append(("generated", "synthetic", synthetic_prompts(spec.synthetic)))
    if spec.sessions is not None:
        groups.append(("generated", "sessions", session_prompts(spec.sessions)))
    if spec.grid is not None:
        grid = grid_prompts(spec.grid, reserve_tokens=reserve_tokens)
        groups.append(("generated", "grid", grid))
    if spec.shared_prefix is not None:
        groups.append(("generated", "shared_prefix", shared_prefix_prompts(spec.shared_prefix)))
    tagged = [(g, p) for g, (_kind, _name, found) in enumerate(groups) for p in found]
    prompts = list(_dedupe(p for _g, p in tagged))
    origin = [g for g, _p in tagged]
    kept = len(prompts) if spec.limit is None else min(spec.limit, len(prompts))
    prompts, cut, origin = prompts[:kept], origin[kept:], origin[:kept]
    if spec.max_tokens is not None:
        cap = spec.max_tokens
        prompts = [
            p
            if _keeps_own_limit(p, cap)
            else replace(
                p, max_tokens=cap, turns=tuple(replace(t, max_tokens=cap) for t in p.turns)
            )
            for p in prompts
        ]
    if not prompts:
        raise PromptError("no prompts: the configured sources are empty")
    for p in prompts:
        if len(p.turns) >= MAX_SESSION_TURNS:
            raise PromptError(f"{p.source}: more than {MAX_SESSION_TURNS} turns in one session")
    # A source all of whose prompts `limit` cut is still listed: the config named it.
    sources = tuple(
        PromptSourceInfo(
            kind=kind,
            name=name,
            prompts=sum(1 for g in origin if g == i),
            tasks=_tasks(p.task for p, g in zip(prompts, origin, strict=True) if g == i),
            cut_by_limit=sum(1 for g in cut if g == i),
        )
        for i, (kind, name, _found) in enumerate(groups)
    )
    return LoadedPrompts(tuple(prompts), sources, tuple(origin))


def _keeps_own_limit(prompt: Prompt, cap: int) -> bool:
    """A one-request prompt with an ``expect`` keeps its own, larger output limit: a cap
    below a right answer's length would fail its check on every model (docs/quality.md)."""
    own = prompt.max_tokens
    return prompt.expect is not None and not prompt.turns and own is not None and own > cap


def _tasks(tasks: Iterable[str]) -> tuple[tuple[str, int], ...]:
    """(task, count) pairs, most first, then by name."""
    counts: dict[str, int] = {}
    for task in tasks:
        counts[task] = counts.get(task, 0) + 1
    return tuple(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))
