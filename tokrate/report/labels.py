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
import numpy.typing as npt
from matplotlib.axes import Axes
from matplotlib.backend_bases import RendererBase
from matplotlib.collections import LineCollection
from matplotlib.figure import Figure
from matplotlib.path import Path
from matplotlib.text import Annotation, Text
from matplotlib.transforms import Bbox

from tokrate.report.figures import solve_layout

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
    return _place_labels(ax, labels, fontsize, solve_layout(fig))


def _place_labels(
    ax: Axes, labels: Sequence[Label], fontsize: float, renderer: RendererBase
) -> list[Label]:
    """place_labels on a figure whose layout ``renderer`` has just solved."""
    lines = _line_paths(ax)
    # The lines and markers do not move while labels are placed: their boxes are
    # measured once here, not once per label (a hundred targets: a tenth of the time).
    line_boxes = np.array([_path_extents(p) for p in lines]).reshape(-1, 4)
    markers = _marker_boxes(ax)
    marker_xy = np.array([xy for xy, _ in markers], dtype=float).reshape(-1, 2)
    marker_boxes = _extents([box for _, box in markers])
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
        spot = _first_free(
            probe, renderer, ax, (lines, line_boxes), (marker_xy, marker_boxes), taken
        )
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
        renderer = solve_layout(fig)
        # Frozen: the labels placed below cannot move the panels they are measured on.
        fig.set_layout_engine("none")
        left_out: dict[Axes, list[str]] = {}
        placed: list[Text] = []
        for ax, labels, fontsize in panels:
            before = set(map(id, ax.texts))
            unplaced = _place_labels(ax, labels, fontsize, renderer)
            placed += [t for t in ax.texts if id(t) not in before]
            left_out[ax] = list(dict.fromkeys(lb.text.split(" (")[0] for lb in unplaced))
        if left_out == named or attempt == _LABEL_PASSES - 1:
            for ax, _, _ in panels:
                _title_naming(ax, titles[ax], left_out[ax])
            return
        for text in placed:
            text.remove()
        named = {ax: list(dict.fromkeys([*named[ax], *left_out[ax]])) for ax in named}


#: Unlabelled points a panel's title names before it counts the rest: a title of a
#: hundred names would push the plot out of its figure (the tables name every model).
_NAMED_AT_MOST: Final = 8


def _title_naming(ax: Axes, title: str, names: Sequence[str]) -> None:
    """``title``, followed by the points left unlabelled (the first
    :data:`_NAMED_AT_MOST`, then how many more), wrapped to the panel (a title
    character is about 0.6 of its font size wide)."""
    if not names:
        ax.set_title(title)
        return
    size_px = float(ax.title.get_fontsize()) * ax.figure.dpi / 72.0
    width = max(20, int(ax.bbox.width / (0.6 * size_px)))
    named = ", ".join(names[:_NAMED_AT_MOST])
    if len(names) > _NAMED_AT_MOST:
        named += f" and {len(names) - _NAMED_AT_MOST} more"
    ax.set_title(textwrap.fill(f"{title} (not labelled, no room: {named})", width=width))


def _first_free(
    probe: Annotation,
    renderer: RendererBase,
    ax: Axes,
    lines: tuple[Sequence[Path], npt.NDArray[np.float64]],
    markers: tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]],
    taken: Sequence[Bbox],
) -> _Spot | None:
    """The first position around the probe's point where its box is clear.

    ``lines``: the axes' line paths and their bounding boxes (display space);
    ``markers``: every marker's display position and its box, one row each.

    The text is laid out once: unrotated, a spot's offset and alignment only shift
    that box (by the offset, and by a half or a whole of its width or height). So the
    boxes of all spots are computed at once and the cheap tests (inside the axes, clear
    of labels and markers) run on them as arrays; only the spots that pass are tested
    against the lines. A chart of a hundred targets labels its points in seconds.
    """
    px, py = (float(v) for v in ax.transData.transform(probe.xy))
    probe.set_position((0.0, 0.0))
    probe.set_horizontalalignment("left")
    probe.set_verticalalignment("bottom")
    text = probe.get_window_extent(renderer)
    at_rest = np.array(text.padded(_PAD_PX).extents)
    points_to_px = ax.figure.dpi / 72.0
    spots: list[tuple[tuple[float, float], HAlign, VAlign, float]] = []
    shifts: list[tuple[float, float]] = []
    for radius in _RINGS:
        for dx, dy in _DIRECTIONS:
            ha: HAlign = "left" if dx > 0 else "right" if dx < 0 else "center"
            va: VAlign = "bottom" if dy > 0 else "top" if dy < 0 else "center"
            spots.append(((dx * radius, dy * radius), ha, va, radius))
            shifts.append(
                (
                    dx * radius * points_to_px - text.width * _ALIGN_SHIFT[ha],
                    dy * radius * points_to_px - text.height * _ALIGN_SHIFT[va],
                )
            )
    boxes = at_rest + np.tile(np.array(shifts), 2)
    area = ax.bbox
    free = (
        (boxes[:, 0] >= area.x0)
        & (boxes[:, 2] <= area.x1)
        & (boxes[:, 1] >= area.y0)
        & (boxes[:, 3] <= area.y1)
    )
    taken_boxes = _extents(taken)
    free &= ~_overlapping(boxes, taken_boxes).any(axis=1)
    marker_xy, marker_boxes = markers
    others = np.abs(marker_xy[:, 0] - px) + np.abs(marker_xy[:, 1] - py) > 0.5
    free &= ~_overlapping(boxes, marker_boxes[others]).any(axis=1)
    paths, line_boxes = lines
    near_lines = _overlapping(boxes, line_boxes)
    for i in np.flatnonzero(free):
        offset, ha, va, radius = spots[i]
        box = Bbox.from_extents(*boxes[i])
        if any(
            paths[int(j)].intersects_bbox(box, filled=False) for j in np.flatnonzero(near_lines[i])
        ):
            continue
        leader = radius >= _LEADER_FROM
        if leader:
            # The leader line, from the point to the label, crosses no other label.
            end = ((box.x0 + box.x1) / 2, (box.y0 + box.y1) / 2)
            segment = Path([(px, py), end])
            # Only a label whose box meets the segment's own box (a pixel wider, so
            # no rounding decides) can cross it.
            reach = np.array(
                [
                    [
                        min(px, end[0]) - 1,
                        min(py, end[1]) - 1,
                        max(px, end[0]) + 1,
                        max(py, end[1]) + 1,
                    ]
                ]
            )
            near_taken = np.flatnonzero(_overlapping(reach, taken_boxes)[0])
            if any(segment.intersects_bbox(taken[int(j)], filled=False) for j in near_taken):
                continue
        return _Spot(offset, ha, va, box, leader)
    return None


#: How far an alignment moves a text's box from its left/bottom-aligned place, as a
#: fraction of the box's width (ha) or height (va).
_ALIGN_SHIFT: Final = {"left": 0.0, "bottom": 0.0, "center": 0.5, "right": 1.0, "top": 1.0}


def _extents(boxes: Sequence[Bbox]) -> npt.NDArray[np.float64]:
    """(x0, y0, x1, y1) rows, one per box."""
    return np.array([b.extents for b in boxes]).reshape(-1, 4)


def _overlapping(
    boxes: npt.NDArray[np.float64], others: npt.NDArray[np.float64]
) -> npt.NDArray[np.bool_]:
    """``[i, j]``: box i and box j overlap, edges touching included (Bbox.overlaps);
    both arrays hold (x0, y0, x1, y1) rows with x0 <= x1 and y0 <= y1."""
    return (
        (boxes[:, None, 0] <= others[None, :, 2])
        & (others[None, :, 0] <= boxes[:, None, 2])
        & (boxes[:, None, 1] <= others[None, :, 3])
        & (others[None, :, 1] <= boxes[:, None, 3])
    )


def _path_extents(path: Path) -> tuple[float, float, float, float]:
    """A line's bounding box: a box clear of it cannot touch the line."""
    xy: npt.NDArray[np.float64] = np.asarray(path.vertices, dtype=float)
    (x0, y0), (x1, y1) = xy.min(axis=0), xy.max(axis=0)
    return (float(x0), float(y0), float(x1), float(y1))
