"""Chart files keep their text as text (issue 38): docs/report.md promises searchable
SVG text, and journals ask for TrueType (Type 42) fonts in PDF, not Type 3 glyph
programs. The writers read these settings when they save, so saving must happen under
the house style too, not only the drawing."""

from __future__ import annotations

import re

from matplotlib.figure import Figure

from tokrate.report.drawing import chart_files
from tokrate.report.figures import house_style, new_figure


@house_style
def _chart() -> Figure:
    fig, (ax,) = new_figure(3, 2)
    ax.plot([1, 2], [3, 4], label="sim-7b")
    ax.set_title("Model size vs decode speed")
    ax.legend()
    return fig


def test_svg_text_stays_text_and_pdf_fonts_are_type_42() -> None:
    files = chart_files(_chart(), ("png", "svg", "pdf"))
    svg = files["svg"].decode()
    assert ">Model size vs decode speed</text>" in svg and ">sim-7b</text>" in svg
    assert "DejaVuSans-" not in svg  # no glyph outlines standing in for the letters
    fonts = set(re.findall(rb"/Subtype\s*/(\w+)", files["pdf"]))
    assert b"Type3" not in fonts
    assert b"CIDFontType2" in fonts  # a TrueType font embedded whole: pdf.fonttype 42
