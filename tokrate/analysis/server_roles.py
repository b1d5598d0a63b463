"""The server's own load over a run, by role: requests running, requests waiting and
KV-cache use, picked from the scraped ``/metrics`` samples (server_metrics.parquet,
:mod:`tokrate.runfolder.server_metrics`) by their known metric names on each engine.
The report's timeline draws them beside TTFT. KV-cache use is a fraction (1 = full)
on every engine listed in :data:`ROLE_METRICS`.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    import polars as pl

__all__ = ["ROLES", "ROLE_METRICS", "role_series"]

#: The roles the report draws, in drawing order.
ROLES: Final = ("running", "waiting", "kv_cache")
#: Known metric names per role, preferred first where a server exports two (vLLM
#: renamed gpu_cache_usage_perc to kv_cache_usage_perc in its V1 engine).
ROLE_METRICS: Final[dict[str, tuple[str, ...]]] = {
    "running": (
        "vllm:num_requests_running",
        "sglang:num_running_reqs",
        "tgi_batch_current_size",
        "llamacpp:requests_processing",
    ),
    "waiting": (
        "vllm:num_requests_waiting",
        "sglang:num_queue_reqs",
        "tgi_queue_size",
        "llamacpp:requests_deferred",
    ),
    "kv_cache": (
        "vllm:kv_cache_usage_perc",
        "vllm:gpu_cache_usage_perc",
        "sglang:token_usage",
        "llamacpp:kv_cache_usage_ratio",
    ),
}


def _known() -> Iterator[tuple[str, str, int]]:
    for role, names in ROLE_METRICS.items():
        for rank, name in enumerate(names):
            yield name, role, rank


def role_series(frame: pl.DataFrame) -> pl.DataFrame:
    """The samples of known roles: (endpoint, model, role, metric, at, value).

    ``model`` is the sample's ``model_name`` label (vLLM, SGLang; null where the
    engine serves one model and does not say). Per (endpoint, role) only the first
    metric name of :data:`ROLE_METRICS` the endpoint exports is kept. Samples of one
    scrape that differ in other labels (vLLM's ``engine`` under data parallelism) are
    summed for request counts and averaged for KV-cache use.
    """
    import polars as pl

    known = pl.DataFrame(list(_known()), schema=["metric", "role", "rank"], orient="row")
    picked = frame.join(known, on="metric", how="inner")
    best = picked.group_by(["endpoint", "role"]).agg(pl.col("rank").min())
    picked = picked.join(best, on=["endpoint", "role", "rank"], how="semi")
    model = pl.col("labels").str.json_path_match("$.model_name").alias("model")
    return (
        picked.with_columns(model)
        .group_by(["endpoint", "model", "role", "metric", "at"])
        .agg(pl.col("value").sum().alias("total"), pl.col("value").mean().alias("mean"))
        .select(
            "endpoint",
            "model",
            "role",
            "metric",
            "at",
            pl.when(pl.col("role") == "kv_cache")
            .then(pl.col("mean"))
            .otherwise(pl.col("total"))
            .alias("value"),
        )
        .sort(["endpoint", "model", "role", "at"], nulls_last=True)
    )
