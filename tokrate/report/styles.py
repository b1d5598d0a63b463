"""How series are told apart in every chart: one colour per model (distinct however
many models), one marker and line style per series (a run, or an endpoint of one run),
legends outside the data.

A report assigns its models' colours once (:func:`model_colors`, in the report model,
models by size) and draws every chart inside :func:`colors_in_use`, so a model has
the same colour in every chart of the report, whichever subset of models a chart
shows. Outside a report (a chart drawn alone) colours follow the names drawn.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Final

import matplotlib
import matplotlib.colors
import polars as pl
from matplotlib.axes import Axes
from matplotlib.legend import Legend

from tokrate.analysis.ordering import natural_key
from tokrate.report.figures import legend_columns

__all__ = [
    "Style",
    "colors_in_use",
    "distinct_colors",
    "legend_outside",
    "model_colors",
    "report_order",
    "series_colors",
    "series_styles",
]

_PALETTE: Final = (
    "#1f77b4",
    "#d62728",
    "#2ca02c",
    "#9467bd",
    "#ff7f0e",
    "#17becf",
    "#8c564b",
    "#e377c2",
    "#7f7f7f",
    "#bcbd22",
)


#: The colours of the report being drawn (model -> colour), set by colors_in_use.
_ASSIGNED: ContextVar[Mapping[str, str] | None] = ContextVar("model_colors", default=None)
#: Up to this many colours a chart tells series apart by colour alone; past it (the
#: palette is spent, neighbouring hues look alike) markers and line styles vary too.
COLORS_ALONE: Final = len(_PALETTE)


def model_colors(models: Sequence[str]) -> dict[str, str]:
    """One distinct colour per model, in the order given (the report's: by size where
    sizes are known): the palette, then evenly spaced hues past its 10 colours."""
    ordered = list(dict.fromkeys(models))
    return dict(zip(ordered, distinct_colors(len(ordered)), strict=True))


@contextmanager
def colors_in_use(colors: Mapping[str, str]) -> Iterator[None]:
    """Draw with a report's model colours: inside, :func:`series_colors` and
    :func:`series_styles` give every model named in ``colors`` its colour."""
    token = _ASSIGNED.set(colors)
    try:
        yield
    finally:
        _ASSIGNED.reset(token)


def series_colors(names: Sequence[str]) -> dict[str, str]:
    """A distinct, stable colour per name: the report's colour of each model when
    every name is one of its models (:func:`colors_in_use`); otherwise in natural
    order (sim-1b, sim-7b, sim-13b), the palette, then evenly spaced hues when there
    are more names than it has colours (never two names in one colour)."""
    assigned = _ASSIGNED.get()
    if assigned and all(n in assigned for n in names):
        return {n: assigned[n] for n in names}
    ordered = sorted(set(names), key=natural_key)
    colors = distinct_colors(len(ordered))
    return {n: colors[i] for i, n in enumerate(ordered)}


def report_order(names: Sequence[str]) -> list[str]:
    """``names`` without repeats in the report's model order (its colours' order: by
    size where sizes are known) when every name is one of its models
    (:func:`colors_in_use`), else in natural order: the order every legend lists
    models in."""
    assigned = _ASSIGNED.get()
    unique = list(dict.fromkeys(names))
    if assigned and all(n in assigned for n in unique):
        rank = {m: i for i, m in enumerate(assigned)}
        return sorted(unique, key=rank.__getitem__)
    return sorted(unique, key=natural_key)


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
    same model read as the same model, told apart by their markers. Past
    :data:`COLORS_ALONE` models the marker and line style follow the model as well
    (colours alone no longer tell that many apart)."""
    pairs = frame.select("series", "model").unique(maintain_order=True).rows()
    models = list(dict.fromkeys(str(m) for _, m in pairs))
    colors = series_colors(models)
    series = list(dict.fromkeys(str(s) for s, _ in pairs))
    by_model = len(models) > COLORS_ALONE

    def index(s: str, m: str) -> int:
        return series.index(s) + (models.index(m) if by_model else 0)

    return {
        (str(s), str(m)): Style(
            colors[str(m)],
            _MARKERS[index(str(s), str(m)) % len(_MARKERS)],
            _LINESTYLES[index(str(s), str(m)) // len(_MARKERS) % len(_LINESTYLES)]
            if by_model
            else _LINESTYLES[series.index(str(s)) % len(_LINESTYLES)],
        )
        for s, m in pairs
    }


def legend_outside(ax: Axes) -> Legend | None:
    """The legend right of the plot, never over the data (a long one in columns; the
    chart grows to hold it: :func:`tokrate.report.figures.fit_figure_to_legends`), or
    None where nothing is labelled."""
    handles, _ = ax.get_legend_handles_labels()
    if not handles:
        return None
    return ax.legend(
        frameon=False,
        loc="upper left",
        bbox_to_anchor=(1.01, 1.0),
        borderaxespad=0,
        ncols=legend_columns(len(handles)),
    )
