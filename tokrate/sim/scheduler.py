"""Per-tier engines that decide when each token is due and write it.

One engine task per tier owns the timing of every request of that tier and writes
their bytes: :class:`BatchEngine` runs the continuous-batching physics of
:class:`~tokrate.sim.model.TierTiming`; :class:`FixedEngine` gives every request the
tier's exact ``fixed_ttft_ms``/``fixed_itl_ms`` with no batching limit.

Clocks: all deadlines are absolute ``time.perf_counter_ns()`` values (CLOCK_MONOTONIC
on Linux) computed from the previous deadline, never from "now + sleep", so wake-up
lateness never accumulates. Whatever became due while the loop was late is written
in one write per stream. Model durations are divided by ``time_scale``.

Writes go through the ASGI ``send`` of each request, which in uvicorn completes
without yielding unless the connection's write buffer is paused (flow control).
"""

from __future__ import annotations

import asyncio
import heapq
import logging
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Awaitable, Callable, Mapping
from time import perf_counter_ns
from typing import Any

from tokrate.sim.alarm import Alarm
from tokrate.sim.faults import FaultRule
from tokrate.sim.model import TierTiming, token_bytes
from tokrate.sim.prefix_cache import BLOCK_TOKENS, PrefixCache
from tokrate.sim.wire import StreamWire, TokenUsage

__all__ = ["BatchEngine", "FixedEngine", "InjectedDisconnect", "SimRequest"]

Send = Callable[[dict[str, Any]], Awaitable[None]]

_log = logging.getLogger("tokrate.sim")

#: Shortest sleep of the fixed-timing engine. Event-loop timers have 1 ms resolution
#: (uvloop rounds to whole ms), so a shorter sleep returns at once and the loop would
#: spin; waiting a full tick instead lets one wake-up serve every stream due within it
#: (writes are then up to ~1 ms late, never early; the truth log records the real time).
MIN_SLEEP_S = 0.001


class InjectedDisconnect(Exception):
    """Raised into a request handler so the server drops the connection (fault)."""


class SimRequest:
    """One admitted request: its plan (lengths, fault) and its write state.

    Invariants: ``produced <= output_tokens``; bytes reach ``send`` in the order they
    were produced; ``done`` resolves once, after the last write (or with
    :class:`InjectedDisconnect` for the ``disconnect`` fault). The first
    ``reasoning_tokens`` tokens are the reasoning phase; ``wire`` makes the bytes.
    """

    __slots__ = (
        "aborting",
        "admitted_ns",
        "answer",
        "before_final",
        "block_keys",
        "cache_limit_tokens",
        "cache_write_tokens",
        "cached_tokens",
        "calls_tool",
        "cancelled",
        "complete",
        "content_write_ns",
        "dirty",
        "disconnect_at",
        "done",
        "done_ns",
        "error_at",
        "finish_reason",
        "first_token_ns",
        "first_write_ns",
        "held_until_ns",
        "input_tokens",
        "last_token_ns",
        "malformed_at",
        "next_due_ns",
        "output_tokens",
        "pending",
        "pending_content",
        "produced",
        "reasoning_tokens",
        "received_ns",
        "request_metrics",
        "send",
        "speculative",
        "stall",
        "stall_at",
        "stream",
        "wire",
        "writing",
    )

    def __init__(
        self,
        *,
        wire: StreamWire,
        stream: bool,
        input_tokens: int,
        output_tokens: int,
        reasoning_tokens: int,
        finish_reason: str,
        fault: FaultRule | None,
        send: Send,
        block_keys: tuple[bytes, ...] = (),
        answer: tuple[bytes, ...] | None = None,
        received_ns: int = 0,
        request_metrics: bool = False,
        speculative: Mapping[str, float] | None = None,
        cache_limit_tokens: int | None = None,
        calls_tool: bool = False,
    ) -> None:
        #: The right answer's tokens (:mod:`tokrate.sim.answers`), written as the
        #: content after any reasoning; None: the filler text.
        self.answer = answer
        #: The answer is a tool call: its tokens (``answer``: the arguments) are
        #: written as the wire's tool-call deltas (:meth:`StreamWire.tool_call`).
        self.calls_tool = calls_tool
        #: The prompt's prefix-cache blocks (empty: cache off) and, once admitted, the
        #: prompt tokens found cached (their prefill is skipped).
        self.block_keys = block_keys
        self.cached_tokens: int | None = None
        #: Anthropic: the tokens up to its last cache_control breakpoint, the only part
        #: that may be cached (None: all of it), and, once admitted, the tokens of the
        #: blocks this request wrote to the cache (reported apart from the reads).
        self.cache_limit_tokens = cache_limit_tokens
        self.cache_write_tokens: int | None = None
        #: The engine's stamps (perf_counter_ns): arrival, admission into the batch,
        #: first and last token produced; ``request_metrics`` sends them, as vLLM's
        #: per-request metrics object, with the usage.
        self.received_ns = received_ns
        self.admitted_ns: int | None = None
        self.first_token_ns: int | None = None
        self.last_token_ns: int | None = None
        self.request_metrics = request_metrics
        #: A speculative tier's ``speculative_decoding`` part of the metrics object.
        self.speculative = speculative
        self.wire = wire
        self.stream = stream
        self.input_tokens = input_tokens
        self.output_tokens = output_tokens
        self.reasoning_tokens = reasoning_tokens
        self.finish_reason = finish_reason
        self.send = send
        self.produced = 0
        self.pending: list[bytes] = []
        self.pending_content = 0
        self.content_write_ns: list[int] = []
        self.first_write_ns: int | None = None
        self.done_ns: int | None = None
        #: Called once, after done_ns is stamped and before the final write is handed to
        #: the socket: the truth log line then exists before a client can see [DONE].
        self.before_final: Callable[[], None] | None = None
        self.held_until_ns = 0
        self.writing = False
        self.dirty = False
        self.complete = False
        self.aborting = False
        self.cancelled = False
        self.next_due_ns = 0
        self.done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.disconnect_at = self.stall_at = self.malformed_at = self.error_at = -1
        self.stall: float = 0.0
        if fault is not None and stream:
            at = min(int(fault.params.get("at", 0.5) * output_tokens), output_tokens - 1)
            if fault.kind == "disconnect":
                self.disconnect_at = at
            elif fault.kind == "stall":
                self.stall_at, self.stall = at, fault.param("seconds")
            elif fault.kind == "malformed":
                self.malformed_at = at
            elif fault.kind == "stream_error":
                self.error_at = at

    def cancel(self) -> None:
        """The client went away: the engine drops this request at its next step."""
        self.cancelled = True
        self.pending = []
        if not self.done.done():
            self.done.cancel()

    @property
    def reserved_tokens(self) -> int:
        """KV cache reserved at admission: the whole context this request will reach."""
        return self.input_tokens + self.output_tokens

    @property
    def context_tokens(self) -> int:
        return self.input_tokens + self.produced

    def usage(self) -> TokenUsage:
        """Exact counts of what was produced so far (with the metrics object when
        asked for and the answer is complete)."""
        return TokenUsage(
            self.input_tokens,
            self.produced,
            min(self.produced, self.reasoning_tokens),
            cached_tokens=self.cached_tokens,
            cache_write_tokens=self.cache_write_tokens,
            metrics=self.metrics() if self.request_metrics else None,
        )

    def engine_stamps(self) -> dict[str, int | None]:
        """The truth log's ``engine`` object."""
        return {
            "admitted_ns": self.admitted_ns,
            "first_token_ns": self.first_token_ns,
            "last_token_ns": self.last_token_ns,
        }

    def metrics(self) -> dict[str, Any] | None:
        """vLLM's per-request metrics object, in seconds, from the engine's stamps:
        ``queue_time`` (arrival to admission), ``prefill_time`` (admission to first
        token), ``ttft`` (arrival to first token), ``decode_time`` (first to last token),
        ``mean_itl`` (decode_time / (tokens - 1)), ``num_generation_tokens``; None
        until the last token exists."""
        admitted, first, last = self.admitted_ns, self.first_token_ns, self.last_token_ns
        if admitted is None or first is None or last is None:
            return None
        decode_s = (last - first) / 1e9
        out: dict[str, Any] = {
            "queue_time": (admitted - self.received_ns) / 1e9,
            "prefill_time": (first - admitted) / 1e9,
            "ttft": (first - self.received_ns) / 1e9,
            "decode_time": decode_s,
            "mean_itl": decode_s / (self.produced - 1) if self.produced > 1 else 0.0,
            "num_generation_tokens": self.produced,
        }
        if self.speculative is not None:
            out["speculative_decoding"] = dict(self.speculative)
        return out

    def produce(self, n_tokens: int, spawn: Callable[[Awaitable[None]], None]) -> bool:
        """Generate the next chunk of up to ``n_tokens`` tokens; True when generation ended.

        Appends the chunk's event(s) to ``pending`` (a chunk straddling the reasoning
        boundary becomes a reasoning event and an answer event) and, after the last
        token, the wire's closing events (finish, usage, end of stream).
        """
        start = self.produced
        stop = min(start + n_tokens, self.output_tokens)
        now = perf_counter_ns()
        if self.first_token_ns is None:
            self.first_token_ns = now
        self.last_token_ns = now
        if self.stream:
            if start <= self.disconnect_at < stop:
                self.aborting = self.complete = True
                return True
            if start <= self.error_at < stop:
                self.pending.append(self.wire.failure(self.usage()))
                self.complete = True
                return True
            if start <= self.stall_at < stop:
                self.held_until_ns = perf_counter_ns() + int(self.stall * 1e9)
                spawn(self._release_after_hold(self.stall))
            c = self.wire
            r = self.reasoning_tokens
            if start <= self.malformed_at < stop:
                self.pending.append(c.malformed(token_bytes(start, stop)))
            elif stop <= r:
                self.pending.append(c.reasoning(token_bytes(start, stop)))
            elif start >= r:
                self.pending.append(self._answer_events(start, stop))
            else:
                self.pending.append(c.reasoning(token_bytes(start, r)))
                self.pending.append(self._answer_events(r, stop))
                self.pending_content += 1
            self.pending_content += 1
        self.produced = stop
        if stop < self.output_tokens:
            return False
        if self.stream:
            self.pending.append(self.wire.closing(self.finish_reason, self.usage()))
        self.complete = True
        return True

    def _answer_events(self, start: int, stop: int) -> bytes:
        """The events of answer tokens ``start`` .. ``stop - 1``: content, or the
        pieces of a tool call's arguments."""
        text = self._content(start, stop)
        return self.wire.tool_call(text) if self.calls_tool else self.wire.content(text)

    def answer_text(self) -> bytes:
        """The whole answer after any reasoning: what a non-streamed response carries."""
        return self._content(self.reasoning_tokens, self.output_tokens)

    def _content(self, start: int, stop: int) -> bytes:
        """Answer bytes of output tokens ``start`` .. ``stop - 1``."""
        if self.answer is None:
            return token_bytes(start, stop)
        r = self.reasoning_tokens
        return b"".join(self.answer[start - r : stop - r])

    async def _release_after_hold(self, seconds: float) -> None:
        await asyncio.sleep(seconds)
        self.held_until_ns = 0
        await self.flush()

    async def flush(self) -> None:
        """Write everything pending in one ``send``; resolve ``done`` after the last one."""
        if self.writing:
            return  # the writer in progress loops and takes what was added meanwhile
        self.writing = True
        try:
            while self.pending and not self.cancelled:
                if self.held_until_ns:
                    return  # a stall holds the writes; _release_after_hold flushes
                body = b"".join(self.pending)
                n_content = self.pending_content
                final = self.complete and not self.aborting
                self.pending = []
                self.pending_content = 0
                t = perf_counter_ns()
                if self.first_write_ns is None:
                    self.first_write_ns = t
                if n_content:
                    self.content_write_ns.extend([t] * n_content)
                if final:
                    self.done_ns = t
                    hook, self.before_final = self.before_final, None
                    if hook is not None:
                        hook()
                await self.send(
                    {"type": "http.response.body", "body": body, "more_body": not final}
                )
            if self.complete and not self.done.done() and not self.cancelled:
                if self.aborting:
                    self.done_ns = perf_counter_ns()
                    self.done.set_exception(InjectedDisconnect())
                else:
                    self.done.set_result(None)
        finally:
            self.writing = False


class _EngineBase(ABC):
    def __init__(
        self,
        timing: TierTiming,
        time_scale: float,
        *,
        prefix_cache: bool = False,
        prefix_cache_blocks: int | None = None,
    ) -> None:
        self.timing = timing
        #: The tier's prefix cache (``[simulator] prefix_cache``), of
        #: ``prefix_cache_blocks`` blocks (default: the tier's KV capacity; 0 for
        #: ``prefix_cache_cold``); the fixed-timing engine has none (its TTFT is fixed
        #: by definition).
        blocks = prefix_cache_blocks
        if blocks is None:
            blocks = timing.kv_capacity_tokens // BLOCK_TOKENS
        self.prefix_cache = (
            PrefixCache(blocks) if prefix_cache and not timing.tier.fixed_timing else None
        )
        self.time_scale = time_scale
        self._alarm = Alarm()
        self._task: asyncio.Task[None] | None = None
        self._background: set[asyncio.Task[None]] = set()
        self._dirty: list[SimRequest] = []
        self.tokens_per_chunk = timing.tier.tokens_per_chunk
        #: Output tokens generated since start (the speculative counters of /metrics).
        self.generated_tokens = 0

    def _ns(self, model_s: float) -> int:
        return int(model_s * 1e9 / self.time_scale)

    def _spawn(self, coro: Awaitable[None]) -> None:
        task = asyncio.ensure_future(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    def _ensure_running(self) -> None:
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._guarded())

    async def _guarded(self) -> None:
        # A bug in an engine must fail its requests (their handlers then answer with a
        # dropped connection), never leave them waiting forever.
        try:
            await self._run()
        except Exception as err:
            _log.exception("simulator engine for %s failed", self.timing.tier.name)
            for req in self._requests():
                if not req.done.done():
                    req.done.set_exception(err)
            self._forget()

    @abstractmethod
    def _requests(self) -> list[SimRequest]:
        """Every request the engine holds (queued or running)."""

    @abstractmethod
    def _forget(self) -> None:
        """Drop every held request (after a failure has been set on them)."""

    def _mark(self, req: SimRequest) -> None:
        if not req.dirty:
            req.dirty = True
            self._dirty.append(req)

    async def _flush_dirty(self) -> None:
        dirty, self._dirty = self._dirty, []
        for req in dirty:
            req.dirty = False
            await req.flush()

    @abstractmethod
    async def _run(self) -> None:
        """The engine loop: admit, step and write until the server stops."""

    def stats(self) -> dict[str, int]:
        return {}


class BatchEngine(_EngineBase):
    """Continuous batching: a queue, a batch capped by KV memory and ``max_batch``.

    Each step: admit queued requests (FCFS) whose reserved context fits; the step lasts
    prefill(joiners) + decode_step(batch); at its end every batch member emits one chunk
    (``tokens_per_chunk`` tokens), the joiners their first.
    """

    def __init__(
        self,
        timing: TierTiming,
        time_scale: float,
        *,
        prefix_cache: bool = False,
        prefix_cache_blocks: int | None = None,
    ) -> None:
        super().__init__(
            timing,
            time_scale,
            prefix_cache=prefix_cache,
            prefix_cache_blocks=prefix_cache_blocks,
        )
        self.queue: deque[SimRequest] = deque()
        self.batch: list[SimRequest] = []
        self.kv_used_tokens = 0
        self.max_batch_seen = 0
        self.max_queue_seen = 0

    def submit(self, req: SimRequest) -> None:
        self.queue.append(req)
        self.max_queue_seen = max(self.max_queue_seen, len(self.queue))
        self._ensure_running()
        self._alarm.poke()

    def _requests(self) -> list[SimRequest]:
        return [*self.batch, *self.queue]

    def _forget(self) -> None:
        self.batch, self.kv_used_tokens = [], 0
        self.queue.clear()

    def stats(self) -> dict[str, int]:
        out = {
            "queued": len(self.queue),
            "running": len(self.batch),
            "kv_used_tokens": self.kv_used_tokens,
            "max_batch_seen": self.max_batch_seen,
            "max_queue_seen": self.max_queue_seen,
        }
        if self.prefix_cache is not None:
            out["prefix_cache_hit_tokens"] = self.prefix_cache.hit_tokens
            out["prefix_cache_lookup_tokens"] = self.prefix_cache.lookup_tokens
        return out

    def _admit(self) -> list[SimRequest]:
        cap_tokens = self.timing.kv_capacity_tokens
        cap_batch = self.timing.tier.max_batch
        joiners: list[SimRequest] = []
        while self.queue and len(self.batch) < cap_batch:
            head = self.queue[0]
            if head.cancelled:
                self.queue.popleft()
                continue
            if self.kv_used_tokens + head.reserved_tokens > cap_tokens:
                break  # FCFS: the head waits for memory; nobody overtakes it
            self.queue.popleft()
            self.kv_used_tokens += head.reserved_tokens
            self.batch.append(head)
            joiners.append(head)
            head.admitted_ns = perf_counter_ns()
            if self.prefix_cache is not None:
                limit = head.cache_limit_tokens
                head.cached_tokens = self.prefix_cache.admit(
                    head.block_keys, head.input_tokens, limit
                )
                if limit is not None:
                    cacheable = min(limit, head.input_tokens) // BLOCK_TOKENS * BLOCK_TOKENS
                    head.cache_write_tokens = max(0, cacheable - head.cached_tokens)
        self.max_batch_seen = max(self.max_batch_seen, len(self.batch))
        return joiners

    async def _run(self) -> None:
        timing = self.timing
        step_start: int | None = None
        while True:
            if not self.queue and not self.batch:
                await self._flush_dirty()
                if not self.queue:
                    await self._alarm.sleep(None)
                step_start = None
                continue
            now = perf_counter_ns()
            if step_start is None:
                step_start = now
            joiners = self._admit()
            prefill_s = sum(
                timing.prefill_s(r.input_tokens - (r.cached_tokens or 0)) for r in joiners
            )
            ctx = sum(r.context_tokens for r in self.batch)
            deadline = step_start + self._ns(prefill_s + timing.decode_step_s(len(self.batch), ctx))
            if deadline > now:
                # Nothing more is due before this deadline: write what is, then sleep.
                await self._flush_dirty()
                now = perf_counter_ns()
                if deadline > now:
                    await asyncio.sleep((deadline - now) / 1e9)
            step_start = deadline
            keep: list[SimRequest] = []
            for req in self.batch:
                if req.cancelled:
                    self.kv_used_tokens -= req.reserved_tokens
                    continue
                before = req.produced
                done = req.produce(self.tokens_per_chunk, self._spawn)
                self.generated_tokens += req.produced - before
                if done:
                    self.kv_used_tokens -= req.reserved_tokens
                else:
                    keep.append(req)
                self._mark(req)
            self.batch = keep


class FixedEngine(_EngineBase):
    """Exact timing: chunk ``c`` of a request is due at received + TTFT + c x ITL."""

    def __init__(
        self,
        timing: TierTiming,
        time_scale: float,
        *,
        prefix_cache: bool = False,
        prefix_cache_blocks: int | None = None,
    ) -> None:
        super().__init__(timing, time_scale, prefix_cache=False)
        tier = timing.tier
        self._ttft_ns = int((tier.fixed_ttft_ms or 0.0) * 1e6 / time_scale)
        self._itl_ns = int((tier.fixed_itl_ms or 0.0) * 1e6 / time_scale)
        self._heap: list[tuple[int, int, SimRequest]] = []
        self._seq = 0

    def _requests(self) -> list[SimRequest]:
        return [entry[2] for entry in self._heap]

    def _forget(self) -> None:
        self._heap.clear()

    def stats(self) -> dict[str, int]:
        return {"running": len(self._heap)}

    def submit(self, req: SimRequest, received_ns: int) -> None:
        req.next_due_ns = received_ns + self._ttft_ns
        self._seq += 1
        heapq.heappush(self._heap, (req.next_due_ns, self._seq, req))
        self._ensure_running()
        self._alarm.poke()

    async def _run(self) -> None:
        heap = self._heap
        itl = self._itl_ns
        k = self.tokens_per_chunk
        while True:
            if not heap:
                await self._alarm.sleep(None)
                continue
            now = perf_counter_ns()
            if heap[0][0] > now:
                await self._alarm.sleep(max((heap[0][0] - now) / 1e9, MIN_SLEEP_S))
                continue
            while heap and heap[0][0] <= now:
                _, seq, req = heapq.heappop(heap)
                if req.cancelled:
                    continue
                finished = False
                while req.next_due_ns <= now:
                    if req.produce(k, self._spawn):
                        finished = True
                        break
                    req.next_due_ns += itl
                self._mark(req)
                if not finished:
                    heapq.heappush(heap, (req.next_due_ns, seq, req))
            await self._flush_dirty()
