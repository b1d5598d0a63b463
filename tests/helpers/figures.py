"""Checks on rendered matplotlib figures: what a reader of the PNG would see.

``layout_problems(fig)`` draws the figure (without rendering pixels) and returns one line per problem:

- two texts (titles, axis labels, tick labels, legend entries, point labels) whose
  boxes on the canvas intersect;
- a text that reaches outside the figure (it would be cut off);
- a point label (an annotation) crossing a data line (a curve, fit, bound or error
  bar) of its axes;
- a log axis with fewer than ``min_ticks`` labelled values in view.

Only ticks the axis actually draws count (matplotlib keeps labels for ticks outside
the view, which are never drawn).
"""

from __future__ import annotations

from itertools import combinations
from typing import Any

import numpy as np
from matplotlib.axes import Axes
from matplotlib.axis import Axis
from matplotlib.collections import LineCollection
from matplotlib.figure import Figure
from matplotlib.path import Path
from matplotlib.text import Annotation, Text
from matplotlib.transforms import Bbox

__all__ = ["drawn_tick_labels", "layout_problems", "text_boxes"]

#: Overlaps of less than this many pixels (anti-aliasing, touching edges) are not
#: a reader's problem.
_SLACK_PX = 0.5


def drawn_tick_labels(axis: Axis) -> list[Text]:
    """The tick labels ``axis`` draws: ticks inside its view, labels with text."""
    ticks = axis._update_ticks()
    labels = []
    for tick in ticks:
        for label in (tick.label1, tick.label2):
            if label.get_visible() and label.get_text().strip():
                labels.append(label)
    return labels


def _tick_label_ids(fig: Figure) -> tuple[set[int], list[Text]]:
    every: set[int] = set()
    drawn: list[Text] = []
    for ax in fig.axes:
        for axis in (ax.xaxis, ax.yaxis):
            for tick in [*axis.get_major_ticks(), *axis.get_minor_ticks()]:
                every |= {id(tick.label1), id(tick.label2)}
            drawn += drawn_tick_labels(axis)
    return every, drawn


def text_boxes(fig: Figure) -> list[tuple[Text, Bbox]]:
    """Every visible, non-empty text the figure draws, with its box in pixels (after
    a draw without rendering: every text placed, its layout solved, no pixels)."""
    fig.draw_without_rendering()
    renderer = fig.canvas.get_renderer()  # type: ignore[attr-defined]
    tick_ids, ticks = _tick_label_ids(fig)
    out: list[tuple[Text, Bbox]] = []
    for text in fig.findobj(Text):
        if id(text) in tick_ids or not text.get_visible() or not text.get_text().strip():
            continue
        assert isinstance(text, Text)
        out.append((text, _extent(text, renderer)))
    out += [(t, _extent(t, renderer)) for t in ticks]
    return out


def _extent(text: Text, renderer: Any) -> Bbox:
    """The box of the text itself (an annotation's own extent includes its leader
    line, which is not text)."""
    return Text.get_window_extent(text, renderer)


def _overlap(a: Bbox, b: Bbox) -> bool:
    width = min(a.x1, b.x1) - max(a.x0, b.x0)
    height = min(a.y1, b.y1) - max(a.y0, b.y0)
    return width > _SLACK_PX and height > _SLACK_PX


def _data_lines(ax: Axes) -> list[Path]:
    paths = []
    for line in ax.lines:
        if not line.get_visible() or line.get_linestyle() in ("None", "none", "", " "):
            continue
        xy = np.column_stack(line.get_data(orig=False)).astype(float)
        xy = xy[np.isfinite(xy).all(axis=1)]
        if len(xy) >= 2:
            paths.append(Path(ax.transData.transform(xy)))
    for coll in ax.collections:
        if isinstance(coll, LineCollection) and coll.get_visible():
            for seg in coll.get_segments():
                seg = np.asarray(seg, dtype=float)
                seg = seg[np.isfinite(seg).all(axis=1)]
                if len(seg) >= 2:
                    paths.append(Path(ax.transData.transform(seg)))
    return paths


def _name(text: Text) -> str:
    return repr(text.get_text()[:40])


def layout_problems(fig: Figure, *, min_ticks: int = 3) -> list[str]:
    """Everything a reader would see as broken on ``fig``, one line each."""
    boxes = text_boxes(fig)
    problems = []
    for (ta, a), (tb, b) in combinations(boxes, 2):
        if _overlap(a, b):
            problems.append(f"text {_name(ta)} overlaps {_name(tb)}")
    frame = fig.bbox
    for text, box in boxes:
        if (
            box.x0 < frame.x0 - 1
            or box.x1 > frame.x1 + 1
            or box.y0 < frame.y0 - 1
            or box.y1 > frame.y1 + 1
        ):
            problems.append(f"text {_name(text)} is cut off at the figure's edge")
    renderer = fig.canvas.get_renderer()  # type: ignore[attr-defined]
    for ax in fig.axes:
        lines = _data_lines(ax)
        for ann in ax.texts:
            if not isinstance(ann, Annotation) or not ann.get_visible():
                continue
            box = _extent(ann, renderer)
            if any(p.intersects_bbox(box, filled=False) for p in lines):
                problems.append(f"label {_name(ann)} crosses a data line")
        for axis, name in ((ax.xaxis, "x"), (ax.yaxis, "y")):
            if axis.get_scale() != "log":
                continue
            shown = [t.get_text() for t in drawn_tick_labels(axis)]
            if len(shown) < min_ticks:
                problems.append(
                    f"log {name} axis of {ax.get_title()!r} labels only {shown} in view"
                )
    return problems
