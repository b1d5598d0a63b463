"""The prompt cache in the report: what the server said it served from its cache.

Read from the summaries (:class:`~tokrate.runfolder.summary.CacheUse`, so the report
says what summary.json says): a "Prompt cache" table (hit rate, cached and written
tokens, TTFT of cold requests against requests with part of the prompt cached, the
per-turn hit rates of sessions) and a chart of the same TTFT split with each group's
hit rate. Only requests whose server reported a cached-token figure count; a group
with none is absent, and without any the chart is left out with a note.

Beside it, "Prompt cache and speculative decoding, as the server counted them": the
increase of the servers' own ``/metrics`` counters over each run
(:mod:`tokrate.analysis.server_counters`, from the run's server_metrics.parquet, the
same figures summary.json's ``server_counters`` holds).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
from matplotlib.figure import Figure

from tokrate.analysis.server_counters import server_counters
from tokrate.report.figures import house_style, new_figure
from tokrate.report.model import Chart, LeftOut, ReportInputs
from tokrate.report.tables import Table
from tokrate.runfolder.summary import CacheUse, Group, Summary
from tokrate.textfmt import DASH, fmt_ms, fmt_pct

__all__ = [
    "cache_chart",
    "cache_rows",
    "cache_split_words",
    "cache_table",
    "cache_tables",
    "counters_table",
]

Summaries = Sequence[tuple[str, Summary]]


def cache_rows(summaries: Summaries) -> list[tuple[str, Group]]:
    """(run key, group) of every group whose server reported cached tokens."""
    return [(k, g) for k, s in summaries for g in s.groups if g.cache is not None]


def cache_split_words(c: CacheUse) -> str:
    """The TTFT split in words: "180 ms cold, 40.0 ms with 95% of the prompt cached"."""
    parts = []
    if c.ttft_cold_s.n:
        parts.append(f"{fmt_ms(c.ttft_cold_s.p50)} cold")
    if c.ttft_cached_s.n:
        parts.append(
            f"{fmt_ms(c.ttft_cached_s.p50)} with {fmt_pct(c.cached_share_p50)} of the prompt cached"
        )
    return ", ".join(parts) or DASH


def _turns(c: CacheUse) -> str:
    if not c.by_turn:
        return DASH
    return ", ".join(f"{t.turn}: {fmt_pct(t.hit_rate)}" for t in c.by_turn)


def cache_table(summaries: Summaries) -> Table | None:
    """One row per group with cache figures."""
    header = (
        "run",
        "endpoint",
        "model",
        "level",
        "reported",
        "hit rate",
        "cached / input tokens",
        "cache writes",
        "TTFT p50 cold (n)",
        "TTFT p50 cached (n)",
        "TTFT split",
        "hit rate by turn",
        "sessions' hit rate p50",
    )
    rows = []
    for key, g in cache_rows(summaries):
        c = g.cache
        assert c is not None
        rows.append(
            (
                key,
                g.endpoint,
                g.model,
                g.level,
                f"{c.n}/{g.counts.ok}",
                fmt_pct(c.hit_rate, 1),
                f"{c.cached_tokens:,} / {c.input_tokens:,}",
                DASH if c.write_tokens is None else f"{c.write_tokens:,}",
                f"{fmt_ms(c.ttft_cold_s.p50)} ({c.ttft_cold_s.n})",
                f"{fmt_ms(c.ttft_cached_s.p50)} ({c.ttft_cached_s.n})",
                cache_split_words(c),
                _turns(c),
                fmt_pct(c.session_hit_rate.p50, 1),
            )
        )
    if not rows:
        return None
    note = (
        "What the server said it served from its prompt cache (usage cached_tokens, "
        "Anthropic cache_read_input_tokens, llama.cpp cache_n), over ok measured requests "
        "that reported a figure (reported = those / ok). Hit rate = cached ÷ input tokens. "
        "Cold = nothing cached; cached = some of the prompt cached, with the median "
        "cached share of those prompts. Cache writes: Anthropic cache_creation_input_tokens."
    )
    numeric = (False,) * 4 + (True,) * 6 + (False, False, True)
    wrap = (False,) * 10 + (True, True, False)
    return Table("Prompt cache", header, tuple(rows), note=note, numeric=numeric, wrap=wrap)


def _tokens(value: int | None) -> str:
    return DASH if value is None else f"{value:,}"


def counters_table(inputs: ReportInputs) -> Table | None:
    """One row per run and target whose server exported prompt-cache or speculative
    counters on /metrics (None when no server did)."""
    rows = []
    for key, run in inputs.runs:
        for c in server_counters(run.server_metrics):
            hit_rate = fmt_pct(c.prefix_hit_rate, 1)
            if c.hit_rate_from_gauge:
                hit_rate += " (gauge mean)"
            rows.append(
                (
                    key,
                    c.endpoint,
                    c.model or "(whole server)",
                    hit_rate,
                    f"{_tokens(c.prefix_hit_tokens)} / {_tokens(c.prefix_query_tokens)}",
                    fmt_pct(c.spec_acceptance, 1),
                    f"{_tokens(c.accepted_tokens)} / {_tokens(c.draft_tokens)}",
                    f"{c.window_s:.1f} s ({c.scrapes})" if c.window_s is not None else DASH,
                    ", ".join(c.sources),
                )
            )
    if not rows:
        return None
    header = (
        "run",
        "endpoint",
        "model",
        "cache hit rate",
        "hit / queried tokens",
        "spec. acceptance",
        "accepted / drafted tokens",
        "window (scrapes)",
        "counters",
    )
    note = (
        "What the server counted on its /metrics over the whole run: the increase of each "
        "counter from the run's first scrape to its last, warm-up and any other client's "
        "requests included (the table above counts this run's measured requests only). "
        "Hit rate = prefix-cache hit tokens ÷ queried tokens; acceptance = accepted ÷ "
        "drafted tokens of speculative decoding. SGLang exports only a hit-rate gauge: "
        "its mean over the scrapes."
    )
    numeric = (False,) * 3 + (True,) * 5 + (False,)
    wrap = (False,) * 8 + (True,)
    return Table(
        "Prompt cache and speculative decoding, as the server counted them",
        header,
        tuple(rows),
        note=note,
        numeric=numeric,
        wrap=wrap,
    )


def cache_tables(inputs: ReportInputs) -> Iterator[Table]:
    table = cache_table(inputs.summaries)
    if table is not None:
        yield table
    counters = counters_table(inputs)
    if counters is not None:
        yield counters


def _name(key: str, g: Group, multi: bool) -> str:
    prefix = f"{key}: " if multi else ""
    return f"{prefix}{g.endpoint}/{g.model} {g.level}"


def cache_chart(inputs: ReportInputs) -> Iterator[Chart[Any] | LeftOut]:
    """TTFT cold vs cached per group, labelled with the group's hit rate."""
    rows = cache_rows(inputs.summaries)
    if not rows:
        yield LeftOut("prompt cache: no server reported cached prompt tokens")
        return
    yield Chart(
        "prompt_cache",
        "Prompt cache: TTFT cold vs cached",
        "Per model and load level: median TTFT of the requests the server served with "
        "nothing cached and with part of the prompt cached (as its usage reported), "
        "labelled with the group's hit rate (cached ÷ input tokens).",
        [(_name(k, g, inputs.multi), g) for k, g in rows],
        draw_cache,
    )


@house_style
def draw_cache(rows: Sequence[tuple[str, Group]]) -> Figure:
    """Paired horizontal bars per group: TTFT p50 cold and cached (ms)."""
    fig, (ax,) = new_figure(9, 1.6 + 0.45 * len(rows))
    y = np.arange(len(rows))
    cold = [((g.cache.ttft_cold_s.p50 if g.cache else None) or 0.0) * 1e3 for _, g in rows]
    hot = [((g.cache.ttft_cached_s.p50 if g.cache else None) or 0.0) * 1e3 for _, g in rows]
    ax.barh(y - 0.2, cold, 0.4, label="nothing cached", color="#1f77b4")
    ax.barh(y + 0.2, hot, 0.4, label="part of the prompt cached", color="#2ca02c")
    for i, (_, g) in enumerate(rows):
        rate = g.cache.hit_rate if g.cache else None
        ax.annotate(
            f"hit rate {fmt_pct(rate)}" if rate is not None else "hit rate —",
            (max(cold[i], hot[i]), i),
            xytext=(4, 0),
            textcoords="offset points",
            va="center",
            fontsize=8,
        )
    ax.set_yticks(y, [n for n, _ in rows])
    ax.invert_yaxis()
    ax.set_xlabel("TTFT, milliseconds (median)")
    ax.set_title("TTFT by prompt-cache state")
    ax.margins(x=0.2)
    ax.legend(loc="lower right", frameon=False)
    return fig
