"""How series are told apart in every chart: one colour per model (distinct however
many models), one marker and line style per series (a run, or an endpoint of one run),
legends outside the data."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

import matplotlib
import matplotlib.colors
import polars as pl
from matplotlib.axes import Axes

from tokrate.analysis.ordering import natural_key

__all__ = ["Style", "distinct_colors", "legend_outside", "series_colors", "series_styles"]

_PALETTE: Final = (
    "#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e",
    "#17becf", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22",
)  # fmt: skip


def series_colors(names: Sequence[str]) -> dict[str, str]:
    """A distinct, stable colour per name (in natural order: sim-1b, sim-7b, sim-13b):
    the palette, then evenly spaced hues when there are more names than it has colours
    (never two names in one colour)."""
    ordered = sorted(set(names), key=natural_key)
    colors = distinct_colors(len(ordered))
    return {n: colors[i] for i, n in enumerate(ordered)}


def distinct_colors(n: int) -> list[str]:
    if n <= len(_PALETTE):
        return list(_PALETTE[:n])
    cmap = matplotlib.colormaps["turbo"]
    return [matplotlib.colors.to_hex(cmap(0.05 + 0.9 * i / max(1, n - 1))) for i in range(n)]


@dataclass(frozen=True, slots=True)
class Style:
    """How one (series, model) is drawn: the colour names the model, the marker and line
    style name the series (a run, or an endpoint of one run)."""

    color: str
    marker: str
    linestyle: str


_MARKERS: Final = ("o", "s", "^", "D", "v", "P", "X", "*")
_LINESTYLES: Final = ("-", "--", ":", "-.")


def series_styles(frame: pl.DataFrame) -> dict[tuple[str, str], Style]:
    """One colour per model and one marker / line style per series, so two runs of the
    same model read as the same model, told apart by their markers."""
    pairs = frame.select("series", "model").unique(maintain_order=True).rows()
    colors = series_colors([str(m) for _, m in pairs])
    series = list(dict.fromkeys(str(s) for s, _ in pairs))
    return {
        (str(s), str(m)): Style(
            colors[str(m)],
            _MARKERS[series.index(str(s)) % len(_MARKERS)],
            _LINESTYLES[series.index(str(s)) % len(_LINESTYLES)],
        )
        for s, m in pairs
    }


def legend_outside(ax: Axes) -> None:
    """The legend right of the plot, never over the data."""
    if ax.get_legend_handles_labels()[0]:
        ax.legend(frameon=False, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
