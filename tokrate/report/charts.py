"""Charts: pure matplotlib functions, one per chart.

Each takes prepared polars data (tokrate.report.data) and returns a
``matplotlib.figure.Figure`` built without pyplot (no global state, Agg canvas), so
charts can be drawn from any thread and saved as PNG or SVG. No function here reads
records, files or the network, and none draws an empty chart: callers check the data
and leave a chart out with a note instead.
"""

from __future__ import annotations

import textwrap
from collections.abc import Mapping, Sequence
from typing import Final

import numpy as np
import polars as pl
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from tokrate.analysis.stats import PowerLawFit
from tokrate.hardware import HardwareProfile
from tokrate.report.figures import (
    fit_figure_to_legends,
    house_style,
    legend_columns,
    new_figure,
    plain_log_axes,
    readable_log_axis,
)
from tokrate.report.labels import Label, label_panels
from tokrate.report.size_text import bandwidth_text, describe_fit
from tokrate.report.styles import legend_outside, series_colors, series_styles

__all__ = [
    "CHART_NAMES",
    "cost_vs_speed",
    "latency_boxes",
    "size_vs_speed",
    "throughput_vs_latency",
    "timeline",
    "ttft_cdf",
]

#: File stem of every chart, in report order.
CHART_NAMES: Final = (
    "size_vs_speed",
    "ttft_cdf",
    "latency_boxes",
    "throughput_vs_latency",
    "timeline",
    "cost_vs_speed",
    "connect_time",
)


_BOUND_STYLES: Final = ("--", ":", "-.")
#: Size chart: a series' (family's, run's) marker and its fit's line style; the
#: colour is each point's model's.
_SERIES_MARKERS: Final = ("o", "s", "^", "D", "v", "P")
_FIT_STYLES: Final = ("-", (0, (6, 1.5, 1, 1.5)), (0, (1, 1)), (0, (8, 3)))
#: Rows of the legend under the size chart before it takes another column.
_BELOW_ROWS: Final = 8


def _fmt_params(value: float) -> str:
    return f"{value:g}B"


def _fit_label(name: str, fit: PowerLawFit, per_gpu: bool) -> str:
    one_gpu = " (1-GPU equivalent)" if per_gpu else ""
    return f"fit {name}{one_gpu}: tok/s ∝ params^−k, {describe_fit(fit)}"


def _errorbars(
    ax: Axes, part: pl.DataFrame, column: str, color: str, marker: str, label: str | None
) -> None:
    """Median points with p10-p90 whiskers of ``column`` ("tps" or "ttft")."""
    x = part.get_column("x_params_b").to_numpy()
    y = part.get_column(f"{column}_p50").to_numpy()
    lo = np.clip(y - part.get_column(f"{column}_p10").fill_null(np.nan).to_numpy(), 0, None)
    hi = np.clip(part.get_column(f"{column}_p90").fill_null(np.nan).to_numpy() - y, 0, None)
    ax.errorbar(
        x,
        y,
        yerr=[np.nan_to_num(lo), np.nan_to_num(hi)],
        fmt=marker,
        ms=6 if marker == "o" else 5,
        capsize=3,
        color=color,
        label=label,
        zorder=3,
    )


def _bound_lines(
    ax: Axes, points: pl.DataFrame, hardware: HardwareProfile, x_range: tuple[float, float]
) -> None:
    """One dashed line per (bytes per param, GPU count): the bandwidth bound."""
    combos = (
        points.select(pl.col("bytes_per_param"), pl.col("gpus").fill_null(1))
        .unique()
        .sort(["bytes_per_param", "gpus"])
    )
    several = combos.height > 1
    for (bpp, gpus), style in zip(combos.iter_rows(), _BOUND_STYLES * 4, strict=False):
        prof = hardware.scaled(int(gpus))
        sel = (
            points.filter(
                (pl.col("bytes_per_param") == bpp) & (pl.col("gpus").fill_null(1) == gpus)
            )
            .get_column("x_params_b")
            .to_numpy()
        )
        lo_x, hi_x = (float(sel.min()) / 1.3, float(sel.max()) * 1.3) if several else x_range
        grid = np.geomspace(lo_x, hi_x, 50)
        bound = prof.bandwidth_bytes_per_s / (grid * 1e9 * bpp)
        gpu_txt = f" × {gpus} GPUs" if gpus > 1 else ""
        bw = bandwidth_text(prof.bandwidth_bytes_per_s)
        ax.plot(
            grid,
            bound,
            style,
            color="0.35",
            lw=1.3,
            zorder=2,
            label=f"bound: {hardware.name}{gpu_txt}, {bpp:g} B/param ({bw} ÷ bytes/token)",
        )


@house_style
def size_vs_speed(
    points: pl.DataFrame,
    hardware: HardwareProfile,
    fits: Mapping[str, PowerLawFit],
    *,
    per_gpu: bool = False,
    assumptions: Sequence[str] = (),
) -> Figure:
    """The headline chart: parameters vs per-stream decode tok/s, and vs TTFT.

    ``points``: tokrate.report.data.size_speed_points output. Left panel (most of the
    width): x = active parameters (log), y = decode tok/s median with p10-p90
    whiskers (log), one colour per series, the bandwidth bound line per (bytes/param,
    gpus) combination, and the fitted power law per series. Right panel: TTFT median
    with p10-p90 whiskers against the same x. Every model labelled once per panel,
    where no label overlaps another text, a line or another point; the legend under
    both panels; ``assumptions`` (what the bound stands on) written above them.
    ``per_gpu``: the fits were made on speeds divided by each target's GPU bandwidth
    scale; the fit line is then the one-GPU curve and the legend says so.
    """
    fig, (ax, ax2) = new_figure(12.5, 6.4, ncols=2, width_ratios=(2.3, 1.0))
    series = points.get_column("series").unique(maintain_order=True).to_list()
    # Each point in its model's colour (the report's, the same in every chart); each
    # series (a family, or a run) by its marker and its fit's line style.
    colors = series_colors([str(m) for m in points.get_column("model").unique(maintain_order=True)])
    xs_all = points.get_column("x_params_b").to_numpy()
    x_range = (float(xs_all.min()) / 1.6, float(xs_all.max()) * 1.6)
    speed_labels: list[Label] = []
    ttft_labels: list[Label] = []
    labelled: set[str] = set()
    ringed = False
    for index, name in enumerate(series):
        part = points.filter(pl.col("series") == name)
        marker = _SERIES_MARKERS[index % len(_SERIES_MARKERS)]
        for (model,), one in part.group_by(["model"], maintain_order=True):
            _errorbars(ax, one, "tps", colors[str(model)], marker, None)
            _errorbars(ax2, one, "ttft", colors[str(model)], marker, None)
        ax.plot([], [], marker, color="0.3", label=f"{name} (median, p10–p90)")
        if "above_bound" in part.columns and bool(part["above_bound"].any()):
            # Past the bandwidth bound: the physics of plain decoding does not allow it
            # (size_text.above_bound_warnings says why it may happen).
            above = part.filter(pl.col("above_bound"))
            ax.scatter(
                above.get_column("x_params_b").to_numpy(),
                above.get_column("tps_p50").to_numpy(),
                s=220,
                facecolors="none",
                edgecolors="#d62728",
                linewidths=1.6,
                zorder=4,
                label=None if ringed else "above its bandwidth bound",
            )
            ringed = True
        fit = fits.get(name)
        if fit is not None:
            x = part.get_column("x_params_b").to_numpy()
            grid = np.geomspace(float(x.min()), float(x.max()), 50)
            label = _fit_label(name, fit, per_gpu)
            style = _FIT_STYLES[index % len(_FIT_STYLES)]
            ax.plot(grid, fit.predict(grid), ls=style, lw=1.2, alpha=0.8, color="0.2", label=label)
        for row in part.iter_rows(named=True):
            text = str(row.get("label") or row["model"])
            # A model measured in several series (runs) is named once: its other
            # points sit at the same x, told apart by marker.
            if text in labelled:
                continue
            labelled.add(text)
            color = colors[str(row["model"])]
            long = text
            if row["is_moe"]:
                long += f" ({row['x_params_b']:g}B active / {row['total_params_b']:g}B total)"
            speed_labels.append(Label(row["x_params_b"], row["tps_p50"], long, color))
            if row["ttft_p50"] is not None:
                ttft_labels.append(Label(row["x_params_b"], row["ttft_p50"], text, color))
    _bound_lines(ax, points, hardware, x_range)
    for a in (ax, ax2):
        a.set_xscale("log")
        a.set_yscale("log")
        a.set_xlim(*x_range)
        # Room above and below the points for their labels.
        lo, hi = a.get_ylim()
        a.set_ylim(lo / 1.5, hi * 1.5)
        readable_log_axis(a.xaxis, lambda v, _pos: _fmt_params(v))
        readable_log_axis(a.yaxis)
        a.set_xlabel("active parameters (billions, log scale)")
    ax.set_ylabel("decode speed per stream (tokens/s, log)")
    ax.set_title("Model size vs decode speed")
    ax2.set_ylabel("time to first token (s, log)")
    ax2.set_title("Model size vs TTFT")
    # The legend under both panels, series first, then fits and bounds.
    handles, labels = ax.get_legend_handles_labels()
    order = sorted(range(len(labels)), key=lambda i: (not labels[i].endswith("p10–p90)"), i))
    legend = fig.legend(
        [handles[i] for i in order],
        [labels[i] for i in order],
        loc="outside lower center",
        ncols=max(2, legend_columns(len(labels), rows=_BELOW_ROWS)),
        frameon=False,
    )
    fit_figure_to_legends(fig, below=[legend])
    heading = "Per-stream speed at each model's lowest load level."
    fig.suptitle(
        _wrapped([heading, *assumptions], width=150), fontsize=8.5, color="0.3", ha="center"
    )
    label_panels(fig, [(ax, speed_labels, 8.0), (ax2, ttft_labels, 8.0)])
    return fig


def _wrapped(sentences: Sequence[str], width: int) -> str:
    """Sentences as lines of at most ``width`` characters (a figure title wraps only
    where told to)."""
    return textwrap.fill(" ".join(sentences), width=width)


@house_style
def ttft_cdf(ecdf: pl.DataFrame) -> Figure:
    """TTFT empirical CDF per (series, model); x log seconds, y fraction of requests."""
    fig, (ax,) = new_figure(8, 4.8)
    labels = _labels(ecdf)
    styles = series_styles(ecdf)
    # Legend in the frame's order: models by size (tokrate.report.data.size_order).
    for key, part in ecdf.group_by(["series", "model"], maintain_order=True):
        label = labels[(str(key[0]), str(key[1]))]
        style = styles[(str(key[0]), str(key[1]))]
        n = part.get_column("n").item(0)
        ax.step(
            part.get_column("x").to_numpy(),
            part.get_column("p").to_numpy(),
            where="post",
            color=style.color,
            ls=style.linestyle,
            label=f"{label} (n={n})",
            lw=1.5,
        )
    ax.set_xscale("log")
    plain_log_axes(ax, y=False)
    ax.set_ylim(0, 1.02)
    ax.set_xlabel("time to first token (s, log scale)")
    ax.set_ylabel("fraction of requests ≤ x")
    ax.set_title("TTFT distribution (empirical CDF, ok requests, all load levels)")
    for q in (0.5, 0.95):
        ax.axhline(q, color="0.6", lw=0.8, ls=":")
    fit_figure_to_legends(fig, beside=[legend_outside(ax)])
    return fig


def _labels(frame: pl.DataFrame) -> dict[tuple[str, str], str]:
    pairs = frame.select("series", "model").unique(maintain_order=True).rows()
    one_series = len({s for s, _ in pairs}) == 1
    return {(s, m): (m if one_series else f"{m} · {s}") for s, m in pairs}


def _bxp(ax: Axes, stats: pl.DataFrame, scale: float, title: str, names: bool) -> None:
    """One panel of horizontal boxes (``scale``: seconds to milliseconds); model names
    on the y axis only where ``names`` (the panel beside repeats them otherwise)."""
    labels = _labels(stats)
    boxes = []
    for row in stats.iter_rows(named=True):
        boxes.append(
            {
                "label": f"{labels[(row['series'], row['model'])]}\n(n={row['n']})",
                "whislo": row["p10"] * scale,
                "q1": row["p25"] * scale,
                "med": row["p50"] * scale,
                "q3": row["p75"] * scale,
                "whishi": row["p90"] * scale,
                "mean": row["mean"] * scale,
                "fliers": [],
            }
        )
    drawn = ax.bxp(
        boxes,
        showfliers=False,
        showmeans=True,
        orientation="horizontal",
        meanprops={"marker": "D", "markersize": 4, "markerfacecolor": "white"},
    )
    # Each box, its median and its name in its model's colour, as in every chart.
    colors = series_colors([str(m) for m in stats.get_column("model")])
    for i, model in enumerate(str(m) for m in stats.get_column("model")):
        color = colors[model]
        for part, per_box in (("boxes", 1), ("medians", 1), ("whiskers", 2), ("caps", 2)):
            for artist in drawn[part][i * per_box : (i + 1) * per_box]:
                artist.set_color(color)
        drawn["medians"][i].set_linewidth(2.4)  # thicker: the median reads apart from the box
        drawn["means"][i].set_markeredgecolor(color)
    values = [b[k] for b in boxes for k in ("whislo", "q1", "med", "q3", "whishi", "mean")]
    positive = [v for v in values if v > 0]
    hi = max(values)
    unit = "milliseconds (log scale)"
    if len(positive) < len(values):
        # Zero gaps (chunks that arrived in one read) have no place on a log axis: a
        # symlog axis keeps them visible at 0, linear up to the smallest positive value.
        floor = min(positive) if positive else 1e-3
        ax.set_xscale("symlog", linthresh=floor)
        ax.set_xlim(0.0, max(hi, floor) * 1.5)
        unit = f"milliseconds (zeros shown at 0; linear below {floor:.3g} ms, log above)"
    else:
        # Pad the range ourselves: identical values (a fixed-timing server) would give
        # a zero-width log axis.
        ax.set_xlim(min(values) / 1.5, hi * 1.5)
        ax.set_xscale("log")
        plain_log_axes(ax, y=False)
    if not names:
        ax.set_yticklabels([])
    else:
        for tick, model in zip(ax.get_yticklabels(), stats.get_column("model"), strict=True):
            tick.set_color(colors[str(model)])
    ax.set_xlabel(unit)
    ax.set_title(title)
    ax.invert_yaxis()


@house_style
def latency_boxes(tpot: pl.DataFrame, itl: pl.DataFrame) -> Figure:
    """TPOT per request and ITL per gap per model: boxes p25-p75, whiskers p10-p90,
    median line, mean diamond (ms, log x). Either frame may be empty (panel omitted).
    Where both panels list the same models in the same order, the names are written
    once, left."""
    panels = [
        (f, t) for f, t in ((tpot, "TPOT per request"), (itl, "Inter-token gaps (ITL)")) if f.height
    ]
    rows = max(f.height for f, _ in panels)
    fig, axes = new_figure(11, 1.6 + 0.55 * rows, ncols=len(panels))
    keys = [f.select("series", "model").rows() for f, _ in panels]
    same = all(k == keys[0] for k in keys)
    for i, (ax, (frame, title)) in enumerate(zip(axes, panels, strict=True)):
        _bxp(ax, frame, 1000.0, title, names=i == 0 or not same)
    fig.suptitle(
        "Box: p25–p75, line: median, ◇: mean, whiskers: p10–p90 (ms, log scale)",
        fontsize=9,
        color="0.3",
    )
    return fig


@house_style
def throughput_vs_latency(groups: pl.DataFrame) -> Figure:
    """Sweep curves: aggregate output tok/s (y) vs per-stream decode tok/s (left) and vs
    TTFT p95 (right), one curve per (series, model), points labelled with the level
    where no label overlaps another text, a curve or another point."""
    fig, (ax, ax2) = new_figure(12.5, 5.6, ncols=2)
    labels = _labels(groups)
    styles = series_styles(groups)
    annotated: set[str] = set()
    levels_at: dict[int, list[Label]] = {0: [], 1: []}
    for key, part in groups.group_by(["series", "model"], maintain_order=True):
        label = labels[(str(key[0]), str(key[1]))]
        style = styles[(str(key[0]), str(key[1]))]
        # Level labels once per model: a second run of it shares its colour and would
        # print "c=1" over "c=1"; its markers say which run a point is.
        annotate = str(key[1]) not in annotated
        annotated.add(str(key[1]))
        part = part.sort(pl.coalesce(pl.col("concurrency").cast(pl.Float64), pl.col("rate_rps")))
        levels = [
            f"c={c}" if c is not None else f"{r:g}/s"
            for c, r in part.select("concurrency", "rate_rps").rows()
        ]
        y = part.get_column("aggregate_tps").to_numpy()
        for i, (a, xcol) in enumerate(((ax, "decode_p50"), (ax2, "ttft_p95"))):
            x = part.get_column(xcol).to_numpy()
            a.plot(
                x,
                y,
                marker=style.marker,
                ls=style.linestyle,
                color=style.color,
                label=label,
                lw=1.5,
                ms=5,
            )
            if annotate:
                levels_at[i] += [
                    Label(float(xi), float(yi), lev, style.color)
                    for xi, yi, lev in zip(x, y, levels, strict=True)
                    if np.isfinite(xi) and np.isfinite(yi)
                ]
    ax.set_xlabel("per-stream decode speed, median (tokens/s, log scale)")
    ax2.set_xlabel("TTFT p95 (s, log scale)")
    for a in (ax, ax2):
        a.set_xscale("log")
        a.set_yscale("log")
        _pad_log_limits(a)
        plain_log_axes(a)
        a.set_ylabel("aggregate output throughput (tokens/s, log)")
    ax.set_title("Throughput vs per-stream speed")
    ax2.set_title("Throughput vs TTFT p95")
    handles, names = ax.get_legend_handles_labels()
    legend = fig.legend(
        handles, names, loc="outside right upper", frameon=False, ncols=legend_columns(len(names))
    )
    fit_figure_to_legends(fig, beside=[legend])
    label_panels(fig, [(ax, levels_at[0], 7.0), (ax2, levels_at[1], 7.0)])
    return fig


def _pad_log_limits(ax: Axes, factor: float = 1.4) -> None:
    """Widen both log limits by ``factor`` each way: room for the point labels."""
    for get, set_ in ((ax.get_xlim, ax.set_xlim), (ax.get_ylim, ax.set_ylim)):
        lo, hi = get()
        set_(lo / factor, hi * factor)


@house_style
def timeline(bins: pl.DataFrame, width_s: float) -> Figure:
    """Output tokens/s per time bin per (series, model) over the run, and failed
    requests per bin below it (spots throttling and error bursts)."""
    failed = bool(bins.get_column("errors").sum())
    # The failed-requests panel only when something failed: an empty one says nothing.
    fig, axes = new_figure(11, 5.5 if failed else 3.6, nrows=2 if failed else 1)
    ax, ax2 = axes[0], axes[1] if failed else None
    labels = _labels(bins)
    styles = series_styles(bins)
    bottoms: dict[float, float] = {}
    for key, part in bins.group_by(["series", "model"], maintain_order=True):
        label = labels[(str(key[0]), str(key[1]))]
        style = styles[(str(key[0]), str(key[1]))]
        t = part.get_column("t_bin_s").to_numpy() + width_s / 2
        tps = part.get_column("output_tps").to_numpy().astype(np.float64)
        # Break the line across empty bins (idle gaps between levels) instead of
        # drawing a slope through time nothing was measured in.
        gap = np.diff(t, prepend=t[0]) > width_s * 1.5
        t_line = np.insert(t, np.flatnonzero(gap), np.nan)
        y_line = np.insert(tps, np.flatnonzero(gap), np.nan)
        ax.plot(
            t_line,
            y_line,
            marker=style.marker,
            ls=style.linestyle,
            ms=3,
            color=style.color,
            label=label,
            lw=1.4,
        )
        err = part.get_column("errors").to_numpy().astype(np.float64)
        if ax2 is not None and err.any():
            base = np.array([bottoms.get(float(v), 0.0) for v in t])
            ax2.bar(t, err, width=width_s * 0.9, bottom=base, color=style.color, label=label)
            for v, e in zip(t, err, strict=True):
                bottoms[float(v)] = bottoms.get(float(v), 0.0) + float(e)
    ax.set_ylabel("output tokens/s")
    ax.set_title(f"Throughput over the run ({width_s:g} s bins, by token arrival time)")
    legend = legend_outside(ax)
    if ax2 is None:
        ax.set_xlabel("time since the run's first request (s)")
        fit_figure_to_legends(fig, beside=[legend])
        return fig
    ax2.set_ylabel("failed requests per bin")
    ax2.set_xlabel("time since the run's first request (s)")
    ax2.set_ylim(bottom=0)
    ax2.sharex(ax)
    fit_figure_to_legends(fig, beside=[legend, legend_outside(ax2)])
    return fig


@house_style
def cost_vs_speed(groups: pl.DataFrame) -> Figure:
    """USD per 1,000 requests (y, log) vs per-stream decode tok/s (x), one point
    per (target, level) with a known cost; labelled with model and level where no
    label overlaps another text or point."""
    fig, (ax,) = new_figure(8, 5)
    labels = _labels(groups)
    styles = series_styles(groups)
    points: list[Label] = []
    for row in groups.iter_rows(named=True):
        label = labels[(row["series"], row["model"])]
        level = (
            f"c={row['concurrency']}"
            if row["concurrency"] is not None
            else f"{row['rate_rps']:g}/s"
        )
        marker = "o" if row["cost_source"] == "price" else "^"
        color = styles[(row["series"], row["model"])].color
        ax.plot(row["decode_p50"], row["usd_per_1k"], marker, color=color, ms=7)
        points.append(Label(row["decode_p50"], row["usd_per_1k"], f"{label} {level}", color))
    ax.set_xscale("log")
    ax.set_yscale("log")
    _pad_log_limits(ax, 1.6)
    plain_log_axes(ax)
    ax.set_xlabel("per-stream decode speed, median (tokens/s, log scale)")
    ax.set_ylabel("USD per 1,000 requests (log)")
    ax.set_title("Cost vs speed (● token prices on the run's mix, ▲ GPU-hours)")
    label_panels(fig, [(ax, points, 8.0)])
    return fig
