"""Workloads in the report: TTFT by turn of multi-turn sessions (does the growing
history cost prefill time, or does the server's prefix cache serve it?) and the
shared-prefix workload's TTFT with vs without a shared prefix.

Rows are the ok, measured records that carry a ``turn`` (session runs; records of
schema < 3 and ordinary requests have none, and then the chart is left out). Per
series (the model; "run key/model" when several runs) and turn: the number of
requests, TTFT p10/p50/p90 in ms and the median input tokens (the history's length as
the server counted it) and cached tokens (what its prefix cache served, when it said).

:func:`prefix_notes`: one metadata line per model of a run whose records hold both
tasks of ``[prompts] shared_prefix`` ("shared-prefix", "unique-prefix"): their TTFT
p50 side by side (ok, measured requests).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import polars as pl
from matplotlib.figure import Figure

from tokrate.analysis.ordering import model_key, natural_key
from tokrate.report.figures import house_style, new_figure
from tokrate.report.model import Chart, ReportInputs
from tokrate.report.styles import series_colors

__all__ = ["prefix_notes", "turn_chart", "turn_entry", "turn_table"]

#: The tasks of the shared-prefix workload (tokrate.inputs.workloads SHARED_TASK/UNSHARED_TASK).
_SHARED, _UNSHARED = "shared-prefix", "unique-prefix"


def _measured() -> pl.Expr:
    return (pl.col("status") == "ok") & ~pl.col("warmup").fill_null(False)


def turn_table(runs: Sequence[tuple[str, pl.DataFrame]]) -> pl.DataFrame:
    """Columns series, turn, n, ttft_p10_ms, ttft_p50_ms, ttft_p90_ms,
    input_tokens_p50, cached_tokens_p50 (null when unknown); sorted by series (names
    read naturally: sim-1b before sim-13b), then turn.
    ``runs`` is (run key, records)."""
    multi = len(runs) > 1
    parts = []
    for key, records in runs:
        if "turn" not in records.columns or not records.height:
            continue
        rows = records.filter(_measured() & pl.col("turn").is_not_null())
        rows = rows.filter(pl.col("ttft_s").is_not_null())
        if not rows.height:
            continue
        prefix = f"{key}/" if multi else ""
        cached = pl.col("cached_tokens") if "cached_tokens" in rows.columns else pl.lit(None)
        parts.append(
            rows.group_by((pl.lit(prefix) + pl.col("model")).alias("series"), "turn").agg(
                pl.len().alias("n"),
                (pl.col("ttft_s").quantile(0.1, "linear") * 1e3).alias("ttft_p10_ms"),
                (pl.col("ttft_s").median() * 1e3).alias("ttft_p50_ms"),
                (pl.col("ttft_s").quantile(0.9, "linear") * 1e3).alias("ttft_p90_ms"),
                pl.col("input_tokens").median().alias("input_tokens_p50"),
                cached.cast(pl.Float64).median().alias("cached_tokens_p50"),
            )
        )
    if not parts:
        return pl.DataFrame(
            schema={
                "series": pl.String,
                "turn": pl.Int64,
                "n": pl.UInt32,
                "ttft_p10_ms": pl.Float64,
                "ttft_p50_ms": pl.Float64,
                "ttft_p90_ms": pl.Float64,
                "input_tokens_p50": pl.Float64,
                "cached_tokens_p50": pl.Float64,
            }
        )
    table = pl.concat(parts, how="vertical_relaxed")
    names = sorted(table.get_column("series").unique().to_list(), key=natural_key)
    rank = pl.col("series").replace_strict(
        {name: i for i, name in enumerate(names)}, return_dtype=pl.Int64
    )
    return table.sort(rank, "turn")


def turn_entry(inputs: ReportInputs) -> Iterator[Chart[Any]]:
    """The TTFT-by-turn chart of multi-turn sessions; nothing for runs without them."""
    turns = turn_table([(k, r.records) for k, r in inputs.runs])
    if turns.height:
        yield Chart(
            "ttft_by_turn",
            "TTFT by turn",
            "Multi-turn sessions: TTFT of each turn, which sends the whole history with "
            "the model's real answers; it grows with the history unless a prefix cache "
            "serves it.",
            turns,
            turn_chart,
        )


@house_style
def turn_chart(table: pl.DataFrame) -> Figure:
    """TTFT p50 (line) and p10-p90 (band) against the turn, one series per model."""
    fig, (ax,) = new_figure(8, 4.2)
    names = table.get_column("series").unique(maintain_order=True).to_list()
    colors = series_colors(names)
    for name in names:
        part = table.filter(pl.col("series") == name)
        turn = part.get_column("turn").to_numpy()
        p50 = part.get_column("ttft_p50_ms").to_numpy()
        n = int(part.get_column("n").sum())
        ax.fill_between(
            turn,
            part.get_column("ttft_p10_ms").to_numpy(),
            part.get_column("ttft_p90_ms").to_numpy(),
            color=colors[name],
            alpha=0.18,
            lw=0,
        )
        ax.plot(turn, p50, marker="o", color=colors[name], lw=1.6, label=f"{name} (n={n})")
    top = float(np.nanmax(table.get_column("ttft_p90_ms").to_numpy())) if table.height else 1.0
    ax.set_ylim(0, top * 1.1)
    turns = sorted(set(table.get_column("turn").to_list()))
    ax.set_xticks(turns)
    ax.set_xlabel("turn of the session (each sends the whole history so far)")
    ax.set_ylabel("TTFT (ms): median, p10–p90 band")
    ax.set_title("TTFT by turn of multi-turn sessions")
    ax.legend(loc="upper left", frameon=False)
    return fig


def prefix_notes(runs: Sequence[tuple[str, pl.DataFrame]]) -> list[tuple[str, str]]:
    """(label, text) lines: per run and model, TTFT p50 with the shared prefix vs with
    unique prefixes, and the ratio. ``runs`` is (run key, records)."""
    out: list[tuple[str, str]] = []
    multi = len(runs) > 1
    for key, records in runs:
        if not records.height or "task" not in records.columns:
            continue
        rows = records.filter(_measured() & pl.col("task").is_in([_SHARED, _UNSHARED]))
        stats = rows.group_by("model", "task").agg(
            (pl.col("ttft_s").median() * 1e3).alias("p50_ms"), pl.len().alias("n")
        )
        for (model,), part in sorted(
            stats.group_by(["model"]), key=lambda kp: model_key(str(kp[0][0]))
        ):
            by_task = {str(r["task"]): r for r in part.iter_rows(named=True)}
            shared, unshared = by_task.get(_SHARED), by_task.get(_UNSHARED)
            if shared is None or unshared is None or not shared["p50_ms"] or not unshared["p50_ms"]:
                continue
            label = f"{key}: shared prefix" if multi else "shared prefix"
            text = (
                f"{model}: TTFT p50 {shared['p50_ms']:.1f} ms with the shared prefix (n="
                f"{shared['n']}) vs {unshared['p50_ms']:.1f} ms with unique prefixes (n="
                f"{unshared['n']}): {shared['p50_ms'] / unshared['p50_ms']:.2f}x"
            )
            out.append((label, text))
    return out
