"""What a drawn chart shows per model, read back from the figure itself.

The report assigns one colour per model (:func:`tokrate.report.styles.model_colors`)
and every chart is drawn with it; this module reads the finished figure — the same
object the PNG, SVG and PDF files are saved from — to say which colour each model
really carries in it and what its legends list, so the page can expose both and a test
can hold every chart to the report's assignment without trusting the drawing code.

A model is "shown" by a legend entry (of an axes or of the figure) whose text names it,
or by a text (an annotation, a tick label) drawn in a colour of its own that names it;
text in a neutral colour (black, greys) names a model without colouring it. A name is
matched as a whole word: ``sim-1b`` in "sim-1b c=8", "sim-1b · night-a" or
"sim/sim-1b c=4", never in "sim-1b-instruct".
"""

from __future__ import annotations

import colorsys
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import matplotlib.colors
from matplotlib.artist import Artist
from matplotlib.figure import Figure
from matplotlib.legend import Legend
from matplotlib.text import Text

__all__ = ["DrawnKey", "read_drawn"]

#: Below this HSV saturation a colour is neutral (black, white, greys): a text in it
#: names a model without claiming a colour for it.
_NEUTRAL_SATURATION = 0.15


@dataclass(frozen=True, slots=True)
class DrawnKey:
    """What one drawn chart shows: each model's colours in it (sorted; one when the
    chart keeps to the report's assignment) and its legends' entries, in order."""

    colors: dict[str, tuple[str, ...]]
    legend: tuple[str, ...]


def read_drawn(fig: Figure, models: Iterable[str]) -> DrawnKey:
    """The colours each of ``models`` is drawn in in ``fig`` (legend entries and
    coloured texts naming it) and the texts of every legend of ``fig``."""
    names = _Names(models)
    seen: dict[str, set[str]] = {}
    legend: list[str] = []
    for leg in _legends(fig):
        for handle, text in zip(leg.legend_handles, leg.get_texts(), strict=False):
            label = text.get_text()
            legend.append(label)
            color = None if handle is None else _artist_color(handle)
            model = names.named(label)
            if model is not None and color is not None:
                seen.setdefault(model, set()).add(color)
    for text in _texts(fig):
        model = names.named(text.get_text())
        color = _hex(text.get_color())
        if model is not None and color is not None and not _neutral(color):
            seen.setdefault(model, set()).add(color)
    ordered = {m: tuple(sorted(seen[m])) for m in names.models if m in seen}
    return DrawnKey(ordered, tuple(legend))


class _Names:
    """Finds which model a text names (the longest name that appears as a word)."""

    def __init__(self, models: Iterable[str]) -> None:
        self.models = tuple(dict.fromkeys(models))
        longest_first = sorted(self.models, key=len, reverse=True)
        self._patterns = [
            (m, re.compile(rf"(?<![\w.\-]){re.escape(m)}(?![\w.\-])")) for m in longest_first
        ]

    def named(self, text: str) -> str | None:
        return next((m for m, p in self._patterns if p.search(text)), None)


def _legends(fig: Figure) -> Iterator[Legend]:
    yield from fig.legends
    for ax in fig.axes:
        leg = ax.get_legend()
        if leg is not None:
            yield leg


def _texts(fig: Figure) -> Iterator[Text]:
    yield from fig.texts
    for ax in fig.axes:
        yield from ax.texts
        yield from ax.get_xticklabels()
        yield from ax.get_yticklabels()


def _artist_color(artist: Artist) -> str | None:
    """The colour a legend handle shows: a line's colour, else a patch's or a
    collection's face (its edge where the face is empty)."""
    getter: Any = getattr(artist, "get_color", None)
    if getter is not None and not hasattr(artist, "get_facecolor"):
        return _hex(getter())
    for name in ("get_facecolor", "get_edgecolor"):
        get: Any = getattr(artist, name, None)
        if get is None:
            continue
        color = _first_visible(get())
        if color is not None:
            return color
    return _hex(getter()) if getter is not None else None


def _first_visible(value: Any) -> str | None:
    """The first colour of ``value`` (one colour or an array of RGBA rows) that is not
    fully transparent."""
    try:
        rgba = matplotlib.colors.to_rgba_array(value)
    except (TypeError, ValueError):
        return None
    for row in rgba:
        if float(row[3]) > 0:
            return matplotlib.colors.to_hex((float(row[0]), float(row[1]), float(row[2])))
    return None


def _hex(value: Any) -> str | None:
    try:
        return matplotlib.colors.to_hex(value, keep_alpha=False)
    except (TypeError, ValueError):
        return _first_visible(value)


def _neutral(color: str) -> bool:
    r, g, b = matplotlib.colors.to_rgb(color)
    return colorsys.rgb_to_hsv(r, g, b)[1] < _NEUTRAL_SATURATION
