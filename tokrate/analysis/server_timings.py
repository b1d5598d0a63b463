"""Server-reported timings (llama.cpp ``timings``) as per-request columns.

Records keep the timing object a server sent with its stream in ``server_timings``
(a JSON string in records.parquet: ``predicted_n``, ``predicted_ms``,
``predicted_per_token_ms``, ``predicted_per_second``, ``prompt_n``, ``prompt_ms``,
``cache_n``). llama-server's ``predicted_per_token_ms`` is ``predicted_ms /
(predicted_n - 1)``: the same n-1 gaps as tokrate's TPOT, so the two decode speeds
compare like for like. Units: tokens/s for speeds, seconds for times (the server's
milliseconds / 1000). Unknown is None.

- ``server_decode_tps`` = ``(predicted_n - 1) / predicted_ms`` x 1000 (computed from
  ``predicted_ms``: the per-token figure is rounded in some builds), else ``1000 /
  predicted_per_token_ms``; None for fewer than 2 predicted tokens.
- ``server_prompt_s`` = ``prompt_ms`` / 1000 (the server's prefill time).
- ``decode_vs_server`` = client ``decode_tps`` / ``server_decode_tps`` - 1 per request
  (negative: the client saw slower decoding than the server reported, i.e. what the
  network and the client add).
- ``ttft_minus_prompt_s`` = ``ttft_s`` - ``server_prompt_s`` (>= 0 on an honest pair:
  the first token cannot reach the client before the prompt was processed).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

import polars as pl

from tokrate.analysis.stats import dist_exprs, row_to_distribution
from tokrate.runfolder.summary import Distribution, ServerTimings

__all__ = [
    "SERVER_COLUMNS",
    "server_aggs",
    "server_entry",
    "server_timing_exprs",
    "versus_server_exprs",
]

#: The columns the two expression lists add, in order.
SERVER_COLUMNS: Final = (
    "server_decode_tps",
    "server_prompt_s",
    "decode_vs_server",
    "ttft_minus_prompt_s",
)


def _field(name: str) -> pl.Expr:
    return pl.col("server_timings").str.json_path_match(f"$.{name}").cast(pl.Float64, strict=False)


def server_timing_exprs() -> list[pl.Expr]:
    """``server_decode_tps`` and ``server_prompt_s`` from the JSON column."""
    n, ms, per_token = (
        _field("predicted_n"),
        _field("predicted_ms"),
        _field("predicted_per_token_ms"),
    )
    from_ms = pl.when((n >= 2) & (ms > 0)).then((n - 1) / ms * 1000.0)
    from_per_token = pl.when(per_token > 0).then(1000.0 / per_token)
    prompt_ms = _field("prompt_ms")
    return [
        from_ms.otherwise(from_per_token).alias("server_decode_tps"),
        pl.when(prompt_ms >= 0).then(prompt_ms / 1000.0).alias("server_prompt_s"),
    ]


def versus_server_exprs() -> list[pl.Expr]:
    """Paired client-vs-server differences; needs ``decode_tps``, ``ttft_s`` and the
    columns of :func:`server_timing_exprs`."""
    server = pl.col("server_decode_tps")
    return [
        pl.when(server > 0).then(pl.col("decode_tps") / server - 1.0).alias("decode_vs_server"),
        (pl.col("ttft_s") - pl.col("server_prompt_s")).alias("ttft_minus_prompt_s"),
    ]


def server_aggs(ok: pl.Expr) -> list[pl.Expr]:
    """Group aggregations behind :class:`~tokrate.runfolder.summary.ServerTimings` over the
    requests ``ok`` selects, on a :func:`tokrate.analysis.metrics.derive`-d frame."""
    timed = ok & pl.col("server_timings").is_not_null()
    return [
        timed.sum().alias("server__n"),
        *dist_exprs(pl.col("server_decode_tps").filter(timed), "server__decode_tps"),
        *dist_exprs(pl.col("server_prompt_s").filter(timed), "server__prompt_s"),
        pl.col("decode_vs_server").filter(timed).median().alias("server__decode_vs_server_p50"),
        pl.col("ttft_minus_prompt_s").filter(timed).median().alias("server__ttft_minus_p50"),
        pl.col("ttft_minus_prompt_s").filter(timed).min().alias("server__ttft_minus_min"),
    ]


def server_entry(row: Mapping[str, Any]) -> ServerTimings | None:
    """The :class:`~tokrate.runfolder.summary.ServerTimings` of one aggregated row; None when
    no request of the group carried server timings."""
    n = int(row["server__n"] or 0)
    if n == 0:
        return None
    return ServerTimings(
        n=n,
        decode_tps=Distribution(**row_to_distribution(row, "server__decode_tps")),
        prompt_s=Distribution(**row_to_distribution(row, "server__prompt_s")),
        decode_vs_server_p50=row["server__decode_vs_server_p50"],
        ttft_minus_prompt_p50_s=row["server__ttft_minus_p50"],
        ttft_minus_prompt_min_s=row["server__ttft_minus_min"],
    )
