"""Point labels that never overlap: each other, any other text, the data lines, or
the points they do not name.

Placement is deterministic and greedy, in display (pixel) coordinates after the
figure's layout is solved: labels are placed in order of their point (x, then y,
then text); each tries positions on rings around its point (right, above, below,
left, diagonals; nearer rings first) and takes the first whose box stays inside the
axes and touches no placed label, no other text, no line of the axes (fits, bounds,
curves, error bars) and no other point's marker. Beyond the nearest rings a thin
leader line ties the label to its point. A label that fits nowhere is not drawn and
is returned, so the chart can say so instead of printing it over something.
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final, Literal

import numpy as np
from matplotlib.axes import Axes
from matplotlib.backend_bases import RendererBase
from matplotlib.collections import LineCollection
from matplotlib.figure import Figure
from matplotlib.path import Path
from matplotlib.text import Annotation, Text
from matplotlib.transforms import Bbox

__all__ = ["Label", "label_panels", "place_labels"]

HAlign = Literal["left", "center", "right"]
VAlign = Literal["bottom", "center", "top"]

#: Ring radii (points) tried around a point, nearest first.
_RINGS: Final = (5.0, 9.0, 14.0, 20.0, 28.0, 38.0, 50.0, 64.0, 80.0, 100.0)
#: Directions tried on each ring, in order (right first: reading order).
_DIRECTIONS: Final = (
    (1.0, 0.0),
    (0.7, 0.7),
    (0.7, -0.7),
    (0.0, 1.0),
    (0.0, -1.0),
    (-0.7, 0.7),
    (-0.7, -0.7),
    (-1.0, 0.0),
)
#: From this ring on a leader line ties the label to its point.
_LEADER_FROM: Final = 14.0
#: Half the side of the box a point's marker is kept clear within (pixels).
_MARKER_PX: Final = 4.5
#: Pixels of clear space kept around every label.
_PAD_PX: Final = 3.0


@dataclass(frozen=True, slots=True)
class Label:
    """A text to print next to the data point (x, y), in data coordinates."""

    x: float
    y: float
    text: str
    color: str = "0.2"


def _renderer(fig: Figure) -> RendererBase:
    fig.draw_without_rendering()
    renderer = fig.canvas.get_renderer()  # type: ignore[attr-defined]
    assert isinstance(renderer, RendererBase)
    return renderer


def _line_paths(ax: Axes) -> list[Path]:
    """Every drawn line of ``ax`` as a display-space path (markers-only lines, which
    have no segments, are covered by the marker boxes instead)."""
    paths: list[Path] = []
    for line in ax.lines:
        if not line.get_visible() or line.get_linestyle() in ("None", "none", " ", ""):
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


def _marker_boxes(ax: Axes) -> list[tuple[tuple[float, float], Bbox]]:
    """A small box around every data point drawn with a marker, keyed by its
    display position (so a label can skip its own point's box)."""
    boxes = []
    for line in ax.lines:
        if not line.get_visible() or line.get_marker() in (None, "None", "none", "", " "):
            continue
        xy = np.column_stack(line.get_data(orig=False)).astype(float)
        xy = xy[np.isfinite(xy).all(axis=1)]
        for px, py in ax.transData.transform(xy) if len(xy) else ():
            box = Bbox.from_extents(
                px - _MARKER_PX, py - _MARKER_PX, px + _MARKER_PX, py + _MARKER_PX
            )
            boxes.append(((float(px), float(py)), box))
    return boxes


def _other_texts(ax: Axes, renderer: RendererBase) -> list[Bbox]:
    """Boxes of the texts already on the axes (annotations drawn before)."""
    return [
        t.get_window_extent(renderer) for t in ax.texts if t.get_visible() and t.get_text().strip()
    ]


@dataclass(frozen=True, slots=True)
class _Spot:
    offset: tuple[float, float]
    ha: HAlign
    va: VAlign
    box: Bbox
    leader: bool


def place_labels(ax: Axes, labels: Sequence[Label], *, fontsize: float = 8.0) -> list[Label]:
    """Annotate ``labels`` on ``ax`` without any overlap; returns the labels that
    found no free place (not drawn). Call it after everything else is drawn on the
    figure (and its limits are final): it solves the layout to measure pixels, and
    its labels are kept out of the layout so they do not move it."""
    fig = ax.get_figure()
    assert isinstance(fig, Figure)
    renderer = _renderer(fig)
    lines = _line_paths(ax)
    markers = _marker_boxes(ax)
    taken = _other_texts(ax, renderer)
    left_out: list[Label] = []
    for label in sorted(labels, key=lambda lb: (lb.x, lb.y, lb.text)):
        probe = ax.annotate(
            label.text,
            (label.x, label.y),
            xytext=(0, 0),
            textcoords="offset points",
            fontsize=fontsize,
            annotation_clip=False,
        )
        spot = _first_free(probe, renderer, ax, lines, markers, taken)
        probe.remove()
        if spot is None:
            left_out.append(label)
            continue
        arrow = (
            {"arrowstyle": "-", "lw": 0.6, "color": "0.55", "shrinkA": 0, "shrinkB": 3}
            if spot.leader
            else None
        )
        ann = ax.annotate(
            label.text,
            (label.x, label.y),
            xytext=spot.offset,
            textcoords="offset points",
            fontsize=fontsize,
            color=label.color,
            ha=spot.ha,
            va=spot.va,
            annotation_clip=False,
            arrowprops=arrow,
        )
        ann.set_in_layout(False)
        taken.append(spot.box)
    return left_out


#: Label placements tried before the layout is kept as it is.
_LABEL_PASSES = 4


def label_panels(fig: Figure, panels: Sequence[tuple[Axes, Sequence[Label], float]]) -> None:
    """Place each panel's point labels (``(axes, labels, fontsize)``) and name, in the
    panel's title, the points that found no room (rather than print them over
    something).

    A longer title shrinks the panels (constrained layout), which moves every point
    under labels already placed; so the titles are set first, the layout solved and
    then frozen, and the labels placed on it, again until the names in the titles are
    the labels left out. Names only grow (a smaller panel holds fewer labels), so this
    settles in a pass or two; the last pass keeps the layout and sets the titles."""
    titles = {ax: ax.get_title() for ax, _, _ in panels}
    named: dict[Axes, list[str]] = {ax: [] for ax, _, _ in panels}
    for attempt in range(_LABEL_PASSES):
        for ax, _, _ in panels:
            _title_naming(ax, titles[ax], named[ax])
        fig.set_layout_engine("constrained")
        fig.draw_without_rendering()
        fig.set_layout_engine("none")
        left_out: dict[Axes, list[str]] = {}
        placed: list[Text] = []
        for ax, labels, fontsize in panels:
            before = set(map(id, ax.texts))
            unplaced = place_labels(ax, labels, fontsize=fontsize)
            placed += [t for t in ax.texts if id(t) not in before]
            left_out[ax] = list(dict.fromkeys(lb.text.split(" (")[0] for lb in unplaced))
        if left_out == named or attempt == _LABEL_PASSES - 1:
            for ax, _, _ in panels:
                _title_naming(ax, titles[ax], left_out[ax])
            return
        for text in placed:
            text.remove()
        named = {ax: list(dict.fromkeys([*named[ax], *left_out[ax]])) for ax in named}


def _title_naming(ax: Axes, title: str, names: Sequence[str]) -> None:
    """``title``, followed by the points left unlabelled, wrapped to the panel (a
    title character is about 0.6 of its font size wide)."""
    if not names:
        ax.set_title(title)
        return
    size_px = float(ax.title.get_fontsize()) * ax.figure.dpi / 72.0
    width = max(20, int(ax.bbox.width / (0.6 * size_px)))
    ax.set_title(textwrap.fill(f"{title} (not labelled, no room: {', '.join(names)})", width=width))


def _first_free(
    probe: Annotation,
    renderer: RendererBase,
    ax: Axes,
    lines: Sequence[Path],
    markers: Sequence[tuple[tuple[float, float], Bbox]],
    taken: Sequence[Bbox],
) -> _Spot | None:
    """The first position around the probe's point where its box is clear."""
    px, py = ax.transData.transform(probe.xy)
    for radius in _RINGS:
        for dx, dy in _DIRECTIONS:
            offset = (dx * radius, dy * radius)
            ha: HAlign = "left" if dx > 0 else "right" if dx < 0 else "center"
            va: VAlign = "bottom" if dy > 0 else "top" if dy < 0 else "center"
            probe.set_position(offset)
            probe.set_horizontalalignment(ha)
            probe.set_verticalalignment(va)
            box = probe.get_window_extent(renderer).padded(_PAD_PX)
            if not _inside(box, ax.bbox) or any(box.overlaps(t) for t in taken):
                continue
            if any(box.overlaps(m) for (mx, my), m in markers if abs(mx - px) + abs(my - py) > 0.5):
                continue
            if any(p.intersects_bbox(box, filled=False) for p in lines):
                continue
            leader = radius >= _LEADER_FROM
            if leader:
                # The leader line, from the point to the label, crosses no other label.
                segment = Path([(px, py), ((box.x0 + box.x1) / 2, (box.y0 + box.y1) / 2)])
                if any(segment.intersects_bbox(t, filled=False) for t in taken):
                    continue
            return _Spot(offset, ha, va, box, leader)
    return None


def _inside(box: Bbox, area: Bbox) -> bool:
    return bool(box.x0 >= area.x0 and box.x1 <= area.x1 and box.y0 >= area.y0 and box.y1 <= area.y1)
