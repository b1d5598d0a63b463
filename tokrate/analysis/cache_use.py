"""What the server said about its prompt cache, summarised per group.

Records keep ``cached_tokens``: the prompt tokens the server says it served from its
prompt (prefix / KV) cache (usage ``prompt_tokens_details.cached_tokens``, Responses
``input_tokens_details.cached_tokens``, Anthropic ``cache_read_input_tokens``,
llama.cpp ``timings.cache_n``), null when the server said nothing. Only requests whose
server reported a figure count here: an unknown is never a miss.

Over a group's ok measured requests that reported one (docs/definitions.md "Prompt
cache"):

- ``hit_rate`` = sum of cached tokens / sum of input tokens (each request's cached
  figure capped at its input tokens: a server that counts a whole cached prompt
  beyond what this request sent does not lift the rate past 1).
- ``ttft_cold_s``: TTFT of the requests with nothing cached; ``ttft_cached_s``: of the
  requests with some of the prompt cached, ``cached_share_p50`` the median share of
  their prompt that was cached ("180 ms cold, 40 ms with 95% of the prompt cached").
- ``by_turn``: the hit rate per turn of multi-turn sessions; ``session_hit_rate``: the
  distribution over sessions of each session's own hit rate.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

import polars as pl

from tokrate.analysis.stats import dist_exprs, row_to_distribution
from tokrate.runfolder.summary import CacheUse, Distribution, TurnCache

__all__ = ["CACHE_COLUMNS", "cache_aggs", "cache_entry", "cache_exprs", "turn_and_session_rows"]

#: The per-request columns :func:`cache_exprs` adds.
CACHE_COLUMNS: Final = ("cached_counted", "cached_share")


def cache_exprs() -> list[pl.Expr]:
    """``cached_counted`` (cached tokens capped at the input tokens; null when the server
    reported nothing or the input is unknown) and ``cached_share`` (that / input)."""
    cached, inputs = pl.col("cached_tokens"), pl.col("input_tokens")
    counted = pl.when(inputs.is_not_null() & cached.is_not_null()).then(
        pl.min_horizontal(cached, inputs)
    )
    return [
        counted.alias("cached_counted"),
        pl.when(inputs > 0).then(counted / inputs).alias("cached_share"),
    ]


def _reported(ok: pl.Expr) -> pl.Expr:
    return ok & pl.col("cached_counted").is_not_null()


def cache_aggs(ok: pl.Expr) -> list[pl.Expr]:
    """Group aggregations behind :class:`~tokrate.runfolder.summary.CacheUse` over the
    requests ``ok`` selects, on a frame with :func:`cache_exprs`' columns."""
    reported = _reported(ok)
    hit = reported & (pl.col("cached_counted") > 0)
    cold = reported & (pl.col("cached_counted") == 0)
    return [
        reported.sum().alias("cache__n"),
        hit.sum().alias("cache__hits"),
        pl.col("input_tokens").filter(reported).sum().alias("cache__input"),
        pl.col("cached_counted").filter(reported).sum().alias("cache__cached"),
        pl.col("cache_write_tokens").filter(reported).sum().alias("cache__written"),
        pl.col("cache_write_tokens").filter(reported).is_not_null().any().alias("cache__wrote"),
        *dist_exprs(pl.col("ttft_s").filter(cold), "cache__ttft_cold_s"),
        *dist_exprs(pl.col("ttft_s").filter(hit), "cache__ttft_cached_s"),
        pl.col("cached_share").filter(hit).median().alias("cache__share_p50"),
    ]


def turn_and_session_rows(
    frame: pl.LazyFrame, keys: Sequence[str], ok: pl.Expr
) -> tuple[pl.LazyFrame, pl.LazyFrame]:
    """Queries for the per-turn hit rates and the per-session hit-rate distribution
    (each one row per group key and turn / per group key), over ``ok`` requests that
    reported cached tokens and belong to a session."""
    reported = frame.filter(_reported(ok) & pl.col("session_id").is_not_null())
    tokens = [
        pl.len().alias("n"),
        pl.col("input_tokens").sum().alias("input"),
        pl.col("cached_counted").sum().alias("cached"),
    ]
    turns = reported.filter(pl.col("turn").is_not_null()).group_by([*keys, "turn"]).agg(tokens)
    sessions = (
        reported.group_by([*keys, "session_id"])
        .agg(tokens)
        .filter(pl.col("input") > 0)
        .group_by(list(keys))
        .agg(dist_exprs(pl.col("cached") / pl.col("input"), "session_hit_rate"))
    )
    return turns, sessions


def _rate(cached: Any, inputs: Any) -> float | None:
    if not inputs:
        return None
    return float(cached or 0) / float(inputs)


def cache_entry(
    row: Mapping[str, Any],
    turns: Sequence[Mapping[str, Any]] = (),
    sessions: Mapping[str, Any] | None = None,
) -> CacheUse | None:
    """The :class:`~tokrate.runfolder.summary.CacheUse` of one aggregated row (with the
    group's rows of :func:`turn_and_session_rows`); None when no request of the group
    reported cached tokens."""
    n = int(row.get("cache__n") or 0)
    if n == 0:
        return None
    return CacheUse(
        n=n,
        hit_requests=int(row["cache__hits"] or 0),
        input_tokens=int(row["cache__input"] or 0),
        cached_tokens=int(row["cache__cached"] or 0),
        write_tokens=int(row["cache__written"] or 0) if row.get("cache__wrote") else None,
        hit_rate=_rate(row["cache__cached"], row["cache__input"]),
        ttft_cold_s=Distribution(**row_to_distribution(row, "cache__ttft_cold_s")),
        ttft_cached_s=Distribution(**row_to_distribution(row, "cache__ttft_cached_s")),
        cached_share_p50=row["cache__share_p50"],
        by_turn=tuple(
            TurnCache(
                turn=int(t["turn"]),
                n=int(t["n"]),
                hit_rate=_rate(t["cached"], t["input"]),
            )
            for t in sorted(turns, key=lambda t: int(t["turn"]))
        ),
        session_hit_rate=Distribution(**row_to_distribution(sessions, "session_hit_rate"))
        if sessions is not None
        else Distribution(),
    )
