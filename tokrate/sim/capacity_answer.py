"""The simulator's own capacity answer: a pure replay of :class:`BatchEngine`'s rules
in model time, for checking a measured capacity search against what the batching
model implies.

Closed loop with ``concurrency`` clients, every request ``input_tokens`` in and
``output_tokens`` out. The replay follows the engine step by step: at each step start
the queue is admitted FCFS while the reserved context fits the KV cache and the batch
``max_batch``; the step lasts ``prefill(joiners) + decode_step(batch, context)``; at
its end every member produces ``tokens_per_chunk`` tokens (a joiner its first). A
finished request's client sends its next one ``client_gap_s`` later, which the engine
sees at the first step that *starts* after that (it admits before it writes a step's
tokens, so the reply reaches the client only once the next step has begun).

TTFT = first token - send, E2E = last token - send, TPOT = (E2E - TTFT) / (output - 1),
all model seconds (divide by time_scale for wall time). Network and client time are
not modelled beyond ``client_gap_s``; the measured capacity therefore sits at or just
below this answer.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass

from tokrate.sim.model import TierTiming

__all__ = ["ReplayedRequest", "closed_loop_capacity", "replay_closed_loop"]


@dataclass(frozen=True, slots=True)
class ReplayedRequest:
    """One replayed request's timings in model seconds."""

    ttft_s: float
    tpot_s: float | None
    e2e_s: float

    def meets(self, slo: Mapping[str, float | None]) -> bool:
        values = {"ttft_s": self.ttft_s, "tpot_s": self.tpot_s, "e2e_s": self.e2e_s}
        return all(
            lim is None or values.get(k) is None or (values[k] or 0.0) <= lim
            for k, lim in slo.items()
        )


class _Req:
    __slots__ = ("client", "first", "produced", "sent")

    def __init__(self, client: int, sent: float) -> None:
        self.client = client
        self.sent = sent
        self.produced = 0
        self.first: float | None = None


def replay_closed_loop(
    timing: TierTiming,
    concurrency: int,
    input_tokens: int,
    output_tokens: int,
    *,
    requests: int,
    client_gap_s: float = 1e-4,
    staggered: bool = False,
) -> list[ReplayedRequest]:
    """The first ``requests`` completed requests of ``concurrency`` clients: all sent
    at 0 (lockstep: identical requests then join, finish and rejoin together), or
    ``staggered`` evenly over one request's duration at this load (each client keeps
    its phase, so joins, and their prefills, spread over the steps: what a measured
    closed loop drifts to once the network's jitter has broken the lockstep)."""
    tier = timing.tier
    reserved = input_tokens + output_tokens
    spread = 0.0
    if staggered:
        context = concurrency * (input_tokens + output_tokens // 2)
        spread = timing.prefill_s(input_tokens) + output_tokens * timing.decode_step_s(
            concurrency, context
        )
    waiting: deque[_Req] = deque(_Req(c, spread * c / concurrency) for c in range(concurrency))
    batch: list[_Req] = []
    kv_used = 0
    now = 0.0
    done: list[ReplayedRequest] = []
    while len(done) < requests:
        if not batch and waiting and waiting[0].sent > now:
            now = waiting[0].sent  # idle until the next send
        joiners = 0
        while waiting and waiting[0].sent <= now and len(batch) < tier.max_batch:
            if kv_used + reserved > timing.kv_capacity_tokens:
                break
            batch.append(waiting.popleft())
            kv_used += reserved
            joiners += 1
        context = sum(input_tokens + r.produced for r in batch)
        now += joiners * timing.prefill_s(input_tokens) + timing.decode_step_s(len(batch), context)
        keep = []
        for r in batch:
            r.produced = min(r.produced + tier.tokens_per_chunk, output_tokens)
            if r.first is None:
                r.first = now
            if r.produced < output_tokens:
                keep.append(r)
                continue
            kv_used -= reserved
            tpot = (now - r.first) / (output_tokens - 1) if output_tokens > 1 else None
            done.append(ReplayedRequest(r.first - r.sent, tpot, now - r.sent))
            waiting.append(_Req(r.client, now + client_gap_s))
        batch = keep
    return done


def closed_loop_capacity(
    timing: TierTiming,
    input_tokens: int,
    output_tokens: int,
    slo: Mapping[str, float | None],
    *,
    goodput: float = 0.9,
    time_scale: float = 1.0,
    max_level: int = 512,
    requests_per_stream: int = 12,
    staggered: bool = False,
) -> int:
    """The highest concurrency below the first one whose steady-state requests (after
    one request per stream of warm-up) meet ``slo`` (wall seconds, at ``time_scale``)
    less than ``goodput`` of the time; 0 when c = 1 already misses. ``staggered``: as
    :func:`replay_closed_loop` (the two agree when prefill is short next to a step)."""
    model_slo = {k: None if v is None else v * time_scale for k, v in slo.items()}
    for c in range(1, max_level + 1):
        n = c * (requests_per_stream + 1)
        done = replay_closed_loop(
            timing, c, input_tokens, output_tokens, requests=n, staggered=staggered
        )[c:]
        met = sum(1 for r in done if r.meets(model_slo)) / len(done)
        if met < goodput:
            return c - 1
    return max_level
