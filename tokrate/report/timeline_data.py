"""Timeline data: output tokens/s and failed requests per time bin over a run; each
request's TTFT at its send time and the servers' scraped load (running / waiting
requests, KV-cache use) on the same clock, seconds since the run's first send."""

from __future__ import annotations

from collections.abc import Sequence

import polars as pl

from tokrate.analysis.metrics import empty_answer_expr, final_attempts
from tokrate.analysis.server_roles import role_series
from tokrate.textfmt import nice_bin_width

__all__ = ["server_points", "timeline_bins", "ttft_points"]


def timeline_bins(records: pl.LazyFrame) -> tuple[pl.DataFrame, float]:
    """Output tokens/s and errors per time bin per (series, model); and the bin width.

    Time is seconds since the run's first send. Tokens are credited to the bin their
    chunk *arrived* in (request start + ``chunk_offsets_s``, a request's tokens spread
    evenly over its content chunks), so a long answer counts across the seconds it was
    streamed in, not all at its end. A record without chunk offsets has its tokens
    spread evenly from its first token to its end. Failed measured requests count in
    the bin they ended in.
    """
    measured = records.filter(pl.col("is_measured"))
    span = measured.select(pl.col("t_rel_s").max()).collect().item()
    width = nice_bin_width(float(span or 0.0))
    keys = ["series", "model"]
    ok = measured.filter(
        (pl.col("status") == "ok") & (pl.col("output_tokens") > 0) & ~empty_answer_expr()
    )
    has_chunks = pl.col("chunk_offsets_s").list.len() > 0
    tokens = (
        pl.concat([_by_chunk(ok.filter(has_chunks), width), _spread(ok.filter(~has_chunks), width)])
        .group_by([*keys, "t_bin_s"])
        .agg((pl.col("tokens").sum() / width).alias("output_tps"))
    )
    errors = (
        measured.filter(pl.col("status") == "error")
        .with_columns(((pl.col("t_rel_s") / width).floor() * width).alias("t_bin_s"))
        .group_by([*keys, "t_bin_s"])
        .agg(pl.len().cast(pl.Int64).alias("errors"))
    )
    out = (
        tokens.join(errors, on=[*keys, "t_bin_s"], how="full", coalesce=True)
        .with_columns(pl.col("output_tps").fill_null(0.0), pl.col("errors").fill_null(0))
        .sort([*keys, "t_bin_s"])
        .collect()
    )
    return out, width


def _by_chunk(ok: pl.LazyFrame, width: float) -> pl.LazyFrame:
    """(series, model, t_bin_s, tokens) from chunk arrival times: per request, how many
    chunks fell in each bin (a few rows per request, never one per chunk)."""
    start = pl.col("t_rel_s") - pl.col("e2e_s")
    return (
        ok.select(
            "series",
            "model",
            (pl.col("chunk_offsets_s") + start)
            .list.eval((pl.element() / width).floor().alias("bin").value_counts())
            .alias("counts"),
            (pl.col("output_tokens") / pl.col("chunk_offsets_s").list.len()).alias("per_chunk"),
        )
        .explode("counts")
        .unnest("counts")
        .select(
            "series",
            "model",
            (pl.col("bin") * width).alias("t_bin_s"),
            (pl.col("count") * pl.col("per_chunk")).alias("tokens"),
        )
    )


def _spread(ok: pl.LazyFrame, width: float) -> pl.LazyFrame:
    """(series, model, t_bin_s, tokens) for records without chunk offsets: tokens
    spread evenly from the first token (start + TTFT; else the end) to the end."""
    end = pl.col("t_rel_s")
    first = pl.min_horizontal((end - pl.col("e2e_s") + pl.col("ttft_s")).fill_null(end), end)
    span = pl.col("end") - pl.col("first")
    bin_end = pl.col("t_bin_s") + width
    covered = pl.min_horizontal(pl.col("end"), bin_end) - pl.max_horizontal(
        pl.col("first"), pl.col("t_bin_s")
    )
    return (
        ok.select(
            "series",
            "model",
            pl.col("output_tokens").cast(pl.Float64).alias("tokens"),
            first.alias("first"),
            end.alias("end"),
        )
        .with_columns(
            pl.int_ranges(
                (pl.col("first") / width).floor().cast(pl.Int64),
                (pl.col("end") / width).floor().cast(pl.Int64) + 1,
            ).alias("bin")
        )
        .explode("bin")
        .with_columns((pl.col("bin") * width).alias("t_bin_s"))
        .with_columns(
            # All at once when the whole answer came in one read.
            pl.when(span > 0)
            .then(covered.clip(lower_bound=0.0) / span)
            .otherwise(1.0)
            .alias("share")
        )
        .select("series", "model", "t_bin_s", (pl.col("tokens") * pl.col("share")).alias("tokens"))
    )


def ttft_points(records: pl.LazyFrame) -> pl.DataFrame:
    """(series, model, t_send_s, ttft_s): every measured ok request's TTFT at the time
    it was sent, in seconds since the run's first send (the timeline's clock)."""
    return (
        records.filter(pl.col("is_measured") & (pl.col("status") == "ok"))
        .filter(pl.col("ttft_s").is_not_null())
        .select(
            "series",
            "model",
            (pl.col("t_rel_s") - pl.col("e2e_s")).alias("t_send_s"),
            "ttft_s",
        )
        .sort("t_send_s")
        .collect()
    )


def server_points(runs: Sequence[tuple[str, pl.DataFrame, pl.DataFrame]]) -> pl.DataFrame:
    """(series, model, role, metric, t_s, value): the running / waiting / KV-cache
    samples of each run's server_metrics.parquet (``runs``: run key, records, samples)
    on the timeline's clock (wall clock minus the run's first send). ``series`` is named
    as the records' (tokrate.report.data.combine_runs); ``model`` is the samples'
    ``model_name`` label, else the endpoint's one model in the run, else null (a server
    that labels nothing by model serving several: llama.cpp, TGI)."""
    multi = len(runs) > 1
    parts = []
    for key, records, samples in runs:
        roles = role_series(samples)
        if not roles.height:
            continue
        sent = final_attempts(records.lazy()).select(pl.col("started_at").min()).collect()
        origin = sent.item() if records.height else None
        if origin is None:
            origin = float(roles.get_column("at").min())  # type: ignore[arg-type]
        endpoints = records.get_column("endpoint").n_unique() if records.height else 1
        if not multi:
            series = pl.col("endpoint")
        elif endpoints > 1:
            series = pl.lit(key) + pl.lit("/") + pl.col("endpoint")
        else:
            series = pl.lit(key)
        # A server that labels nothing by model (llama.cpp, TGI) but serves one model
        # in this run: its lines are that target's (same colour as its TTFT dots).
        only = records.group_by("endpoint").agg(pl.col("model").unique().alias("models"))
        only = only.filter(pl.col("models").list.len() == 1).select(
            "endpoint", pl.col("models").list.first().alias("only_model")
        )
        roles = roles.join(only, on="endpoint", how="left").with_columns(
            pl.col("model").fill_null(pl.col("only_model"))
        )
        parts.append(
            roles.select(
                series.alias("series"),
                "model",
                "role",
                "metric",
                (pl.col("at") - origin).alias("t_s"),
                "value",
            )
        )
    if not parts:
        return pl.DataFrame(
            schema={
                "series": pl.String,
                "model": pl.String,
                "role": pl.String,
                "metric": pl.String,
                "t_s": pl.Float64,
                "value": pl.Float64,
            }
        )
    return pl.concat(parts, how="vertical_relaxed").sort(["series", "model", "role", "t_s"])
