"""Group aggregations behind summary.json ``quality`` (:mod:`tokrate.runfolder.quality`):
the measured final attempts whose answer a check judged (docs/quality.md)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import polars as pl

from tokrate.runfolder.quality import Quality

__all__ = ["quality_aggs", "quality_entry"]


def quality_aggs() -> list[pl.Expr]:
    """Aggregations over a :func:`tokrate.analysis.metrics.derive`-d frame of final
    attempts (``is_measured`` leaves warm-up out)."""
    measured = pl.col("is_measured")
    judged = measured & pl.col("check_passed").is_not_null()
    return [
        judged.sum().alias("quality__n"),
        (judged & pl.col("check_passed")).sum().alias("quality__passed"),
        pl.col("check_score").filter(judged).mean().alias("quality__mean_score"),
        (measured & pl.col("check_error").is_not_null()).sum().alias("quality__errors"),
    ]


def quality_entry(row: Mapping[str, Any]) -> Quality | None:
    """The Quality of one aggregated row; None when nothing was checked."""
    n, errors = int(row["quality__n"] or 0), int(row["quality__errors"] or 0)
    if n == 0 and errors == 0:
        return None
    return Quality(n, int(row["quality__passed"] or 0), row["quality__mean_score"], errors)
