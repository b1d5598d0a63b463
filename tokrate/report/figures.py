"""What every chart of the report is drawn with: the house style, a figure without
pyplot, and readable log axes.

Every chart module builds its figure through these, so all charts share one look and
one set of rules: no global matplotlib state (an Agg canvas per figure, drawable from
any thread), text that stays text in SVG, and log axes labelled with plain numbers.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any, Final, ParamSpec

import matplotlib
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, NullFormatter

__all__ = ["HOUSE_RC", "house_style", "new_figure", "plain_log_axes", "plain_number"]

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
    "svg.hashsalt": "tokrate",  # deterministic SVG ids
}


def house_style(func: Callable[P, Figure]) -> Callable[P, Figure]:
    """Build the whole chart under :data:`HOUSE_RC` (fonts, grid), leaving global
    matplotlib settings untouched afterwards."""

    @functools.wraps(func)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> Figure:
        with matplotlib.rc_context(HOUSE_RC):  # type: ignore[arg-type]
            return func(*args, **kwargs)

    return wrapper


def new_figure(
    width: float, height: float, ncols: int = 1, nrows: int = 1
) -> tuple[Figure, list[Axes]]:
    """A constrained-layout figure (inches, 110 dpi) on its own Agg canvas, and its
    axes in reading order (rows, then columns)."""
    fig = Figure(figsize=(width, height), dpi=110, layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(nrows, ncols, squeeze=False)
    return fig, [ax for row in axes for ax in row]


def plain_number(value: float, _pos: object = None) -> str:
    """A tick label without powers of ten: 0.01, 0.5, 100, 2000."""
    return f"{value:g}"


def plain_log_axes(ax: Axes, *, x: bool = True, y: bool = True) -> None:
    """Log axes labelled 0.01, 0.1, 1 ... instead of 10^k, without minor-tick labels —
    unless the axis spans less than a decade (one model, say): then no power of ten is
    in view and the minor ticks (2, 3, 5 ...) carry the labels, so the axis is never
    left without numbers."""
    for on, axis, limits in ((x, ax.xaxis, ax.get_xlim), (y, ax.yaxis, ax.get_ylim)):
        if not on:
            continue
        axis.set_major_formatter(FuncFormatter(plain_number))
        lo, hi = sorted(limits())
        within_decade = lo > 0 and math.floor(math.log10(lo)) == math.floor(math.log10(hi))
        axis.set_minor_formatter(FuncFormatter(plain_number) if within_decade else NullFormatter())
