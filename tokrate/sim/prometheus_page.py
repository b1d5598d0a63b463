"""``GET /metrics``: the simulator's scheduler state in Prometheus text format.

The simulator speaks vLLM's metric names, labelled ``model_name`` per tier, so a run
against it exercises the same role mapping as a run against vLLM:
``vllm:num_requests_running`` (requests in the batch), ``vllm:num_requests_waiting``
(requests queued for KV memory or a batch slot) and ``vllm:kv_cache_usage_perc``
(reserved KV tokens / capacity, a fraction: 1 = full). A fixed-timing tier has no
batch or KV model: it reports its running requests only. Values are read when the
page is rendered, in the server's event loop, so they are one consistent snapshot.

Counters, as vLLM names them, where a tier has what they count:

- a tier with a prefix cache (``--prefix-cache``, ``--prefix-cache-cold``):
  ``vllm:prefix_cache_queries_total`` / ``vllm:prefix_cache_hits_total``, the prompt
  tokens looked up in its cache and those found there since start (the sums of every
  request's ``input_tokens`` and its usage ``cached_tokens``);
- a speculative tier: ``vllm:spec_decode_num_drafts_total``,
  ``vllm:spec_decode_num_draft_tokens_total`` and
  ``vllm:spec_decode_num_accepted_tokens_total``, from the tokens it generated: each
  verification step yields the tier's ``speculative_speedup`` tokens on average (one
  verified, the rest accepted drafts) after drafting ``draft_tokens``, so over G
  tokens there were G / speedup steps (rounded), steps x draft_tokens drafted tokens
  and G - steps accepted ones.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from tokrate.sim.bad_request import BadRequest
from tokrate.sim.model import TierTiming
from tokrate.sim.scheduler import BatchEngine, FixedEngine

__all__ = ["CONTENT_TYPE", "render_metrics", "serve_metrics"]

CONTENT_TYPE = b"text/plain; version=0.0.4; charset=utf-8"

_GAUGES = (
    ("vllm:num_requests_running", "Number of requests in the model's batch."),
    ("vllm:num_requests_waiting", "Number of requests waiting for a batch slot or KV memory."),
    (
        "vllm:kv_cache_usage_perc",
        "KV-cache usage (reserved tokens / capacity); 1 means 100 percent.",
    ),
)


def _label(value: str) -> str:
    """A label value escaped as the text format wants (backslash, quote, newline)."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _values(timing: TierTiming, engine: BatchEngine | FixedEngine | None) -> tuple[float, ...]:
    """(running, waiting, KV use) of one tier; KV use only for batching tiers."""
    if isinstance(engine, FixedEngine):
        return (float(engine.stats()["running"]),)
    if timing.tier.fixed_timing:
        return (0.0,)
    if engine is None:  # no request yet: the engine starts on first use
        return (0.0, 0.0, 0.0)
    kv = engine.kv_used_tokens / timing.kv_capacity_tokens if timing.kv_capacity_tokens else 0.0
    return (float(len(engine.batch)), float(len(engine.queue)), kv)


def render_metrics(
    timings: Mapping[str, TierTiming],
    engines: Mapping[str, BatchEngine | FixedEngine],
    prefix_cache: bool = False,
) -> bytes:
    """The page: one gauge family per role, one sample per tier; then the counters of
    the tiers that have them (module doc; ``prefix_cache``: the simulator keeps one)."""
    values = {name: _values(t, engines.get(name)) for name, t in timings.items()}
    lines = []
    for i, (metric, help_text) in enumerate(_GAUGES):
        lines.append(f"# HELP {metric} {help_text}")
        lines.append(f"# TYPE {metric} gauge")
        for name, vals in values.items():
            if i < len(vals):
                lines.append(f'{metric}{{model_name="{_label(name)}"}} {vals[i]!r}')
    lines += _counter_lines(timings, engines, prefix_cache)
    return ("\n".join(lines) + "\n").encode()


_COUNTERS = (
    ("vllm:prefix_cache_queries", "Prefix cache queries, in prompt tokens."),
    ("vllm:prefix_cache_hits", "Prefix cache hits, in prompt tokens."),
    ("vllm:spec_decode_num_drafts", "Speculative decoding verification steps."),
    ("vllm:spec_decode_num_draft_tokens", "Speculative decoding drafted tokens."),
    ("vllm:spec_decode_num_accepted_tokens", "Speculative decoding accepted tokens."),
)


def _counters(
    timing: TierTiming, engine: BatchEngine | FixedEngine | None, prefix_cache: bool
) -> dict[str, int]:
    """Counter family -> value of one tier (only the counters it has; 0 before its
    first request, as a server's counters start at 0)."""
    tier = timing.tier
    if tier.fixed_timing:
        return {}
    out: dict[str, int] = {}
    cache = engine.prefix_cache if engine is not None else None
    if cache is not None or (engine is None and prefix_cache):
        out["vllm:prefix_cache_queries"] = cache.lookup_tokens if cache else 0
        out["vllm:prefix_cache_hits"] = cache.hit_tokens if cache else 0
    if tier.speculative_acceptance is not None:
        generated = engine.generated_tokens if isinstance(engine, BatchEngine) else 0
        steps = round(generated / tier.speculative_speedup)
        out["vllm:spec_decode_num_drafts"] = steps
        out["vllm:spec_decode_num_draft_tokens"] = steps * tier.draft_tokens
        out["vllm:spec_decode_num_accepted_tokens"] = generated - steps
    return out


def _counter_lines(
    timings: Mapping[str, TierTiming],
    engines: Mapping[str, BatchEngine | FixedEngine],
    prefix_cache: bool,
) -> list[str]:
    per_tier = {name: _counters(t, engines.get(name), prefix_cache) for name, t in timings.items()}
    lines = []
    for family, help_text in _COUNTERS:
        samples = [(name, c[family]) for name, c in per_tier.items() if family in c]
        if not samples:
            continue
        lines.append(f"# HELP {family} {help_text}")
        lines.append(f"# TYPE {family} counter")
        for name, value in samples:
            lines.append(f'{family}_total{{model_name="{_label(name)}"}} {float(value)!r}')
    return lines


async def serve_metrics(
    send: Callable[[dict[str, Any]], Awaitable[None]],
    method: str,
    timings: Mapping[str, TierTiming],
    engines: Mapping[str, BatchEngine | FixedEngine],
    prefix_cache: bool = False,
) -> None:
    """Answer ``GET /metrics`` (BadRequest 405 for another method)."""
    if method != "GET":
        raise BadRequest(
            405, f"Method {method} not allowed; use GET", "invalid_request_error", None, None
        )
    body = render_metrics(timings, engines, prefix_cache)
    headers = [(b"content-type", CONTENT_TYPE), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": body, "more_body": False})
