"""One planned request, sent and recorded: its attempts (the retry policy), the events
around each, and the record built from what the client observed.

Used by the engine's load loops (:mod:`tokrate.load.worker.engine`), one :class:`Sender` per
worker. Every attempt emits RequestStarted just before it is sent and RequestFinished
with its record the moment it ends; failures are data on the record, never
exceptions. A server that rejects ``stream_options.include_usage`` is asked without it
for the rest of the worker. The retry policy (``[client] retry``, off by default)
re-sends failed requests of the listed error classes, honouring a 429/503
Retry-After; every attempt is its own record (``attempt``).

A multi-turn session (a prompt with ``turns``) is one planned request: its turns go
one after another on the same stream, each with the history and the model's real
answers, so sessions are the unit of concurrency. Turn t (1-based) of planned request
k is recorded with ``request_index = k * MAX_SESSION_TURNS + t - 1``, ``session_id``
"<prompt id>#<k>" and ``turn`` t.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import anyio

from tokrate.client.base import StreamClient
from tokrate.client.fallbacks import MAX_COMPLETION_NOTE
from tokrate.client.request import (
    PreparedRequest,
    build_request,
    new_unique_prefix,
    request_id_value,
)
from tokrate.client.result import RecordContext, StreamResult, build_record
from tokrate.inputs.prompt_base import MAX_SESSION_TURNS, Prompt, estimate_input_tokens, prompt_text
from tokrate.inputs.targets import Target
from tokrate.inputs.tokencount import cached_counter
from tokrate.load.plan import PlannedRequest
from tokrate.load.worker.events import Emit, RequestFinished, RequestStarted
from tokrate.load.worker.pacing import Pacer
from tokrate.load.worker.settings import WorkerSettings
from tokrate.redact import Redactor, strip_control
from tokrate.runfolder.records import ANSWER_CUT, MAX_ANSWER_CHARS, RequestRecord

__all__ = ["Sender", "SendSlot"]


@dataclass(frozen=True, slots=True)
class _Call:
    """What every request of one planned request shares."""

    client: StreamClient
    pr: PlannedRequest
    context: RecordContext
    stopping: anyio.Event
    is_warmup: Callable[[int], bool]
    grace_s: float
    #: perf_counter_ns when the scenario's duration ends (None: no duration): no retry
    #: wait outlives it.
    ends_ns: int | None = None


class SendSlot:
    """Where the engine learns about one request while it is in flight: its cancel
    scope (for the grace period) and its live stream state (for progress)."""

    __slots__ = ("scope", "state", "target_index")

    def __init__(self, target_index: int) -> None:
        self.target_index = target_index
        self.state: Any = None
        self.scope: anyio.CancelScope | None = None


class Sender:
    """Sends planned requests of one worker's shard (see the module doc)."""

    def __init__(
        self,
        *,
        settings: WorkerSettings,
        targets: tuple[Target, ...],
        prompts: tuple[Prompt, ...],
        api_keys: dict[str, str],
        emit: Emit,
        lag_at: Callable[[int], float] | None = None,
        pacer: Pacer | None = None,
    ) -> None:
        self.settings = settings
        #: The worker's loop-lag lookup (tokrate.load.worker.looplag ``LagMonitor.lag_at``):
        #: how far behind the loop was at a stamp; None where nothing monitors it.
        self.lag_at = lag_at
        #: The worker's turns of request work (tokrate.load.worker.pacing): a finished
        #: request is recorded in its turn, so a wave of them ending together does not
        #: hold the loop from its sockets (their stamps are all taken already).
        self.pacer = pacer
        self.targets = targets
        self.prompts = prompts
        self.api_keys = api_keys
        self.emit = emit
        #: Endpoints whose server rejected stream_options; remembered for the worker.
        self.usage_rejected: set[str] = set()
        #: Targets (endpoint, model) whose model rejected max_tokens: they get
        #: max_completion_tokens for the rest of the worker.
        self.completion_limit: set[tuple[str, str]] = set()
        #: Output tokens of finished requests per target (progress).
        self.done_tokens = [0] * len(targets)
        #: Requests in flight, by id of their slot.
        self.slots: dict[int, SendSlot] = {}

    def _request(
        self,
        target: Target,
        prompt: Prompt,
        *,
        unique_prefix: str | None,
        keep_text: bool,
        request_id: str | None,
    ) -> PreparedRequest:
        endpoint = target.endpoint.name
        s = self.settings.request
        return build_request(
            target,
            prompt,
            s,
            include_usage=s.include_usage and endpoint not in self.usage_rejected,
            unique_prefix=unique_prefix,
            api_key=self.api_keys.get(endpoint),
            keep_text=keep_text,
            request_id=request_id,
            max_tokens_field="max_completion_tokens"
            if (endpoint, target.model.name) in self.completion_limit
            else None,
        )

    async def send(
        self,
        client: StreamClient,
        pr: PlannedRequest,
        context: RecordContext,
        *,
        stopping: anyio.Event,
        due_ns: int,
        deadline_ns: int | None,
        is_warmup: Callable[[int], bool],
        grace_s: float,
        ends_ns: int | None = None,
    ) -> int:
        """Every attempt of one planned request (every turn of a session); returns when
        its last attempt ended (perf_counter ns: the moment its slot freed, the next
        request's due time in a closed loop). ``context`` carries the level, the
        schedule and the warm-up flag the plan knew; ``is_warmup(t0_ns)`` adds the
        engine's time-based warm-up; ``due_ns`` is when the request was due (its
        schedule, or its slot freeing): each record's ``send_queue_s`` counts from it;
        ``deadline_ns`` (open loop) gives send_delay_s."""
        prompt = self.prompts[pr.prompt_index]
        call = _Call(client, pr, context, stopping, is_warmup, grace_s, ends_ns)
        if not prompt.is_session:
            tag = new_unique_prefix() if self.settings.request.unique_prompts else None
            _answer, ended = await self._attempts(
                call, prompt, pr.index, due_ns, deadline_ns, tag, None
            )
            return ended
        return await self._session(call, prompt, due_ns, deadline_ns)

    async def _session(
        self, call: _Call, prompt: Prompt, due_ns: int, deadline_ns: int | None
    ) -> int:
        """A multi-turn session: each turn sends the history with the model's real
        answers; one cache-busting tag for the whole session (its growing prefix may be
        cached, nothing across sessions); think time between turns (a turn is due when
        its think time after the previous answer is over). A failed turn ends the
        session (there is no answer to continue from). Returns when its last turn
        ended."""
        pr = call.pr
        tag = new_unique_prefix() if self.settings.request.unique_prompts else None
        history: list[dict[str, Any]] = list(prompt.messages or ())
        session_id = f"{prompt.id}#{pr.index}"
        turn_prompt = dataclasses.replace(prompt, turns=())
        ended = due_ns
        for turn in range(1, len(prompt.turns) + 2):
            if turn > 1:
                follow = prompt.turns[turn - 2]
                history.append({"role": "user", "content": follow.user})
                turn_prompt = dataclasses.replace(
                    turn_prompt,
                    messages=tuple(history),
                    max_tokens=follow.max_tokens,
                    input_tokens_est=estimate_input_tokens(history, None),
                    expect=follow.expect,
                )
            index = pr.index * MAX_SESSION_TURNS + turn - 1
            session = (session_id, turn)
            answer, ended = await self._attempts(
                call, turn_prompt, index, due_ns, deadline_ns, tag, session
            )
            deadline_ns = None  # only the first turn has a schedule
            if answer is None or call.stopping.is_set():
                return ended
            history.append({"role": "assistant", "content": answer})
            due_ns = ended
            if prompt.think_time_s > 0 and turn <= len(prompt.turns):
                due_ns = ended + int(prompt.think_time_s * 1e9)
                with anyio.move_on_after(prompt.think_time_s):
                    await call.stopping.wait()
        return ended

    async def _attempts(
        self,
        call: _Call,
        prompt: Prompt,
        request_index: int,
        due_ns: int,
        deadline_ns: int | None,
        unique_prefix: str | None,
        session: tuple[str, int] | None,
    ) -> tuple[str | None, int]:
        """Every attempt of one request: the answer's text when it ended ok (else None),
        and when its last attempt ended. A retry is due when its backoff is over."""
        pr, context = call.pr, call.context
        target = self.targets[pr.target_index]
        attempt = 1
        checked = prompt.expect is not None
        while True:
            if self.pacer is not None:
                # Its turn of the loop (tokrate.load.worker.pacing): inside its send queue.
                await self.pacer.turn()
                if call.stopping.is_set():
                    return None, due_ns  # stopped while it waited: never sent
            counter = (
                None if target.model.tokenizer is None else cached_counter(target.model.tokenizer)
            )
            request_id = (
                request_id_value(context.run_id, context.scenario, request_index, attempt)
                if self.settings.request.request_id_header
                else None
            )
            req = self._request(
                target,
                prompt,
                unique_prefix=unique_prefix,
                keep_text=session is not None or counter is not None or checked,
                request_id=request_id,
            )
            self.emit(
                RequestStarted(
                    worker_id=context.worker,
                    scenario=context.scenario,
                    request_index=request_index,
                    target_index=pr.target_index,
                    started_at=time.time(),
                    t0_ns=time.perf_counter_ns(),
                )
            )
            result = await self._stream(call.client, req, pr, call.grace_s)
            ended = result.end_ns if result.end_ns is not None else time.perf_counter_ns()
            if self.pacer is not None:
                with anyio.CancelScope(shield=True):  # a measured request is recorded
                    await self.pacer.turn()
            if result.usage_rejected:
                self.usage_rejected.add(target.endpoint.name)
            if MAX_COMPLETION_NOTE in result.notes:
                self.completion_limit.add((target.endpoint.name, target.model.name))
            usage = result.usage
            self.done_tokens[pr.target_index] += (
                usage["completion_tokens"] if usage is not None else len(result.chunk_ns)
            )
            send_delay_s = None
            if deadline_ns is not None:
                send_delay_s = max(0.0, (result.t0_ns - deadline_ns) / 1e9)
            lag_ms = None
            if self.lag_at is not None and result.chunk_ns:
                # Read now, while the stretch that held the first read is still kept:
                # a stream bunched then is the client's doing (analysis.buffering).
                lag_ms = round(self.lag_at(result.chunk_ns[0]), 3)
            record = build_record(
                result,
                RecordContext(
                    run_id=context.run_id,
                    scenario=context.scenario,
                    prompt_id=prompt.id,
                    task=prompt.task,
                    request_index=request_index,
                    scheduled_s=pr.scheduled_s,
                    send_delay_s=send_delay_s,
                    warmup=pr.warmup or call.is_warmup(result.t0_ns),
                    worker=context.worker,
                    node_id=context.node_id,
                    concurrency=context.concurrency,
                    rate_rps=context.rate_rps,
                    attempt=attempt,
                    input_tokens=prompt.input_tokens_est
                    if counter is None
                    else counter.count(prompt_text(prompt.messages, prompt.prompt)),
                    session_id=None if session is None else session[0],
                    turn=None if session is None else session[1],
                    token_counter=counter,
                    request_id=request_id,
                    media_parts=prompt.media_parts,
                    media_bytes=prompt.media_bytes,
                    due_ns=due_ns,
                    loop_lag_ms=lag_ms,
                ),
            )
            record = server_text_redacted(record, self.settings.redactor)
            if checked and result.answer_text is not None:
                # Kept for the checks after the load, bounded and redacted like every
                # string a server sent.
                text = result.answer_text[:MAX_ANSWER_CHARS]
                answer = self.settings.redactor.text(strip_control(text))
                if len(result.answer_text) > MAX_ANSWER_CHARS:
                    extra = {**record.extra, ANSWER_CUT: len(result.answer_text)}
                    record = dataclasses.replace(record, answer=answer, extra=extra)
                else:
                    record = dataclasses.replace(record, answer=answer)
            wait_s = self._retry_wait_s(record, call)
            # Said with the record, so the progress counts requests, not attempts.
            self.emit(RequestFinished(record=record, retry_in_s=wait_s))
            if record.status == "ok":
                return result.answer_text, ended
            if wait_s is None:
                return None, ended
            attempt += 1
            with anyio.move_on_after(wait_s):
                await call.stopping.wait()
            if call.stopping.is_set():
                return None, ended
            due_ns = ended + int(wait_s * 1e9)

    def _retry_wait_s(self, record: RequestRecord, call: _Call) -> float | None:
        """Seconds to wait before the request's next attempt (it is due then); None
        when there is to be none (it ended ok or not with a retried error class, its
        attempts are spent, the run is stopping, or the next attempt would start after
        the scenario's duration). The wait is the backoff, or a longer Retry-After when
        honoured, capped at ``retry.max_wait_s`` and the request's total timeout, and
        cut at the end of the scenario's duration: a server answering ``Retry-After:
        999999`` cannot hold the run."""
        retry = self.settings.retry
        if (
            record.status != "error"
            or record.attempt >= retry.max_attempts
            or record.error_class not in retry.on
            or call.stopping.is_set()
        ):
            return None
        wait_s = retry.backoff_s
        retry_after = record.extra.get("retry_after_s") if retry.honour_retry_after else None
        if isinstance(retry_after, int | float) and math.isfinite(retry_after):
            wait_s = max(wait_s, float(retry_after))
        wait_s = min(wait_s, retry.max_wait_s, self.settings.timeouts.total_s)
        if call.ends_ns is not None:
            left_s = (call.ends_ns - time.perf_counter_ns()) / 1e9
            if left_s <= wait_s:
                # The next attempt would start after the scenario ended: none, rather
                # than a request outside the window the scenario measures.
                return None
        return wait_s

    async def _stream(
        self, client: StreamClient, req: PreparedRequest, pr: PlannedRequest, grace_s: float
    ) -> StreamResult:
        """One attempt: what the client observed, also when the grace period ended it."""
        partial: list[StreamResult] = []
        started_at = time.time()
        t0_ns = time.perf_counter_ns()
        slot = SendSlot(pr.target_index)
        key = id(slot)
        self.slots[key] = slot

        def watch(state: Any) -> None:
            slot.state = state

        result: StreamResult | None = None
        with anyio.CancelScope() as scope:
            slot.scope = scope
            try:
                result = await client.stream(req, on_partial=partial.append, watch=watch)
            finally:
                del self.slots[key]
        if result is None and partial:
            # Cancelled after the grace period: the client handed over what it had
            # measured (first byte, chunks) with error_class "cancelled".
            result = partial[-1]
        if result is None:
            # Cancelled before the client saw anything: only the engine's own stamps.
            result = StreamResult(
                client=self.settings.client_kind,
                api=req.api,
                endpoint=req.endpoint,
                model=req.model,
                t0_ns=t0_ns,
                started_at=started_at,
                end_ns=time.perf_counter_ns(),
                error_class="cancelled",
                error_message=f"cancelled after the {grace_s:g} s stop grace period",
            )
        return result

    def cancel_all(self) -> None:
        """End every request in flight (the grace period is over)."""
        for slot in list(self.slots.values()):
            if slot.scope is not None:
                slot.scope.cancel()

    def progress(self) -> tuple[list[int], list[int]]:
        """(tokens so far, requests in flight) per target, counting content chunks of
        requests still streaming."""
        tokens = list(self.done_tokens)
        in_flight = [0] * len(tokens)
        for slot in self.slots.values():
            in_flight[slot.target_index] += 1
            if slot.state is not None:
                tokens[slot.target_index] += len(slot.state.chunk_ns)
        return tokens, in_flight


def server_text_redacted(record: RequestRecord, redactor: Redactor) -> RequestRecord:
    """``record`` with every text a server chose passed through the run's redactor and
    stripped of terminal controls, before it is written or warned about anywhere: the
    error message (an HTTP body, an SSE error event), the model name and id the response
    carried, its finish reason, its server timings and the client's notes (a server
    that echoes the caller's key as its model name must not put it in records.jsonl or
    the live "answered as model" warning). Tool calls' names and arguments too."""

    def text(value: str | None) -> str | None:
        return None if value is None else redactor.text(strip_control(value))

    changes: dict[str, Any] = {}
    for name in ("error_message", "response_model", "response_id", "finish_reason"):
        value = getattr(record, name)
        if value is not None and text(value) != value:
            changes[name] = text(value)
    for name in ("server_timings", "extra", "tool_calls"):
        value = getattr(record, name)
        if value:
            cleaned = _strings_redacted(value, text)
            if cleaned != value:
                changes[name] = cleaned
    return dataclasses.replace(record, **changes) if changes else record


def _strings_redacted(value: Any, text: Callable[[str], str | None]) -> Any:
    """Every string inside ``value`` (keys too; dicts and lists walked) through ``text``.
    By value and shape only, not by name: llama.cpp's ``predicted_per_token_ms`` is a
    number, not a token."""
    if isinstance(value, str):
        return text(value)
    if isinstance(value, dict):
        return {
            (text(k) if isinstance(k, str) else k): _strings_redacted(v, text)
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [_strings_redacted(v, text) for v in value]
    if isinstance(value, tuple):
        return tuple(_strings_redacted(v, text) for v in value)
    return value
