"""Typed run documents from the small dicts tests find convenient to write."""

from __future__ import annotations

from typing import Any

import polars as pl

from tokrate.analysis.metrics import summarize
from tokrate.runfolder.jsondoc import to_json
from tokrate.runfolder.run_info import RunInfo, run_info_from_json


def run_info(data: dict[str, Any] | None = None, **keys: Any) -> RunInfo:
    """A RunInfo from run.json keys (layout version 1; run_id defaults to "r")."""
    doc: dict[str, Any] = {"layout_version": 1, "run_id": "r", **(data or {}), **keys}
    return run_info_from_json(doc, "test run.json")


def summary_dict(records: pl.DataFrame | pl.LazyFrame, run: dict[str, Any]) -> dict[str, Any]:
    """summary.json (as a dict) of ``records`` for a run described by run.json keys."""
    return to_json(summarize(records, run_info(run)))
