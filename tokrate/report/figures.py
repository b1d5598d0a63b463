"""What every chart of the report is drawn with: the house style, a figure without
pyplot, and readable log axes.

Every chart module builds its figure through these, so all charts share one look and
one set of rules: no global matplotlib state (an Agg canvas per figure, drawable from
any thread), text that stays text in SVG, and log axes labelled with plain numbers.
"""

from __future__ import annotations

import contextlib
import functools
import math
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Final, ParamSpec

import matplotlib
from matplotlib.axes import Axes
from matplotlib.axis import Axis
from matplotlib.backend_bases import RendererBase
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.legend import Legend
from matplotlib.ticker import (
    FixedLocator,
    FuncFormatter,
    LogLocator,
    MaxNLocator,
    NullFormatter,
)

__all__ = [
    "HOUSE_RC",
    "LEGEND_ROWS",
    "fit_figure_to_legends",
    "freeze_layout",
    "house_style",
    "legend_columns",
    "new_figure",
    "plain_log_axes",
    "plain_number",
    "readable_log_axis",
    "readable_log_ticks",
    "solve_layout",
]

P = ParamSpec("P")

#: matplotlib settings every chart is drawn under.
HOUSE_RC: Final[dict[str, Any]] = {
    "font.size": 10,
    "axes.titlesize": 12,
    "axes.labelsize": 10,
    "legend.fontsize": 8,
    "xtick.labelsize": 9,
    "ytick.labelsize": 9,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "svg.fonttype": "none",  # text stays text in SVG: searchable, small
    "pdf.fonttype": 42,  # TrueType (Type 42) fonts in PDF: editable, what journals ask for
    "svg.hashsalt": "tokrate",  # deterministic SVG ids
}


def house_style(func: Callable[P, Figure]) -> Callable[P, Figure]:
    """Build the whole chart under :data:`HOUSE_RC` (fonts, grid), leaving global
    matplotlib settings untouched afterwards. The file writers read some of these
    (``svg.fonttype``, ``pdf.fonttype``) when they save, not when the chart is
    drawn: saving goes under :data:`HOUSE_RC` too (tokrate.report.drawing)."""

    @functools.wraps(func)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> Figure:
        with matplotlib.rc_context(HOUSE_RC):  # type: ignore[arg-type]
            return func(*args, **kwargs)

    return wrapper


def new_figure(
    width: float,
    height: float,
    ncols: int = 1,
    nrows: int = 1,
    *,
    width_ratios: Sequence[float] | None = None,
) -> tuple[Figure, list[Axes]]:
    """A constrained-layout figure (inches, 110 dpi) on its own Agg canvas, and its
    axes in reading order (rows, then columns); ``width_ratios`` share the width
    between columns (the headline panel gets most of it)."""
    fig = Figure(figsize=(width, height), dpi=110, layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(nrows, ncols, squeeze=False, width_ratios=width_ratios)
    return fig, [ax for row in axes for ax in row]


def solve_layout(fig: Figure) -> RendererBase:
    """Solve ``fig``'s layout engine as a draw does first (the axes to their final
    place), without drawing the figure; returns the renderer it measured with, for
    measuring in pixels (an Agg canvas's, set where the figure has none). A figure too
    small for its layout keeps it unsolved, as a draw does (matplotlib raises
    ValueError and the draw goes on)."""
    canvas = fig.canvas if isinstance(fig.canvas, FigureCanvasAgg) else FigureCanvasAgg(fig)
    renderer = canvas.get_renderer()  # type: ignore[no-untyped-call]
    assert isinstance(renderer, RendererBase)
    engine = fig.get_layout_engine()
    if fig.axes and engine is not None:
        with contextlib.suppress(ValueError):
            engine.execute(fig)
    return renderer


def freeze_layout(fig: Figure) -> None:
    """Solve ``fig``'s layout once and drop its layout engine, so that each savefig
    draws the figure once: savefig dry-draws a figure that has any layout engine,
    even a frozen one (``"none"``), before drawing it for real."""
    solve_layout(fig)
    # None means "the rc's automatic layout" to matplotlib: a user's matplotlibrc may
    # set one.
    with matplotlib.rc_context(_NO_AUTOMATIC_LAYOUT):  # type: ignore[arg-type]
        fig.set_layout_engine(None)


#: The rc settings under which a figure's layout engine can be set to None.
_NO_AUTOMATIC_LAYOUT: Final[dict[str, Any]] = {
    "figure.autolayout": False,
    "figure.constrained_layout.use": False,
}


#: Rows a legend column holds before the legend takes another column: about what fits
#: beside a chart of the usual height at the house legend font size.
LEGEND_ROWS: Final = 24

#: The share of its planned width (legend beside) or height (legend below) a figure
#: keeps for its plots when a long legend makes it grow.
_PLOT_SHARE: Final = 0.8

#: Inches around a legend (its padding, and the gap to the plots).
_LEGEND_MARGIN_IN: Final = 0.4


def legend_columns(entries: int, rows: int = LEGEND_ROWS) -> int:
    """Columns for a legend of ``entries`` entries with at most ``rows`` a column."""
    return max(1, math.ceil(entries / rows))


def fit_figure_to_legends(
    fig: Figure, *, beside: Iterable[Legend | None] = (), below: Iterable[Legend | None] = ()
) -> None:
    """Grow ``fig`` until its legends fit beside (right of) or below its plots with the
    plots still at a readable size; a figure whose legends already fit keeps its size.

    A run of tens of models gives a legend taller than the chart: constrained layout
    then collapses the plots to nothing and gives up (it warns, and a report drawn with
    warnings as errors leaves the chart out). Legends beside the plots stack (one per
    row of axes), so their heights add up."""
    canvas = fig.canvas if isinstance(fig.canvas, FigureCanvasAgg) else FigureCanvasAgg(fig)
    renderer = canvas.get_renderer()  # type: ignore[no-untyped-call]
    width, height = (float(v) for v in fig.get_size_inches())

    def inches(legends: Iterable[Legend | None]) -> list[tuple[float, float]]:
        boxes = [leg.get_window_extent(renderer) for leg in legends if leg is not None]
        return [(b.width / fig.dpi, b.height / fig.dpi) for b in boxes]

    need_width, need_height = width, height
    if side := inches(beside):
        stacked = sum(h + _LEGEND_MARGIN_IN for _, h in side)
        need_height = max(need_height, stacked)
        need_width = max(need_width, max(w for w, _ in side) + _PLOT_SHARE * width)
    if under := inches(below):
        need_height = max(need_height, sum(h for _, h in under) + _PLOT_SHARE * height)
        need_width = max(need_width, max(w for w, _ in under) + _LEGEND_MARGIN_IN)
    if (need_width, need_height) != (width, height):
        fig.set_size_inches(need_width, need_height)


def plain_number(value: float, _pos: object = None) -> str:
    """A tick label without powers of ten: 0.01, 0.5, 100, 2000."""
    return f"{value:g}"


def readable_log_ticks(lo: float, hi: float, want: int = 3) -> list[float]:
    """Tick values for a log axis from ``lo`` to ``hi`` that give a reader at least
    ``want`` labelled values where the range allows: powers of ten when there are
    enough of them, else 1-2-5 steps (60–820 tok/s: 100, 200, 500), else, inside a
    fraction of a decade, evenly spaced round numbers (0.9–1.5: 1, 1.2, 1.4)."""
    if not (lo > 0 and hi > lo and math.isfinite(hi)):
        return []
    first, last = math.floor(math.log10(lo)), math.ceil(math.log10(hi))
    for subs in ((1.0,), (1.0, 2.0, 5.0)):
        ticks = [
            float(f"{m * 10.0**d:.12g}")
            for d in range(first, last + 1)
            for m in subs
            if lo <= m * 10.0**d <= hi
        ]
        if len(ticks) >= want:
            return ticks
    for bins in range(want, 4 * want):
        values = MaxNLocator(nbins=bins, steps=[1, 2, 2.5, 5, 10]).tick_values(lo, hi)
        ticks = [float(f"{v:.12g}") for v in values if lo <= v <= hi]
        if len(ticks) >= want:
            break
    return ticks


def readable_log_axis(
    axis: Axis, fmt: Callable[[float, object], str] = plain_number, want: int = 3
) -> None:
    """Label a log axis at :func:`readable_log_ticks` of its current limits (call it
    once the limits are final), minor ticks unlabelled."""
    lo, hi = sorted(axis.get_view_interval())
    ticks = readable_log_ticks(float(lo), float(hi), want)
    if not ticks:
        return
    axis.set_major_locator(FixedLocator(ticks))
    axis.set_major_formatter(FuncFormatter(fmt))
    axis.set_minor_locator(LogLocator(base=10.0, subs="auto"))
    axis.set_minor_formatter(NullFormatter())


def plain_log_axes(ax: Axes, *, x: bool = True, y: bool = True) -> None:
    """Log axes labelled with plain numbers (0.01, 0.2, 500 instead of 10^k) at
    enough values to read one off (:func:`readable_log_ticks`). Call it once the
    limits are final."""
    for on, axis in ((x, ax.xaxis), (y, ax.yaxis)):
        if on:
            readable_log_axis(axis)
