"""The report model as report.html and summary.md.

Both documents show the same model in the same order; the page embeds the drawn
charts' PNGs, and both list what was left out — by the model, and by drawing.
"""

from __future__ import annotations

from tokrate.report.drawing import DrawnCharts
from tokrate.report.html import Page, render_html
from tokrate.report.model import ReportModel
from tokrate.report.text import render_markdown

__all__ = ["report_html", "report_markdown"]


def _left_out(model: ReportModel, drawn: DrawnCharts) -> list[str]:
    return [*model.left_out, *drawn.failures]


def report_html(model: ReportModel, drawn: DrawnCharts) -> str:
    """report.html: one self-contained page (tokrate.report.html)."""
    return render_html(
        Page(
            title=model.title,
            meta=model.meta,
            banners=model.banners,
            verdict=model.verdict,
            warnings=model.warnings,
            lead=model.lead,
            tier=model.tier,
            meta_title="Run",
            tables=model.tables,
            charts=drawn.images,
            colors=model.colors,
            notes=_left_out(model, drawn),
            errors=model.errors,
            configs=model.configs,
        )
    )


def report_markdown(model: ReportModel, drawn: DrawnCharts) -> str:
    """summary.md: the same model as GitHub-flavoured markdown (no charts)."""
    return render_markdown(
        title=model.title,
        meta=[*(("note", b) for b in model.banners), *model.meta],
        verdict=model.verdict,
        tables=[*model.lead, *model.tier, *model.tables, model.errors],
        notes=_left_out(model, drawn),
        warnings=model.warnings,
    )
