"""``GET /metrics``: the simulator's scheduler state in Prometheus text format.

The simulator speaks vLLM's metric names, labelled ``model_name`` per tier, so a run
against it exercises the same role mapping as a run against vLLM:
``vllm:num_requests_running`` (requests in the batch), ``vllm:num_requests_waiting``
(requests queued for KV memory or a batch slot) and ``vllm:kv_cache_usage_perc``
(reserved KV tokens / capacity, a fraction: 1 = full). A fixed-timing tier has no
batch or KV model: it reports its running requests only. Values are read when the
page is rendered, in the server's event loop, so they are one consistent snapshot.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from tokrate.sim.model import TierTiming
from tokrate.sim.request_plan import BadRequest
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
    timings: Mapping[str, TierTiming], engines: Mapping[str, BatchEngine | FixedEngine]
) -> bytes:
    """The page: one gauge family per role, one sample per tier."""
    values = {name: _values(t, engines.get(name)) for name, t in timings.items()}
    lines = []
    for i, (metric, help_text) in enumerate(_GAUGES):
        lines.append(f"# HELP {metric} {help_text}")
        lines.append(f"# TYPE {metric} gauge")
        for name, vals in values.items():
            if i < len(vals):
                lines.append(f'{metric}{{model_name="{_label(name)}"}} {vals[i]!r}')
    return ("\n".join(lines) + "\n").encode()


async def serve_metrics(
    send: Callable[[dict[str, Any]], Awaitable[None]],
    method: str,
    timings: Mapping[str, TierTiming],
    engines: Mapping[str, BatchEngine | FixedEngine],
) -> None:
    """Answer ``GET /metrics`` (BadRequest 405 for another method)."""
    if method != "GET":
        raise BadRequest(
            405, f"Method {method} not allowed; use GET", "invalid_request_error", None, None
        )
    body = render_metrics(timings, engines)
    headers = [(b"content-type", CONTENT_TYPE), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": body, "more_body": False})
