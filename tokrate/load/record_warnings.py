"""Warnings a run derives from its own records, on the driver, as they arrive.

Each is one line naming the target (``endpoint/model``) and ends with what to do; one
*kind* per rule, so :func:`tokrate.load.collector.collapse_warnings` folds the same rule on
several targets into "... (and N more like it)":

- ``response_model``: a response carried a model name other than the one requested
  (a swapped backend otherwise goes unnoticed). Compared by
  :func:`tokrate.client.model_names.same_model` (transformers' ``<folder>@main``,
  llama.cpp's path to the ``.gguf`` and OpenAI's dated snapshots are the same model);
  records keep the raw name. Once per target, at the first such record.
- ``short_length``: an ok answer with finish_reason ``length`` but fewer output tokens
  than the max_tokens it asked for, by the server's own usage count: the server stopped
  at its context slot (llama.cpp does this without an error when prompt + max_tokens
  pass ``n_ctx``). Once per target.
- ``context_length`` (at the end): how many prompts failed as ``context_length`` per
  target, the context size the server named, and the way out.
- ``empty_answer`` (at the end): measured ok requests whose stream carried no content
  (no answer, reasoning or tool-call text), per target, with the output tokens the
  server counted for them: those tokens are left out of throughput (docs/definitions.md
  "empty answer"), and a server that answers with nothing is broken, not fast.
- ``not_sent`` (at the end): requests the client never sent (error class ``not_sent``:
  its own connection pool, event loop or connect held them until a timeout), per
  target, with the first one's message: not the server's errors (left out of its error
  rate), but the server received less load than planned.
- ``prompt_cache`` (at the end): the server said it took at least
  :data:`CACHED_SHARE_WARN` of the prompt tokens of a target's measured ok requests
  from its prompt cache, which flatters TTFT.

Pure bookkeeping over records; no clock, no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

from tokrate.client.model_names import context_size, same_model
from tokrate.runfolder.records import RequestRecord

__all__ = ["CACHED_SHARE_WARN", "RecordWarnings"]

#: Share of prompt tokens served from a prompt cache that makes a run warn.
CACHED_SHARE_WARN: Final = 0.5
#: Prompt ids a context_length line names before "and N more".
_IDS_SHOWN: Final = 5


def _list_ids(ids: list[str]) -> str:
    shown = ", ".join(ids[:_IDS_SHOWN])
    more = f" and {len(ids) - _IDS_SHOWN} more" if len(ids) > _IDS_SHOWN else ""
    return shown + more


@dataclass
class _TargetFacts:
    model_warned: bool = False
    short_warned: bool = False
    too_long: list[str] = field(default_factory=list)
    context_tokens: int | None = None
    prompt_tokens: int = 0
    cached_tokens: int = 0
    measured_ok: int = 0
    empty: int = 0
    empty_tokens: int = 0
    not_sent: int = 0
    not_sent_first: str = ""


class RecordWarnings:
    """Feed every record to :meth:`add` (warnings due now), then call :meth:`final`.

    ``max_tokens_by_prompt`` maps prompt id to the max_tokens its requests asked for
    (None: the server's default); ``unique_prompts`` is ``[client] unique_prompts``.
    Both return ``(kind, message)`` pairs.
    """

    def __init__(self, max_tokens_by_prompt: Mapping[str, int | None], unique_prompts: bool):
        self.max_tokens = dict(max_tokens_by_prompt)
        self.unique_prompts = unique_prompts
        self.targets: dict[str, _TargetFacts] = {}

    def add(self, record: RequestRecord) -> list[tuple[str, str]]:
        label = f"{record.endpoint}/{record.model}"
        facts = self.targets.setdefault(label, _TargetFacts())
        out: list[tuple[str, str]] = []
        answered = record.response_model
        if answered and not facts.model_warned and not same_model(record.model, answered):
            facts.model_warned = True
            out.append(
                (
                    "response_model",
                    f"target {label}: the server answered as model {answered!r}, not the"
                    f" {record.model!r} requested (another backend may be answering; each"
                    " record keeps it in response_model): check the endpoint's model routing",
                )
            )
        if record.error_class == "context_length":
            if record.prompt_id not in facts.too_long:
                facts.too_long.append(record.prompt_id)
            facts.context_tokens = facts.context_tokens or context_size(record.error_message)
        if record.error_class == "not_sent":
            facts.not_sent += 1
            facts.not_sent_first = facts.not_sent_first or (record.error_message or "")
        if record.status != "ok":
            return out
        self._short(record, label, facts, out)
        if not record.warmup:
            facts.measured_ok += 1
            if not record.chunk_offsets_s and record.ttft_s is None:
                facts.empty += 1
                facts.empty_tokens += record.output_tokens or 0
        if not record.warmup and record.input_tokens and record.cached_tokens is not None:
            facts.prompt_tokens += record.input_tokens
            facts.cached_tokens += min(record.cached_tokens, record.input_tokens)
        return out

    def _short(
        self, record: RequestRecord, label: str, facts: _TargetFacts, out: list[tuple[str, str]]
    ) -> None:
        asked = self.max_tokens.get(record.prompt_id)
        got = record.output_tokens
        if facts.short_warned or record.finish_reason != "length" or not asked or got is None:
            return
        if record.tokens_source != "usage":
            return  # counted chunks: a server may send several tokens in one
        if got >= asked:
            return
        facts.short_warned = True
        out.append(
            (
                "short_length",
                f"target {label}: prompt {record.prompt_id} stopped at {got} of max_tokens"
                f" {asked} with finish_reason 'length' (prompt + max_tokens passed the"
                " server's context slot): use shorter prompts, a smaller max_tokens or"
                " more context per slot",
            )
        )

    def final(self) -> list[tuple[str, str]]:
        out: list[tuple[str, str]] = []
        for label, facts in self.targets.items():
            if facts.too_long:
                n = len(facts.too_long)
                size = f"the {facts.context_tokens}-token" if facts.context_tokens else "its"
                out.append(
                    (
                        "context_length",
                        f"target {label}: {n} prompt{'s' if n != 1 else ''}"
                        f" ({_list_ids(facts.too_long)}) exceed {size} context: use shorter"
                        " prompts, a smaller max_tokens or a server with more context",
                    )
                )
            if facts.empty:
                out.append(("empty_answer", _empty_line(label, facts)))
            if facts.not_sent:
                out.append(("not_sent", _not_sent_line(label, facts)))
            share = facts.cached_tokens / facts.prompt_tokens if facts.prompt_tokens else 0.0
            if share >= CACHED_SHARE_WARN:
                why = (
                    "although [client] unique_prompts is on"
                    if self.unique_prompts
                    else "([client] unique_prompts is off, so repeated prompts hit it)"
                )
                out.append(
                    (
                        "prompt_cache",
                        f"target {label}: the server took {share:.0%} of the prompt tokens"
                        f" from its prompt cache {why}, which flatters TTFT: turn the cache"
                        " off for the benchmark (llama.cpp: extra_body cache_prompt = false)",
                    )
                )
        return out


def _empty_line(label: str, facts: _TargetFacts) -> str:
    counted = (
        f" although the server counted {facts.empty_tokens:,} output tokens for them"
        if facts.empty_tokens
        else ""
    )
    return (
        f"target {label}: {facts.empty} of {facts.measured_ok} ok requests streamed no"
        f" content (no answer, reasoning or tool-call text){counted}; their tokens are"
        " left out of throughput and they miss every SLO: check the server's chat"
        " template and detokenizer with one request by hand"
    )


def _not_sent_line(label: str, facts: _TargetFacts) -> str:
    n = facts.not_sent
    return (
        f"target {label}: {n} request{'s' if n != 1 else ''} never left the client"
        f" ({facts.not_sent_first}); they are the client's failures, not the server's"
        " (left out of its error rate), and the server got less load than planned:"
        " use the fast client or spread the streams over more workers (--workers N)"
    )
