"""What the llama-server tests share (llama.cpp directly and through a gateway): the
model settings that make a record name its server task, the run-and-pair loop with its
bounded retries, and the decode-agreement check against llama-server's own timings."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from real_servers import harness
from real_servers.models import GGUF_MAX_TOKENS, GGUF_SHAPES
from real_servers.servers import Server
from tokrate.spec.types import ModelSpec

__all__ = [
    "DECODE_AGREEMENT",
    "SHAPES",
    "assert_decode_agrees",
    "llama_model",
    "measured_pairs",
]

#: Client vs server decode speed, per request (issue 15).
DECODE_AGREEMENT = 0.02
SHAPES = {s.name: s for s in GGUF_SHAPES}


def llama_model(name: str) -> ModelSpec:
    return ModelSpec(
        "llama",
        name,
        params_b=SHAPES[name].params_b,
        bytes_per_param=2.0,
        extra_body=(("cache_prompt", False), ("ignore_eos", True)),
    )


def measured_pairs(
    server: Server,
    tmp: Path,
    run_id: str,
    *,
    concurrency: int,
    requests: int,
    base_url: str | None = None,
    model: ModelSpec | None = None,
    max_tokens: int | None = None,
    **bench_kwargs: Any,
) -> list[tuple[dict[str, Any], harness.LlamaTimings]]:
    """Records paired with llama-server's tasks (see harness.run_and_match), sent to
    ``server`` or, with ``base_url``/``model``, through a gateway in front of it.

    When the agreement misses, the run is measured again, up to three runs in all; the
    bound is never loosened. On a shared 2-core machine other processes can starve
    llama-server's HTTP thread (its timings count compute, not writes), so tokens it
    computed on time reach the socket in a burst: TTFT late, decode "faster" than the
    server's own figure (seen: +250% on one request of four, TTFT 238 ms against 9 ms).
    tokrate measured that burst correctly; a disagreement in every one of three runs is
    a real one."""
    size = next(iter(server.models))
    tokens = max_tokens or GGUF_MAX_TOKENS[size]
    for attempt in (1, 2, 3):
        pairs, run = harness.run_and_match(
            server.log,
            tmp,
            f"{run_id}-{attempt}",
            base_url or server.base_url,
            model or llama_model(size),
            concurrency=concurrency,
            requests=requests,
            max_tokens=tokens,
            **bench_kwargs,
        )
        if abs(harness.worst_decode_diff(pairs)) <= DECODE_AGREEMENT:
            break
        lag = run.info.loop_lag
        print(f"{run_id}: run {attempt} disagrees (tokrate loop lag: {lag}); measuring again")  # noqa: T201
    return pairs


def assert_decode_agrees(
    pairs: list[tuple[dict[str, Any], harness.LlamaTimings]], max_tokens: int
) -> None:
    """Per request: 1/TPOT within 2% of the server's decode speed, all tokens counted
    from usage, TTFT no shorter than the server's prompt processing."""
    lines = []
    for rec, task in pairs:
        client_tps = 1.0 / rec["tpot_s"]
        server_tps = task.decode_tps
        rel = client_tps / server_tps - 1.0
        lines.append(
            f"{rec['prompt_id']}: client {client_tps:8.2f} tok/s, server {server_tps:8.2f} tok/s "
            f"({rel:+.2%}), ttft {rec['ttft_s'] * 1000:7.1f} ms >= prompt {task.prompt_ms:6.1f} ms"
        )
        assert rec["tokens_source"] == "usage"
        assert rec["output_tokens"] == task.predicted_n == max_tokens
        assert rec["ttft_s"] * 1000.0 >= task.prompt_ms
    print("\n".join(lines))  # noqa: T201 -- the per-request table, shown with -s
    assert abs(harness.worst_decode_diff(pairs)) <= DECODE_AGREEMENT, "\n".join(lines)
