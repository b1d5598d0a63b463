"""What requests cost: each request priced by its target's rule, summarised as USD per
1,000 requests with its interval (docs/definitions.md "cost").

Two rules, named in every sentence that ranks by cost:

- **token prices** (``price_in_per_m`` and ``price_out_per_m`` set; source "price";
  :class:`tokrate.spec.pricing.TokenPrices`): a request costs its uncached input tokens at ``price_in_per_m``, its cached input
  tokens (the server's ``cached_tokens``, capped at the input) at
  ``price_cached_in_per_m`` (``price_in_per_m`` where unset) and its output tokens at
  ``price_out_per_m``, per million. Output tokens are the server's count, reasoning
  included, as providers bill them (usage's completion / output tokens hold the
  reasoning tokens); a request without usage counts what the client counted
  (``tokens_source``), its input the prompt's estimate. So a tier is priced on the
  requests the user actually sent: an input-heavy mix weighs the input price.
- **GPU-hours** (``gpu_hourly_usd``, no token prices; source "gpu_hourly"): a
  self-hosted request is charged the GPU time it held: its E2E divided by the mean
  number of its level's requests in flight (sum of E2E over the window, Little's law),
  at ``gpu_hourly_usd`` x ``gpus`` (1 when unset) per hour. The mean over the level's
  requests is window / requests x the hourly rate: the cost per request at the
  measured throughput.

The priced requests are the measured final attempts that ended ok, the requests every
other statistic of the group is over. ``usd_per_1k_requests`` is their mean cost x
1,000, with the Student-t 95% interval of that mean (:func:`~tokrate.analysis.
student_t.mean_interval`) and the standard deviation kept, so parts can be pooled
exactly (:func:`tokrate.analysis.cost_pool.pool_costs`). A target with neither rule
has no cost (None), never 0.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final, TypeVar

import polars as pl

from tokrate.analysis.student_t import mean_interval
from tokrate.runfolder.run_info import RunInfo, TargetInfo
from tokrate.runfolder.summary import Cost
from tokrate.spec.pricing import TokenPrices

__all__ = ["COST_COLUMN", "cost_aggs", "cost_entry", "priced_by", "with_cost"]

#: The per-request cost column (USD) :func:`with_cost` adds.
COST_COLUMN: Final = "cost_usd"

FrameT = TypeVar("FrameT", pl.DataFrame, pl.LazyFrame)


def priced_by(target: TargetInfo | None) -> str | None:
    """The rule that prices ``target``'s requests: "price", "gpu_hourly" or None."""
    if target is None:
        return None
    if TokenPrices.of(target) is not None:
        return "price"
    if target.gpu_hourly_usd is not None:
        return "gpu_hourly"
    return None


def _prices(run: RunInfo) -> pl.DataFrame:
    rows = []
    for t in run.targets:
        rule = priced_by(t)
        if rule is None:
            continue
        tokens = TokenPrices.of(t)
        rows.append(
            {
                "endpoint": t.endpoint,
                "model": t.model,
                "_rule": rule,
                "_p_in": None if tokens is None else tokens.in_per_m,
                "_p_cached": None if tokens is None else tokens.cached_in_per_m,
                "_p_out": None if tokens is None else tokens.out_per_m,
                "_gpu_usd_per_s": (t.gpu_hourly_usd or 0.0) * (t.gpus or 1) / 3600.0
                if tokens is None
                else None,
            }
        )
    schema = {
        "endpoint": pl.String,
        "model": pl.String,
        "_rule": pl.String,
        "_p_in": pl.Float64,
        "_p_cached": pl.Float64,
        "_p_out": pl.Float64,
        "_gpu_usd_per_s": pl.Float64,
    }
    return pl.DataFrame(rows, schema=schema, orient="row")


def with_cost(frame: FrameT, run: RunInfo) -> FrameT:
    """``frame`` (final attempts, :func:`tokrate.analysis.metrics.derive`-d) with
    ``cost_usd``: each ok measured request's cost by its target's rule (module doc),
    None for the others and for unpriced targets; and ``cost_rule``. The token-price
    rule is :meth:`tokrate.spec.pricing.TokenPrices.cost_usd` over whole columns
    (tests/unit/test_cost.py holds the two to the same figures)."""
    prices = _prices(run)
    keys = ["endpoint", "model", "scenario"]
    ok = pl.col("is_measured") & (pl.col("status") == "ok")
    inputs = pl.col("input_tokens").fill_null(0).cast(pl.Float64)
    cached = pl.min_horizontal(pl.col("cached_tokens").fill_null(0).cast(pl.Float64), inputs)
    outputs = pl.col("output_tokens").fill_null(0).cast(pl.Float64)
    by_tokens = (
        (inputs - cached) * pl.col("_p_in")
        + cached * pl.col("_p_cached")
        + outputs * pl.col("_p_out")
    ) / 1e6
    sent_at = pl.col("started_at") + pl.col("connect_s").fill_null(0.0)
    window = pl.col("end_at").filter(pl.col("is_measured")).max().over(keys) - sent_at.filter(
        pl.col("is_measured")
    ).min().over(keys)
    e2e = pl.col("e2e_s").fill_null(0.0)
    held = e2e.filter(ok).sum().over(keys)
    # The GPU time a request held: its E2E over the mean number in flight (held / window).
    by_hours = (e2e * window / held * pl.col("_gpu_usd_per_s")).fill_nan(None)
    joined = frame.join(
        prices.lazy() if isinstance(frame, pl.LazyFrame) else prices,
        on=["endpoint", "model"],
        how="left",
    )
    cost = (
        pl.when(~ok)
        .then(None)
        .when(pl.col("_rule") == "price")
        .then(by_tokens)
        .when(pl.col("_rule") == "gpu_hourly")
        .then(pl.when(held > 0).then(by_hours))
        .otherwise(None)
    )
    return joined.with_columns(cost.alias(COST_COLUMN), pl.col("_rule").alias("cost_rule")).drop(
        "_rule", "_p_in", "_p_cached", "_p_out", "_gpu_usd_per_s"
    )


def cost_aggs(ok: pl.Expr) -> list[pl.Expr]:
    """Per group: the priced requests' count, mean and standard deviation of their
    cost, their token means and the rule (over ``ok``: measured ok requests)."""
    cost = pl.col(COST_COLUMN).filter(ok)
    priced = ok & pl.col(COST_COLUMN).is_not_null()
    return [
        cost.drop_nulls().len().alias("cost__n"),
        cost.mean().alias("cost__mean"),
        cost.std(ddof=1).alias("cost__sd"),
        pl.col("input_tokens").filter(priced).mean().alias("cost__input"),
        pl.col("cached_tokens").filter(priced).mean().alias("cost__cached"),
        pl.col("output_tokens").filter(priced).mean().alias("cost__output"),
        pl.col("reasoning_tokens").filter(priced).mean().alias("cost__reasoning"),
        pl.col("cost_rule").drop_nulls().first().alias("cost__rule"),
    ]


def _opt(value: Any) -> float | None:
    return None if value is None else float(value)


def cost_entry(
    row: Mapping[str, Any], target: TargetInfo | None, output_tps: float | None
) -> Cost | None:
    """The :class:`~tokrate.runfolder.summary.Cost` of one aggregated row of
    :func:`cost_aggs`, or None for an unpriced target. ``output_tps``: the group's
    aggregate output tokens/s (the GPU-hour rate per million output tokens; None for
    a task's part, which has no window of its own)."""
    rule = priced_by(target)
    if rule is None or target is None:
        return None
    per_m: float | None
    if rule == "price":
        per_m = target.price_out_per_m
    elif output_tps:
        per_m = (target.gpu_hourly_usd or 0.0) * (target.gpus or 1) / (output_tps * 3600.0) * 1e6
    else:
        per_m = None
    n = int(row.get("cost__n") or 0)
    mean = _opt(row.get("cost__mean")) if n else None
    sd = _opt(row.get("cost__sd")) if n > 1 else (0.0 if n == 1 else None)
    interval = None if mean is None or sd is None else mean_interval(mean, sd, n)
    return Cost(
        source=rule,
        usd_per_m_output=per_m,
        n=n,
        usd_per_1k_requests=None if mean is None else mean * 1000.0,
        usd_per_1k_requests_sd=None if sd is None else sd * 1000.0,
        usd_per_1k_requests_ci=None
        if interval is None
        else (max(0.0, interval[0] * 1000.0), interval[1] * 1000.0),
        input_tokens_mean=_opt(row.get("cost__input")) if n else None,
        cached_input_tokens_mean=_opt(row.get("cost__cached")) if n else None,
        output_tokens_mean=_opt(row.get("cost__output")) if n else None,
        reasoning_tokens_mean=_opt(row.get("cost__reasoning")) if n else None,
    )
