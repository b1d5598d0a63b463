"""Server-reported per-request timings as one shape of per-request columns.

Records keep the timing object a server sent with its stream in ``server_timings`` (a
JSON string in records.parquet) and the response key it came under in
``server_timings_source``: ``timings`` (llama.cpp: ``prompt_n``, ``prompt_ms``,
``predicted_n``, ``predicted_ms``, ``predicted_per_token_ms``, ``cache_n``, and
``draft_n`` / ``draft_n_accepted`` with a draft model), ``metrics`` (vLLM's
per-request metrics object) or ``stats`` (NVIDIA NIM). Whatever the source, the same
columns come out (seconds; unknown is None), read from the first of these names the
object carries (``*_ms`` names are milliseconds):

- ``server_queue_s``: ``queue_time``, ``time_in_queue``, ``queue_time_ms``.
- ``server_prefill_s``: ``prefill_time``, ``prefill_time_ms``, ``prompt_ms``.
- ``server_ttft_s``: ``ttft``, ``time_to_first_token``, ``ttft_ms``,
  ``time_to_first_token_ms``; else queue + prefill; else prefill (llama.cpp reports no
  queue wait: its TTFT is its prompt time, so a request queued for a slot shows the
  wait in the client-minus-server difference).
- ``server_decode_s``: ``decode_time``, ``generation_time``, ``decode_time_ms``,
  ``generation_time_ms``, ``predicted_ms``.
- ``server_itl_s`` (mean): ``mean_itl``, ``time_per_output_token``, ``mean_itl_ms``,
  ``predicted_per_token_ms``.
- ``server_output_tokens``: ``num_generation_tokens``, ``completion_tokens``,
  ``output_tokens``, ``predicted_n``.
- ``spec_acceptance`` (0..1, speculative decoding's accepted share of drafted
  tokens): ``speculative_decoding.draft_acceptance_rate``, ``draft_acceptance_rate``,
  else ``draft_n_accepted / draft_n`` (llama.cpp).

Derived:

- ``server_decode_tps`` = ``(server_output_tokens - 1) / server_decode_s`` (the same
  n-1 gaps as tokrate's TPOT; llama-server's ``predicted_per_token_ms`` is
  ``predicted_ms / (predicted_n - 1)``), else ``1 / server_itl_s``; None for fewer
  than 2 tokens.
- ``server_prompt_s`` = ``server_prefill_s`` (the name summary version 2 used).
- ``decode_vs_server`` = client ``decode_tps`` / ``server_decode_tps`` - 1 per request
  (negative: the client saw slower decoding than the server reported).
- ``ttft_minus_prompt_s`` = ``ttft_s`` - ``server_prompt_s`` (>= 0 on an honest pair).
- ``ttft_minus_server_s`` = ``ttft_s`` - ``server_ttft_s``: the network and the client
  (and, where the server reports no queue time, the server's queue) in the first token.
- ``decode_minus_server_s`` = client decode time (``e2e_s`` - ``ttft_s``) -
  ``server_decode_s``: what the path added while the answer streamed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
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
    "server_queue_s",
    "server_prefill_s",
    "server_ttft_s",
    "server_decode_s",
    "server_itl_s",
    "server_output_tokens",
    "spec_acceptance",
    "server_decode_tps",
    "server_prompt_s",
    "decode_vs_server",
    "ttft_minus_prompt_s",
    "ttft_minus_server_s",
    "decode_minus_server_s",
)


def _field(path: str) -> pl.Expr:
    return pl.col("server_timings").str.json_path_match(f"$.{path}").cast(pl.Float64, strict=False)


def _first(seconds: Sequence[str], milliseconds: Sequence[str] = ()) -> pl.Expr:
    """The first of ``seconds`` (then of ``milliseconds``, / 1000) the object has."""
    return pl.coalesce(
        *(_field(name) for name in seconds), *(_field(name) / 1000.0 for name in milliseconds)
    )


def server_timing_exprs() -> list[pl.Expr]:
    """The normalised server columns from the JSON column (two passes: the derived
    ones read the first)."""
    queue = _first(("queue_time", "time_in_queue"), ("queue_time_ms",))
    prefill = _first(("prefill_time",), ("prefill_time_ms", "prompt_ms"))
    ttft = _first(("ttft", "time_to_first_token"), ("ttft_ms", "time_to_first_token_ms"))
    drafted, accepted = _field("draft_n"), _field("draft_n_accepted")
    return [
        queue.alias("server_queue_s"),
        prefill.alias("server_prefill_s"),
        pl.coalesce(ttft, queue + prefill, prefill).alias("server_ttft_s"),
        _first(
            ("decode_time", "generation_time"),
            ("decode_time_ms", "generation_time_ms", "predicted_ms"),
        ).alias("server_decode_s"),
        _first(
            ("mean_itl", "time_per_output_token"), ("mean_itl_ms", "predicted_per_token_ms")
        ).alias("server_itl_s"),
        _first(
            ("num_generation_tokens", "completion_tokens", "output_tokens", "predicted_n")
        ).alias("server_output_tokens"),
        pl.coalesce(
            _field("speculative_decoding.draft_acceptance_rate"),
            _field("draft_acceptance_rate"),
            pl.when(drafted > 0).then(accepted / drafted),
        ).alias("spec_acceptance"),
    ]


def versus_server_exprs() -> list[pl.Expr]:
    """The derived server columns and the paired client-vs-server differences; needs
    ``decode_tps``, ``ttft_s``, ``e2e_s`` and the columns of
    :func:`server_timing_exprs`."""
    n, decode_s, itl = (
        pl.col("server_output_tokens"),
        pl.col("server_decode_s"),
        pl.col("server_itl_s"),
    )
    from_decode = pl.when((n >= 2) & (decode_s > 0)).then((n - 1) / decode_s)
    from_itl = pl.when(itl > 0).then(1.0 / itl)
    server_tps = from_decode.otherwise(from_itl)
    prompt = pl.col("server_prefill_s")
    return [
        server_tps.alias("server_decode_tps"),
        pl.when(prompt >= 0).then(prompt).alias("server_prompt_s"),
        pl.when(server_tps > 0)
        .then(pl.col("decode_tps") / server_tps - 1.0)
        .alias("decode_vs_server"),
        (pl.col("ttft_s") - pl.when(prompt >= 0).then(prompt)).alias("ttft_minus_prompt_s"),
        (pl.col("ttft_s") - pl.col("server_ttft_s")).alias("ttft_minus_server_s"),
        (pl.col("e2e_s") - pl.col("ttft_s") - decode_s).alias("decode_minus_server_s"),
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
        *dist_exprs(pl.col("server_queue_s").filter(timed), "server__queue_s"),
        *dist_exprs(pl.col("server_ttft_s").filter(timed), "server__ttft_s"),
        *dist_exprs(pl.col("server_decode_s").filter(timed), "server__decode_s"),
        *dist_exprs(pl.col("ttft_minus_server_s").filter(timed), "server__ttft_minus_server_s"),
        *dist_exprs(pl.col("decode_minus_server_s").filter(timed), "server__decode_minus_server_s"),
        pl.col("spec_acceptance").filter(timed).median().alias("server__spec_acceptance_p50"),
        pl.col("server_timings_source")
        .filter(timed)
        .drop_nulls()
        .unique()
        .sort()
        .alias("server__sources"),
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
        sources=tuple(row.get("server__sources") or ()) or ("timings",),
        queue_s=Distribution(**row_to_distribution(row, "server__queue_s")),
        ttft_s=Distribution(**row_to_distribution(row, "server__ttft_s")),
        decode_s=Distribution(**row_to_distribution(row, "server__decode_s")),
        ttft_minus_server_s=Distribution(**row_to_distribution(row, "server__ttft_minus_server_s")),
        decode_minus_server_s=Distribution(
            **row_to_distribution(row, "server__decode_minus_server_s")
        ),
        spec_acceptance_p50=row["server__spec_acceptance_p50"],
    )
