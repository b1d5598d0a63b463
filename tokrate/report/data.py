"""Chart and table data, prepared in polars from records and summaries.

Every function takes the combined, :func:`tokrate.analysis.metrics.derive`-d records of one or
more runs (with a ``series`` column naming the run/endpoint each row belongs to) or
summary groups, and returns a small polars frame that a chart function draws as is.
Large series are downsampled here (ECDF points), never in the chart code, and all
aggregation is vectorised polars (no per-record Python).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Final

import polars as pl

from tokrate.analysis.metrics import derive, final_attempts, ok_mask
from tokrate.analysis.ordering import model_key, natural_key
from tokrate.hardware import TENSOR_PARALLEL_EFFICIENCY, HardwareProfile
from tokrate.runfolder.run_info import RunInfo
from tokrate.runfolder.summary import Summary

__all__ = [
    "ASSUMED_BYTES_PER_PARAM",
    "BOX_MAX_VALUES",
    "ECDF_MAX_POINTS",
    "box_stats",
    "combine_runs",
    "ecdf_points",
    "error_examples",
    "group_table",
    "lowest_load",
    "size_order",
    "size_speed_points",
    "targets_frame",
]

#: ECDF curves are drawn from at most this many points per series (quantile grid), so a
#: million records plot as fast as a hundred and the curve is still exact to 1/400.
ECDF_MAX_POINTS: Final = 400

#: The ITL box chart draws from at most about this many gaps (see box_stats).
BOX_MAX_VALUES: Final = 1_000_000

#: What chart and table data read; everything else is dropped. (Every reader selects
#: or aggregates lazily, so chunk offsets are only materialised where the timeline
#: bins them into a few rows per request: a million-record report stays in bounds.)
_CHART_COLUMNS: Final = (
    "run_key",
    "series",
    "endpoint",
    "model",
    "scenario",
    "task",
    "request_index",
    "status",
    "is_measured",
    "concurrency",
    "rate_rps",
    "ttft_s",
    "tpot_s",
    "decode_tps",
    "itl_s",
    "t_rel_s",
    "e2e_s",
    "output_tokens",
    "error_class",
    "http_status",
    "error_message",
    "chunk_offsets_s",
)

_TARGET_SCHEMA: Final = {
    "run_id": pl.String,
    "series": pl.String,
    "endpoint": pl.String,
    "model": pl.String,
    "params_b": pl.Float64,
    "active_params_b": pl.Float64,
    "bytes_per_param": pl.Float64,
    "gpus": pl.Int64,
    "family": pl.String,
    "simulated": pl.Boolean,
    "size_source": pl.String,
    "bytes_source": pl.String,
    "weight_type": pl.String,
}

#: Bytes per parameter the size chart's bound assumes where a target gives none:
#: 16-bit weights (fp16/bf16), what an unquantised checkpoint is served in. The
#: chart says so and names the targets it assumed it for.
ASSUMED_BYTES_PER_PARAM: Final = 2.0


def combine_runs(frames: Sequence[tuple[str, pl.DataFrame]]) -> pl.LazyFrame:
    """Derived records of several runs with ``run_key``, ``series`` and ``t_rel_s``.

    ``frames`` is (run key, records); only the final attempt of a retried request is
    kept (it counts once, as in every summary). ``series`` is the endpoint for a single
    run, else the run key (plus "/endpoint" when that run has several endpoints).
    ``t_rel_s`` = end of stream, seconds since that run's first send.
    """
    parts: list[pl.LazyFrame] = []
    multi = len(frames) > 1
    for key, records in frames:
        lf = derive(final_attempts(records.lazy())).with_columns(pl.lit(key).alias("run_key"))
        if multi:
            n_endpoints = records.get_column("endpoint").n_unique() if records.height else 0
            series = (
                pl.lit(key) + pl.lit("/") + pl.col("endpoint") if n_endpoints > 1 else pl.lit(key)
            )
        else:
            series = pl.col("endpoint")
        lf = lf.with_columns(
            series.alias("series"),
            (pl.col("end_at") - pl.col("started_at").min()).alias("t_rel_s"),
        ).select(_CHART_COLUMNS)
        parts.append(lf)
    if not parts:
        raise ValueError("combine_runs needs at least one run")
    return pl.concat(parts, how="vertical_relaxed")


def targets_frame(runs: Sequence[tuple[str, RunInfo]]) -> pl.DataFrame:
    """Sizes per (run key, series, endpoint, model) from run.json ``targets``.

    ``runs`` is (run key, run info); ``series`` is named as in :func:`combine_runs`.
    ``active_params_b`` falls back to ``params_b`` (a dense model).
    """
    rows: list[dict[str, Any]] = []
    multi = len(runs) > 1
    for key, run in runs:
        endpoints = {t.endpoint for t in run.targets}
        for t in run.targets:
            series = (f"{key}/{t.endpoint}" if len(endpoints) > 1 else key) if multi else t.endpoint
            params = _num(t.params_b)
            active = _num(t.active_params_b)
            rows.append(
                {
                    "run_id": key,
                    "series": series,
                    "endpoint": t.endpoint,
                    "model": t.model,
                    "params_b": params,
                    "active_params_b": active if active is not None else params,
                    "bytes_per_param": _num(t.bytes_per_param),
                    "gpus": t.gpus or None,
                    # Size-vs-speed series: the user's family label, else the whole run
                    # (one server per model is the common self-hosted set-up: grouping
                    # by endpoint would leave one-point series and no fit).
                    "family": (t.family or key) if multi else (t.family or "all targets"),
                    "simulated": t.simulated,
                    # Where the size came from ("config", "server", "name",
                    # "simulator"), and the server's weight type: the size chart
                    # says what it stands on.
                    "size_source": t.size_source,
                    "bytes_source": t.bytes_source,
                    "weight_type": None if t.served is None else t.served.weight_type,
                }
            )
    return pl.DataFrame(rows, schema=_TARGET_SCHEMA)


def _num(value: float | None) -> float | None:
    if value is None:
        return None
    return value if math.isfinite(value) and value > 0 else None


def size_order(frame: pl.DataFrame, sizes: pl.DataFrame) -> pl.DataFrame:
    """``frame`` (with ``series`` and ``model`` columns) with its rows ordered by model
    size, model name, then series (tokrate.analysis.ordering); rows of one (series,
    model) keep their order. ``sizes`` is :func:`targets_frame`'s output."""
    if not frame.height:
        return frame
    size_of = {
        (str(s), str(m)): a
        for s, m, a in sizes.select("series", "model", "active_params_b").iter_rows()
    }
    pairs = [(str(s), str(m)) for s, m in frame.select("series", "model").unique().rows()]
    pairs.sort(key=lambda sm: (model_key(sm[1], size_of.get(sm)), natural_key(sm[0])))
    rank = pl.DataFrame(
        {
            "series": [s for s, _ in pairs],
            "model": [m for _, m in pairs],
            "_rank": list(range(len(pairs))),
        },
        schema={"series": pl.String, "model": pl.String, "_rank": pl.Int64},
    )
    return (
        frame.with_row_index("_row")
        .join(rank, on=["series", "model"], how="left")
        .sort(["_rank", "_row"])
        .drop("_rank", "_row")
    )


def lowest_load(records: pl.LazyFrame) -> pl.LazyFrame:
    """(series, endpoint, model) -> the scenario with the lowest concurrency/rate.

    Per-stream speed falls with load, so the size-vs-speed chart compares models at
    the least loaded level each was measured at (ties: scenario name).
    """
    keys = ["series", "endpoint", "model"]
    per = records.group_by([*keys, "scenario"]).agg(
        pl.coalesce(pl.col("concurrency").cast(pl.Float64), pl.col("rate_rps")).min().alias("load"),
        pl.col("concurrency").drop_nulls().first().alias("concurrency"),
        pl.col("rate_rps").drop_nulls().first().alias("rate_rps"),
    )
    return (
        per.sort([*keys, "load", "scenario"], nulls_last=True)
        .group_by(keys, maintain_order=True)
        .first()
    )


def size_speed_points(
    records: pl.LazyFrame, targets: pl.DataFrame, hardware: HardwareProfile
) -> tuple[pl.DataFrame, list[str]]:
    """Points of the size-vs-speed chart, and notes on targets left out.

    One row per (series, endpoint, model) at its lowest load level: ``x_params_b``
    (active params, billions), ``total_params_b``, ``is_moe``, decode tok/s p10/p50/p90,
    TTFT p10/p50/p90 (s), ``n``, and ``bound_tps`` = the hardware bound
    (docs/definitions.md), bandwidth (scaled to the target's gpus) / (active params x
    bytes per param), with :data:`ASSUMED_BYTES_PER_PARAM` where the target gives no
    bytes per param (``bpp_assumed``); ``gpu_scale`` = the target's bandwidth / one
    GPU's (1 for one GPU), which the power-law fit divides out.
    """
    keys = ["series", "endpoint", "model"]
    pick = lowest_load(records).select([*keys, "scenario", "concurrency", "rate_rps"])
    ok = records.filter(ok_mask()).join(pick, on=[*keys, "scenario"], how="semi")
    q = [0.1, 0.5, 0.9]
    stats = ok.group_by(keys).agg(
        pl.len().alias("n"),
        *[
            pl.col("decode_tps")
            .drop_nulls()
            .quantile(p, interpolation="linear")
            .alias(f"tps_p{int(p * 100)}")
            for p in q
        ],
        *[
            pl.col("ttft_s")
            .drop_nulls()
            .quantile(p, interpolation="linear")
            .alias(f"ttft_p{int(p * 100)}")
            for p in q
        ],
    )
    joined = (
        stats.join(pick, on=keys, how="left")
        .join(targets.lazy().drop("run_id"), on=keys, how="left")
        .collect()
    )
    notes: list[str] = []
    missing = joined.filter(pl.col("active_params_b").is_null())
    if missing.height:
        names = ", ".join(sorted(set(missing.get_column("model").to_list()), key=model_key))
        notes.append(f"left out of the size chart (no params_b in the config): {names}")
    no_speed = joined.filter(pl.col("active_params_b").is_not_null() & pl.col("tps_p50").is_null())
    if no_speed.height:
        names = ", ".join(sorted(set(no_speed.get_column("model").to_list()), key=model_key))
        notes.append(
            "left out of the size chart (no measurable decode speed: fewer than 2 tokens, "
            f"or the stream was buffered: it came in a few reads): {names}"
        )
    points = joined.filter(
        pl.col("active_params_b").is_not_null() & pl.col("tps_p50").is_not_null()
    )
    # No bytes per parameter given (a hosted model, a name without a quant tag): the
    # bound is drawn for 16-bit weights, marked as assumed.
    points = points.with_columns(
        pl.col("bytes_per_param").is_null().alias("bpp_assumed"),
        pl.col("bytes_per_param").fill_null(ASSUMED_BYTES_PER_PARAM),
    )
    bw = pl.lit(hardware.bandwidth_bytes_per_s)
    scale = pl.col("gpus").fill_null(1)
    # HardwareProfile.scaled(g): bandwidth x g x TENSOR_PARALLEL_EFFICIENCY for g > 1.
    eff = TENSOR_PARALLEL_EFFICIENCY
    scaled_bw = pl.when(scale > 1).then(bw * scale * eff).otherwise(bw)
    points = points.with_columns(
        pl.col("active_params_b").alias("x_params_b"),
        pl.col("params_b").fill_null(pl.col("active_params_b")).alias("total_params_b"),
        (pl.col("params_b").fill_null(pl.col("active_params_b")) > pl.col("active_params_b")).alias(
            "is_moe"
        ),
        (scaled_bw / (pl.col("active_params_b") * 1e9 * pl.col("bytes_per_param"))).alias(
            "bound_tps"
        ),
        (scaled_bw / bw).alias("gpu_scale"),
    )
    # One series per family (fitted across endpoints); labels name the endpoint when a
    # family spans several.
    several = points.group_by("family").agg(pl.col("endpoint").n_unique().alias("n_ep"))
    points = (
        points.join(several, on="family", how="left")
        .with_columns(
            pl.col("family").alias("series"),
            pl.when(pl.col("n_ep") > 1)
            .then(pl.col("endpoint") + pl.lit("/") + pl.col("model"))
            .otherwise(pl.col("model"))
            .alias("label"),
        )
        .drop("n_ep")
        .sort(["series", "x_params_b", "model"])
    )
    return points, notes


def ecdf_points(records: pl.LazyFrame, column: str, by: Sequence[str]) -> pl.DataFrame:
    """Empirical CDF of ``column`` per ``by`` group over ok measured records.

    Returns ``by`` + ``x`` (value) + ``p`` (fraction <= x) + ``n``, downsampled to at
    most ~:data:`ECDF_MAX_POINTS` points per group (every k-th order statistic plus the
    maximum), computed in polars.
    """
    by = list(by)
    ok = records.filter(ok_mask() & pl.col(column).is_not_null()).select([*by, column])
    ranked = ok.with_columns(
        pl.col(column).rank("ordinal").over(by).alias("_rank"),
        pl.len().over(by).alias("n"),
    )
    step = ((pl.col("n") + ECDF_MAX_POINTS - 1) // ECDF_MAX_POINTS).clip(lower_bound=1)
    keep = (((pl.col("_rank") - 1) % step) == 0) | (pl.col("_rank") == pl.col("n"))
    return (
        ranked.filter(keep)
        .select(
            *by,
            pl.col(column).alias("x"),
            (pl.col("_rank") / pl.col("n")).alias("p"),
            pl.col("n"),
        )
        .sort([*by, "x"])
        .collect()
    )


def box_stats(records: pl.LazyFrame, column: str, by: Sequence[str]) -> pl.DataFrame:
    """p10, p25, p50, p75, p90, mean and n of ``column`` per group (ok measured rows).

    A list column (``itl_s``) is exploded, so every gap counts once; above
    :data:`BOX_MAX_VALUES` gaps, from every k-th request only (a systematic sample).
    """
    by = list(by)
    ok = records.filter(ok_mask()).select([*by, "request_index", column])
    col = pl.col(column)
    if isinstance(ok.collect_schema()[column], pl.List):
        # A chart needs no 30 M gaps: above BOX_MAX_VALUES, keep every k-th request
        # (systematic, deterministic) with all its gaps; exact ITL percentiles are in
        # the summary tables. Explode inside the aggregation: exploding the frame
        # would copy the group keys once per gap.
        total = ok.select(pl.col(column).list.len().sum()).collect().item() or 0
        step = max(1, -(-int(total) // BOX_MAX_VALUES))
        if step > 1:
            ok = ok.filter(pl.col("request_index") % step == 0)
        col = col.list.explode(keep_nulls=False, empty_as_null=False)
    col = col.drop_nulls().drop_nans()
    return (
        ok.group_by(by)
        .agg(
            col.count().alias("n"),
            col.mean().alias("mean"),
            *[
                col.quantile(p / 100, interpolation="linear").alias(f"p{p}")
                for p in (10, 25, 50, 75, 90)
            ],
        )
        .filter(pl.col("n") > 0)
        .sort(by)
        .collect()
    )


def _series_of(key: str, endpoint: str, endpoints: set[str], multi: bool) -> str:
    """The series name a summary group belongs to (as in :func:`combine_runs`)."""
    if not multi:
        return endpoint
    return f"{key}/{endpoint}" if len(endpoints) > 1 else key


def group_table(summaries: Sequence[tuple[str, Summary]]) -> pl.DataFrame:
    """Flat frame of summary groups: run_key, series, endpoint, model, scenario, load
    and the headline numbers (seconds / tokens per second / USD)."""
    rows: list[dict[str, Any]] = []
    multi = len(summaries) > 1
    for key, summary in summaries:
        endpoints = {g.endpoint for g in summary.groups}
        for g in summary.groups:
            rows.append(
                {
                    "run_key": key,
                    "series": _series_of(key, g.endpoint, endpoints, multi),
                    "endpoint": g.endpoint,
                    "model": g.model,
                    "scenario": g.scenario,
                    "concurrency": g.concurrency,
                    "rate_rps": g.rate_rps,
                    "ok": g.counts.ok,
                    "errors": g.counts.error,
                    "decode_p50": g.decode_tps.p50,
                    "ttft_p50": g.ttft_s.p50,
                    "ttft_p95": g.ttft_s.p95,
                    "aggregate_tps": g.aggregate_output_tps,
                    "usd_per_m": None if g.cost is None else g.cost.usd_per_m_output,
                    "usd_per_1k": None if g.cost is None else g.cost.usd_per_1k_requests,
                    "cost_source": None if g.cost is None else g.cost.source,
                }
            )
    schema = {
        "run_key": pl.String,
        "series": pl.String,
        "endpoint": pl.String,
        "model": pl.String,
        "scenario": pl.String,
        "concurrency": pl.Int64,
        "rate_rps": pl.Float64,
        "ok": pl.Int64,
        "errors": pl.Int64,
        "decode_p50": pl.Float64,
        "ttft_p50": pl.Float64,
        "ttft_p95": pl.Float64,
        "aggregate_tps": pl.Float64,
        "usd_per_m": pl.Float64,
        "usd_per_1k": pl.Float64,
        "cost_source": pl.String,
    }
    return pl.DataFrame(rows, schema=schema)


def error_examples(records: pl.LazyFrame) -> pl.DataFrame:
    """Failed measured requests per (series, model, error_class, http_status): ``n`` and
    the first ``example`` message (by request index), sorted by count descending."""
    return (
        records.filter(pl.col("is_measured") & (pl.col("status") != "ok"))
        .with_columns(pl.col("error_class").fill_null("unknown"))
        .sort("request_index")
        .group_by(["series", "model", "error_class", "http_status"])
        .agg(pl.len().alias("n"), pl.col("error_message").drop_nulls().first().alias("example"))
        .sort(["n", "series", "model", "error_class"], descending=[True, False, False, False])
        .collect()
    )
