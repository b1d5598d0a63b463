"""Synthetic run folders from the physics of docs/definitions.md, for tests, demos and benchmarks.

``synthetic_run`` writes a complete run folder (records.parquet + run.json, layout 1)
whose records follow the bandwidth model: per-stream decode speed = efficiency x
bandwidth / (active params x bytes per param), slowed by batching under concurrency;
TTFT = a fixed network/queue floor + compute-bound prefill (2 x active params x input
tokens / FLOP/s). Generated column-wise with numpy (no per-record Python except the
optional server-timing JSON), so a million records take about a second. Nothing here touches the network.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import polars as pl

from tokrate.hardware import get_hardware
from tokrate.physics import DEFAULT_TIER_SIZES, decode_bound_tps, prefill_s
from tokrate.runfolder.records_frame import RECORD_POLARS_SCHEMA

__all__ = [
    "SyntheticLoad",
    "SyntheticTier",
    "default_synthetic_tiers",
    "synthetic_frame",
    "synthetic_run",
]


@dataclass(frozen=True, slots=True)
class SyntheticTier:
    name: str
    params_b: float
    active_params_b: float
    bytes_per_param: float = 2.0
    gpus: int = 1
    price_out_per_m: float | None = None
    #: Set with price_out_per_m (a hosted tier has both); None with it: free input.
    price_in_per_m: float | None = None


def default_synthetic_tiers() -> tuple[SyntheticTier, ...]:
    """The simulator's default tier sizes (:data:`tokrate.physics.DEFAULT_TIER_SIZES`)."""
    return tuple(
        SyntheticTier(t.name, t.params_b, t.active_params_b, t.bytes_per_param, t.gpus)
        for t in DEFAULT_TIER_SIZES
    )


@dataclass(frozen=True, slots=True)
class SyntheticLoad:
    """How the synthetic requests are shaped. ``chunk_offsets`` False leaves
    ``chunk_offsets_s`` empty (smaller frames for benchmarks); ``error_rate`` of
    requests fail as http_5xx with an error body. ``server_timings``: each ok request
    carries llama.cpp-style timings of a server that decodes ``server_speedup`` x as
    fast as the client saw (prompt_ms = 80% of TTFT). ``buffered``: that share of the
    requests arrives like a proxy-buffered stream (its first third in one read, then
    every 8 chunks, each read with its last chunk; TTFT and TPOT as the client would
    see them)."""

    concurrency: Sequence[int] = (1,)
    requests_per_level: int = 40
    hardware: str = "a100-80g"
    efficiency: float = 0.8
    output_tokens: int = 64
    input_tokens: int = 256
    chunk_offsets: bool = True
    error_rate: float = 0.0
    endpoint: str = "sim"
    tasks: Sequence[str] = ("chat", "code")
    seed: int = 0
    start_at: float = 1_780_000_000.0
    server_timings: bool = False
    server_speedup: float = 1.01
    buffered: float = 0.0


def synthetic_frame(
    *, run_id: str, tiers: Sequence[SyntheticTier], load: SyntheticLoad = SyntheticLoad()
) -> pl.DataFrame:
    """Records (RECORD_POLARS_SCHEMA) for every tier x concurrency level. Requests of
    one level run back to back, ``load.concurrency`` at a time."""
    rng = np.random.default_rng(load.seed)
    gpu = get_hardware(load.hardware)
    parts: list[pl.DataFrame] = []
    t_cursor = load.start_at
    index = 0
    for c in load.concurrency:
        for tier in tiers:
            n = load.requests_per_level
            hw = gpu.scaled(tier.gpus)
            bound = decode_bound_tps(
                hw.bandwidth_bytes_per_s, tier.active_params_b, tier.bytes_per_param
            )
            # Batching: c streams share each weight read; per-stream speed falls slowly.
            per_stream = bound * load.efficiency / (1.0 + 0.04 * (c - 1))
            tps = per_stream * rng.lognormal(0.0, 0.04, n).clip(0.8, 1.2)
            tps = np.minimum(tps, bound * 0.999)
            prefill = prefill_s(
                tier.active_params_b, load.input_tokens, hw.flops_per_s * load.efficiency
            )
            ttft = (0.01 + prefill * (1.0 + 0.3 * (c - 1))) * rng.lognormal(0.0, 0.1, n)
            out_tok = np.full(n, load.output_tokens, dtype=np.int64)
            tpot = 1.0 / tps
            e2e = ttft + tpot * (out_tok - 1)
            # Chunks as the server sent them; a held-back stream's first read (its TTFT
            # as the client sees it) comes with chunk n/3, its TPOT what is left / (n - 1).
            sent_ttft, sent_tpot = ttft, tpot
            held = rng.random(n) < load.buffered
            if held.any():
                first_read = sent_ttft + sent_tpot * np.maximum(out_tok // 3 - 1, 0)
                ttft = np.where(held, first_read, sent_ttft)
                tpot = np.where(held, (e2e - ttft) / np.maximum(out_tok - 1, 1), sent_tpot)
            slot = np.arange(n) // max(1, c)
            started = t_cursor + slot * float(np.mean(e2e) if n else 0.0)
            failed = rng.random(n) < load.error_rate
            frame = pl.DataFrame(
                {
                    "run_id": run_id,
                    "endpoint": load.endpoint,
                    "model": tier.name,
                    "scenario": f"c{c}",
                    "prompt_id": pl.Series(np.arange(n) % 50).cast(pl.String),
                    "task": pl.Series(np.array(load.tasks)[np.arange(n) % len(load.tasks)]),
                    "request_index": np.arange(index, index + n),
                    "started_at": started,
                    "t0_ns": (started * 1e9).astype(np.int64),
                    "status": np.where(failed, "error", "ok"),
                    "ttft_s": np.where(failed, np.nan, ttft),
                    "first_byte_s": np.where(failed, np.nan, ttft * 0.9),
                    "first_answer_s": np.where(failed, np.nan, ttft),
                    "e2e_s": np.where(failed, 0.05, e2e),
                    "tpot_s": np.where(failed, np.nan, tpot),
                    "input_tokens": np.full(n, load.input_tokens),
                    "output_tokens": np.where(failed, 0, out_tok),
                    "tokens_source": "usage",
                    "_failed": failed,
                    "http_status": np.where(failed, 503, 200),
                    "warmup": False,
                    "worker": "local",
                    "node_id": "synthetic",
                    "api": "chat",
                    "client": "fast",
                    "concurrency": c,
                    "attempt": 1,
                    "content_chunks": np.where(failed, 0, out_tok),
                    "bytes_received": np.where(failed, 0, out_tok * 120),
                }
            ).with_columns(
                pl.col(pl.Float64).fill_nan(None),
                pl.when(pl.col("_failed"))
                .then(None)
                .otherwise(pl.lit("length"))
                .alias("finish_reason"),
                pl.when(pl.col("_failed")).then(pl.lit("http_5xx")).alias("error_class"),
                pl.when(pl.col("_failed"))
                .then(pl.lit("upstream error: overloaded"))
                .alias("error_message"),
            )
            if load.server_timings:
                frame = frame.with_columns(
                    _server_timings(sent_tpot, sent_ttft, out_tok, load, failed)
                )
            if load.chunk_offsets and n:
                steps = np.arange(load.output_tokens, dtype=np.float64)
                offs = sent_ttft[:, None] + sent_tpot[:, None] * steps[None, :]
                # A held-back stream: its first third arrives with its last chunk, then
                # each run of 8 chunks with its last one.
                third = max(1, load.output_tokens // 3)
                by_eight = np.minimum(third + ((steps - third) // 8 + 1) * 8 - 1, steps[-1])
                last_of_read = np.where(steps < third, third - 1, by_eight)
                offs[held] = offs[held][:, last_of_read.astype(np.int64)]
                frame = frame.with_columns(
                    pl.Series("chunk_offsets_s", offs).cast(pl.List(pl.Float64))
                )
                frame = frame.with_columns(
                    pl.when(pl.col("status") == "ok")
                    .then(pl.col("chunk_offsets_s"))
                    .otherwise(pl.lit([], dtype=pl.List(pl.Float64)))
                )
            parts.append(frame)
            index += n
        t_cursor += 600.0
    full = pl.concat(parts, how="diagonal_relaxed")
    empty_list = pl.lit([], dtype=pl.List(pl.Float64))
    return full.select(
        [
            pl.col(name).cast(dtype)
            if name in full.columns
            else (empty_list if name == "chunk_offsets_s" else pl.lit(None, dtype=dtype)).alias(
                name
            )
            for name, dtype in RECORD_POLARS_SCHEMA.items()
        ]
    )


def _server_timings(
    tpot: np.ndarray, ttft: np.ndarray, out_tok: np.ndarray, load: SyntheticLoad, failed: np.ndarray
) -> pl.Series:
    """llama.cpp ``timings`` JSON per request (None on a failed one)."""
    predicted_ms = tpot / load.server_speedup * (out_tok - 1) * 1000.0
    values = [
        None
        if bad
        else orjson.dumps(
            {
                "predicted_n": int(n),
                "predicted_ms": float(ms),
                "predicted_per_token_ms": float(ms / (n - 1)) if n > 1 else None,
                "predicted_per_second": float(n / ms * 1000.0) if ms > 0 else None,
                "prompt_n": load.input_tokens,
                "prompt_ms": float(first * 0.8 * 1000.0),
                "cache_n": 0,
            }
        ).decode()
        for n, ms, first, bad in zip(out_tok, predicted_ms, ttft, failed, strict=True)
    ]
    return pl.Series("server_timings", values, dtype=pl.String)


def synthetic_run(
    path: Path,
    *,
    run_id: str = "synthetic",
    tiers: Sequence[SyntheticTier] | None = None,
    concurrency: Sequence[int] = (1,),
    hardware: str = "a100-80g",
    slo: dict[str, float | None] | None = None,
    status: str = "complete",
    **kwargs: Any,
) -> Path:
    """Write a run folder at ``path`` (created) and return it. ``kwargs`` go to
    :class:`SyntheticLoad`."""
    tiers = tuple(tiers or default_synthetic_tiers())
    load = SyntheticLoad(concurrency=concurrency, hardware=hardware, **kwargs)
    frame = synthetic_frame(run_id=run_id, tiers=tiers, load=load)
    path.mkdir(parents=True, exist_ok=True)
    frame.write_parquet(path / "records.parquet")
    endpoint = kwargs.get("endpoint", "sim")
    run = {
        "layout_version": 1,
        "kind": "tokrate-run",
        "run_id": run_id,
        "status": status,
        "started_at": "2026-06-01T00:00:00Z",
        "ended_at": "2026-06-01T00:10:00Z",
        "tokrate_version": "0.1.0",
        "host": "synthetic",
        "config": {"load": {"concurrency": list(concurrency)}},
        "targets": [
            {
                "endpoint": endpoint,
                "model": t.name,
                "base_url": "http://127.0.0.1:0/v1",
                "params_b": t.params_b,
                "active_params_b": t.active_params_b,
                "bytes_per_param": t.bytes_per_param,
                "price_in_per_m": t.price_in_per_m
                if t.price_in_per_m is not None or t.price_out_per_m is None
                else 0.0,
                "price_out_per_m": t.price_out_per_m,
                "gpu_hourly_usd": None,
                "gpus": t.gpus,
                "simulated": True,
            }
            for t in tiers
        ],
        "scenarios": [
            {"name": f"c{c}", "concurrency": c, "rate_rps": None, "arrival": None}
            for c in concurrency
        ],
        "slo": slo or {},
        "hardware": hardware,
        "warnings": [],
        "counts": {"scheduled": frame.height},
    }
    (path / "run.json").write_bytes(orjson.dumps(run, option=orjson.OPT_INDENT_2))
    if status != "complete":
        (path / "records.parquet").unlink()
        lines = [orjson.dumps(r) for r in frame.to_dicts()]
        (path / "records.jsonl").write_bytes(b"\n".join(lines) + b"\n")
    return path
