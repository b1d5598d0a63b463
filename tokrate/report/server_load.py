"""The "Server load" chart: the servers' own queue beside the TTFT the client saw.

Drawn from each run's server_metrics.parquet (``[[endpoint]] metrics_url``; the embedded
simulator's is always scraped) on the timeline's clock, seconds since the run's first
send: TTFT of every measured ok request at its send time on top, then requests running
in the server's batch, requests waiting in its queue and KV-cache use (percent), one
line per target (a server that labels nothing by model and serves several is one
"(whole server)" line). TTFT climbing while "waiting" climbs is queueing inside the
server; TTFT climbing with an empty queue is somewhere else (network, gateway, client).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import polars as pl
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.legend import Legend
from matplotlib.ticker import MaxNLocator

from tokrate.analysis.ordering import natural_key
from tokrate.report.figures import fit_figure_to_legends, house_style, new_figure
from tokrate.report.model import Chart, LeftOut, ReportInputs
from tokrate.report.styles import Style, legend_outside, report_order, series_styles
from tokrate.report.timeline_data import server_points, ttft_points
from tokrate.runfolder.run_info import RunInfo

__all__ = ["ALL_MODELS", "server_load", "server_load_chart", "server_load_meta"]

#: How a line is named where the server's metrics carry no model label.
ALL_MODELS = "(whole server)"
#: A gap between samples longer than this many median intervals (failed scrapes, a
#: stop between runs) breaks the line instead of drawing through it.
_GAP_FACTOR = 2.5
_PANELS = (
    ("running", "running requests"),
    ("waiting", "waiting requests"),
    ("kv_cache", "KV-cache use (%)"),
)


def _broken(t: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``t``, ``y`` with NaN inserted where samples are missing (see _GAP_FACTOR)."""
    if t.size < 3:
        return t, y
    step = np.diff(t)
    gap = np.flatnonzero(step > _GAP_FACTOR * float(np.median(step))) + 1
    return np.insert(t, gap, np.nan), np.insert(y, gap, np.nan)


def _in_order(frame: pl.DataFrame) -> list[tuple[tuple[str, str], pl.DataFrame]]:
    """``frame``'s (series, model) groups with the models in the report's order (every
    legend's), each model's series (runs) in natural order."""
    groups = [
        ((str(s), str(m)), part)
        for (s, m), part in frame.group_by(["series", "model"], maintain_order=True)
    ]
    rank = {m: i for i, m in enumerate(report_order([m for (_s, m), _ in groups]))}
    return sorted(groups, key=lambda g: (rank[g[0][1]], natural_key(g[0][0])))


def _label(series: str, model: str, one_series: bool) -> str:
    return model if one_series else f"{model} · {series}"


@house_style
def server_load(ttft: pl.DataFrame, server: pl.DataFrame) -> Figure:
    """TTFT per request over time (top), then one panel per server role present."""
    server = server.with_columns(pl.col("model").fill_null(ALL_MODELS))
    roles = [(r, title) for r, title in _PANELS if (server.get_column("role") == r).any()]
    fig, axes = new_figure(11, 2.3 * (1 + len(roles)) + 0.4, nrows=1 + len(roles))
    keys = pl.concat([ttft.select("series", "model"), server.select("series", "model")])
    styles: dict[tuple[str, str], Style] = series_styles(keys)
    one_series = keys.get_column("series").n_unique() == 1
    top = axes[0]
    for (series, model), part in _in_order(ttft):
        style = styles[(series, model)]
        top.plot(
            part["t_send_s"].to_numpy(),
            part["ttft_s"].to_numpy(),
            style.marker,
            ms=3,
            alpha=0.7,
            color=style.color,
            label=_label(series, model, one_series),
        )
    top.set_ylabel("TTFT (s)")
    top.set_ylim(bottom=0)
    top.set_title("TTFT at send time, and the server's own load (from its /metrics)")
    legends = [legend_outside(top)]
    for ax, (role, title) in zip(axes[1:], roles, strict=True):
        legends.append(
            _role_panel(ax, server.filter(pl.col("role") == role), role, styles, one_series)
        )
        ax.set_ylabel(title)
        ax.sharex(top)
    axes[-1].set_xlabel("time since the run's first request (s)")
    fit_figure_to_legends(fig, beside=legends)
    return fig


def _role_panel(
    ax: Axes, part: pl.DataFrame, role: str, styles: dict[tuple[str, str], Style], one: bool
) -> Legend | None:
    scale = 100.0 if role == "kv_cache" else 1.0
    for (series, model), line in _in_order(part):
        style = styles[(series, model)]
        t, y = _broken(line["t_s"].to_numpy(), line["value"].to_numpy() * scale)
        ax.plot(
            t,
            y,
            drawstyle="steps-post",
            ls=style.linestyle,
            lw=1.4,
            color=style.color,
            label=_label(series, model, one),
        )
    if role == "kv_cache":
        ax.set_ylim(0, 105)
    else:  # request counts: whole numbers, and an idle queue still shows 0..1
        top = float(part.get_column("value").max() or 0.0)  # type: ignore[arg-type]
        ax.set_ylim(0, max(1.0, top * 1.1))
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    return legend_outside(ax)


def server_load_chart(inputs: ReportInputs) -> Iterator[Chart[Any] | LeftOut]:
    """The "Server load" chart, or a note saying why there is none."""
    runs = [(k, r.info, r.records, r.server_metrics) for k, r in inputs.runs]
    scraped = [(k, rec, s) for k, _, rec, s in runs if s is not None and s.height]
    if not scraped:
        yield LeftOut(
            "server load: no server metrics in these runs (set [[endpoint]] metrics_url to"
            " the Prometheus /metrics of the server)"
        )
        return
    server = server_points(scraped)
    # A server serves more models than a run may measure (the simulator all its
    # tiers): its lines and legend show only the models this report ran (all of them
    # where the server names its models otherwise than the requests did).
    run_models = inputs.records.select(pl.col("model").unique()).collect().to_series()
    ran = server.filter(pl.col("model").is_null() | pl.col("model").is_in(run_models))
    server = ran if ran.height else server
    if not server.height:
        names = sorted({m for _, _, s in scraped for m in s.get_column("metric").unique()})
        shown = ", ".join(names[:6]) + (", ..." if len(names) > 6 else "")
        yield LeftOut(
            f"server load: the scraped metrics ({shown}) include no known running,"
            " waiting or KV-cache metric (vLLM, SGLang, TGI, llama.cpp; docs/self-hosted.md)"
        )
        return
    ttft = ttft_points(inputs.records)
    intervals = sorted(
        {f"{i.interval_s:g} s" for _, info, _, _ in runs for i in info.server_metrics}
    )
    caption = (
        "Each measured request's TTFT at the moment it was sent (top), and what the server "
        "reported about itself on its metrics URL, sampled every "
        f"{' / '.join(intervals) or 'interval'} on the same clock: requests running in its "
        "batch, requests waiting in its queue, KV-cache use. TTFT rising with the waiting "
        "count is queueing inside the server."
    )
    yield Chart("server_load", "Server load", caption, (ttft, server), _draw)


def _draw(data: tuple[pl.DataFrame, pl.DataFrame]) -> Figure:
    return server_load(*data)


def server_load_meta(runs: Sequence[tuple[str, RunInfo]], multi: bool) -> list[tuple[str, str]]:
    """One report meta line per scraped endpoint: scrapes, interval, failures."""
    out = []
    for key, info in runs:
        for s in info.server_metrics:
            failed = f", {s.failures} failed (first: {s.first_error})" if s.failures else ""
            out.append(
                (
                    f"{key}: server metrics" if multi else "server metrics",
                    f"{s.endpoint}: {s.scrapes} scrapes every {s.interval_s:g} s, "
                    f"{s.samples} samples{failed}",
                )
            )
    return out
