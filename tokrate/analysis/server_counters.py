"""What a server's own ``/metrics`` counters say about the run: prompt-cache hits and
speculative decoding, as the difference between the first and the last scrape of the
run (server_metrics.parquet, :mod:`tokrate.runfolder.server_metrics`).

The per-request figures (usage ``cached_tokens``, a server's per-request timings) say
what each measured request got; the counters say what the server did over the whole
run, warm-up requests and any other client's traffic included. Both sit side by side
in summary.json (``server_counters``) and the report's "Prompt cache" section, never
mixed.

Counters read (:data:`COUNTERS`; the first name an endpoint exports wins per role):

- prompt-cache queries and hits, in prompt tokens: vLLM ``vllm:prefix_cache_queries``
  / ``vllm:prefix_cache_hits`` (V1; ``vllm:gpu_prefix_cache_*`` before it was
  renamed); the hit rate is hits / queries over the run.
- speculative decoding, in tokens: vLLM ``vllm:spec_decode_num_draft_tokens`` and
  ``vllm:spec_decode_num_accepted_tokens``; the acceptance is accepted / drafted.
- SGLang exports no cache counters, only a gauge of its radix cache's recent hit rate
  (``sglang:cache_hit_rate``): its mean over the run's scrapes is reported, marked
  as a gauge (there are no token counts behind it).

A counter's increase over the run is the sum of its increases between successive
scrapes; a decrease is a server restart, after which the new value is the increase
(Prometheus' ``increase()``). Samples that differ only in other labels (vLLM's
``engine`` under data parallelism) are summed per scrape. ``model`` is the sample's
``model_name`` label, "" where the server labels none.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Final

from tokrate.runfolder.summary import ServerCounters

if TYPE_CHECKING:
    import polars as pl

__all__ = ["COUNTERS", "HIT_RATE_GAUGES", "server_counters"]

#: Role -> counter sample names, preferred first (a counter's samples end in _total).
COUNTERS: Final[Mapping[str, tuple[str, ...]]] = {
    "prefix_queries": (
        "vllm:prefix_cache_queries_total",
        "vllm:gpu_prefix_cache_queries_total",
    ),
    "prefix_hits": (
        "vllm:prefix_cache_hits_total",
        "vllm:gpu_prefix_cache_hits_total",
    ),
    "draft_tokens": ("vllm:spec_decode_num_draft_tokens_total",),
    "accepted_tokens": ("vllm:spec_decode_num_accepted_tokens_total",),
}
#: Gauges of a recent prompt-cache hit rate (0..1), read where no counters are.
HIT_RATE_GAUGES: Final = ("sglang:cache_hit_rate",)


def _increase(values: Sequence[float]) -> float:
    """A counter's increase over successive readings (module doc: resets count anew)."""
    total = 0.0
    for before, after in itertools.pairwise(values):
        total += after - before if after >= before else after
    return total


def _picked(frame: pl.DataFrame, names: Sequence[str]) -> tuple[str, pl.DataFrame] | None:
    """The first of ``names`` present in ``frame`` and its samples summed per scrape
    and model: columns model, t_s, value."""
    import polars as pl

    for name in names:
        rows = frame.filter(pl.col("metric") == name)
        if rows.height:
            model = pl.col("labels").str.json_path_match("$.model_name").fill_null("")
            summed = (
                rows.with_columns(model.alias("model"))
                .group_by(["model", "t_s"])
                .agg(pl.col("value").sum())
                .sort(["model", "t_s"])
            )
            return name, summed
    return None


def _span(rows: pl.DataFrame) -> float:
    """Seconds from the first scrape of ``rows`` to the last."""
    times = rows["t_s"].to_list()
    return float(max(times) - min(times))


def _rate(part: float | None, whole: float | None) -> float | None:
    if part is None or not whole:
        return None
    return part / whole


def server_counters(frame: pl.DataFrame | None) -> tuple[ServerCounters, ...]:
    """One :class:`~tokrate.runfolder.summary.ServerCounters` per (endpoint, model)
    whose server exported a counter or gauge of :data:`COUNTERS` /
    :data:`HIT_RATE_GAUGES` in at least two scrapes (a gauge: one); sorted by
    endpoint and model. Empty without samples."""
    if frame is None or frame.height == 0:
        return ()
    out: list[ServerCounters] = []
    for (endpoint,), samples in sorted(
        frame.partition_by("endpoint", as_dict=True).items(), key=lambda kv: str(kv[0][0])
    ):
        increases: dict[tuple[str, str], float] = {}
        sources: dict[str, list[str]] = {}
        spans: dict[str, tuple[float, int]] = {}
        for role, names in COUNTERS.items():
            picked = _picked(samples, names)
            if picked is None:
                continue
            name, rows = picked
            for (model,), per in rows.partition_by("model", as_dict=True).items():
                values = per["value"].to_list()
                if len(values) < 2:
                    continue
                increases[(str(model), role)] = _increase(values)
                sources.setdefault(str(model), []).append(name)
                spans[str(model)] = (_span(per), len(values))
        gauges: dict[str, float] = {}
        if not any(role.startswith("prefix") for _, role in increases):
            picked = _picked(samples, HIT_RATE_GAUGES)
            if picked is not None:
                name, rows = picked
                for (model,), per in rows.partition_by("model", as_dict=True).items():
                    gauges[str(model)] = float(per["value"].mean())  # type: ignore[arg-type]
                    sources.setdefault(str(model), []).append(name)
                    spans[str(model)] = (_span(per), per.height)
        for model in sorted(sources):
            queries = increases.get((model, "prefix_queries"))
            hits = increases.get((model, "prefix_hits"))
            drafted = increases.get((model, "draft_tokens"))
            accepted = increases.get((model, "accepted_tokens"))
            window_s, scrapes = spans[model]
            out.append(
                ServerCounters(
                    endpoint=str(endpoint),
                    model=model,
                    sources=tuple(sources[model]),
                    window_s=window_s,
                    scrapes=scrapes,
                    prefix_query_tokens=None if queries is None else round(queries),
                    prefix_hit_tokens=None if hits is None else round(hits),
                    prefix_hit_rate=_rate(hits, queries) if model not in gauges else gauges[model],
                    hit_rate_from_gauge=model in gauges,
                    draft_tokens=None if drafted is None else round(drafted),
                    accepted_tokens=None if accepted is None else round(accepted),
                    spec_acceptance=_rate(accepted, drafted),
                )
            )
    return tuple(out)
