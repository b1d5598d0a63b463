"""Chart files: each declared chart drawn once and saved in the formats asked for.

A chart is written whole or not at all (every format is drawn before any file is
written), and one that cannot be drawn is left out with a note that names it and says
why in words (:func:`tokrate.report.model.not_drawn`) — never an exception's text, which means nothing to
a reader — while the other charts, report.html and summary.md still come.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final

import matplotlib
from matplotlib.figure import Figure

from tokrate.report.drawn_colors import read_drawn
from tokrate.report.figures import HOUSE_RC, freeze_layout
from tokrate.report.html import ChartImage
from tokrate.report.model import Chart, not_drawn

__all__ = ["FORMATS", "DrawnCharts", "chart_files", "draw_charts"]

#: The chart file formats (every one matplotlib writes without extra packages).
FORMATS: Final = ("png", "svg", "pdf")


@dataclass(frozen=True, slots=True)
class DrawnCharts:
    """What drawing the model's charts gave: the PNGs report.html embeds (in report
    order), one note per chart that could not be drawn (its note in words), and for
    each such chart its name and the error, for tests and debugging (never shown)."""

    images: tuple[ChartImage, ...]
    failures: tuple[str, ...]
    errors: tuple[tuple[str, str], ...] = ()


def chart_files(fig: Figure, formats: Sequence[str]) -> dict[str, bytes]:
    """``fig`` as PNG (always: the page embeds it) and every other format asked for,
    byte-for-byte reproducible (no dates in SVG or PDF), saved under the house style:
    the SVG writer reads ``svg.fonttype`` (text stays text) and the PDF writer
    ``pdf.fonttype`` (Type 42 fonts) at save time, not when the figure was drawn."""
    with matplotlib.rc_context(HOUSE_RC):  # type: ignore[arg-type]
        return _files(fig, formats)


def _files(fig: Figure, formats: Sequence[str]) -> dict[str, bytes]:
    # One draw per file: the layout is solved here, once (a frozen one, after label
    # placement, is kept as it is).
    freeze_layout(fig)
    png = io.BytesIO()
    fig.savefig(png, format="png")
    files = {"png": png.getvalue()}
    if "svg" in formats:
        svg = io.BytesIO()
        fig.savefig(svg, format="svg", metadata={"Date": None})
        files["svg"] = svg.getvalue()
    if "pdf" in formats:
        pdf = io.BytesIO()
        fig.savefig(pdf, format="pdf", metadata={"CreationDate": None})
        files["pdf"] = pdf.getvalue()
    return files


def draw_charts(
    charts: Sequence[Chart[Any]],
    formats: Sequence[str],
    save: Callable[[str, str, bytes], None],
) -> DrawnCharts:
    """Draw every chart, hand each file to ``save(name, format, bytes)`` as soon as
    the chart is drawn (a crash keeps what was drawn), keep the PNGs for the page."""
    images: list[ChartImage] = []
    failures: list[str] = []
    errors: list[tuple[str, str]] = []
    for chart in charts:
        try:
            fig = chart.figure()
            files = chart_files(fig, formats)
            # Read from the figure the files were saved from: what a reader sees.
            drawn = read_drawn(fig, chart.colors)
            # Written only once every format was drawn: a chart is there whole or not at all.
            for fmt, data in files.items():
                if fmt in formats:
                    save(chart.name, fmt, data)
        except Exception as exc:
            failures.append(not_drawn(chart.title))
            errors.append((chart.name, f"{type(exc).__name__}: {exc}"))
            continue
        images.append(
            ChartImage(
                chart.name, chart.title, chart.caption, files["png"], drawn.colors, drawn.legend
            )
        )
    return DrawnCharts(tuple(images), tuple(failures), tuple(errors))
