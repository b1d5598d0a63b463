"""Request records as a polars frame: the records.parquet schema, a frame built from
records, and the upgrade of an older file's columns.

Kept apart from :mod:`tokrate.runfolder.records` (the record type and its column
types, which the measuring process writes to records.jsonl) because it imports
polars: only the finishing process and the readers of a run folder import this.
"""

from __future__ import annotations

from typing import Any, Final

import orjson
import polars as pl

from tokrate.runfolder.records import (
    ADDED_COLUMNS,
    ADDED_DEFAULTS,
    RECORD_COLUMN_TYPES,
    RequestRecord,
)

__all__ = ["RECORD_POLARS_SCHEMA", "records_to_frame", "upgrade_frame"]

#: Column -> polars dtype of records.parquet, in file order (from
#: :data:`~tokrate.runfolder.records.RECORD_COLUMN_TYPES`).
RECORD_POLARS_SCHEMA: Final[dict[str, Any]] = {
    name: pl.List(pl.Float64) if kind == "List[Float64]" else getattr(pl, kind)
    for name, kind in RECORD_COLUMN_TYPES.items()
}


def upgrade_frame(frame: pl.DataFrame) -> pl.DataFrame:
    """``frame`` with every column of :data:`~tokrate.runfolder.records.ADDED_COLUMNS`
    it lacks added as nulls (a records.parquet written by an older tokrate), so readers
    see one schema."""
    missing = [name for name in ADDED_COLUMNS if name not in frame.columns]
    if not missing:
        return frame
    return frame.with_columns(
        pl.lit(ADDED_DEFAULTS.get(name), dtype=RECORD_POLARS_SCHEMA[name]).alias(name)
        for name in missing
    )


def records_to_frame(records: list[RequestRecord] | list[dict[str, Any]]) -> pl.DataFrame:
    """A polars frame with exactly RECORD_POLARS_SCHEMA (empty input gives 0 rows)."""
    rows: list[dict[str, Any]] = []
    for rec in records:
        row = rec.to_dict() if isinstance(rec, RequestRecord) else dict(rec)
        extra = row.get("extra")
        row["extra"] = orjson.dumps(extra).decode() if extra else None
        for name in ("server_timings", "tool_calls"):
            value = row.get(name)
            if value is not None and not isinstance(value, str):
                row[name] = orjson.dumps(value).decode()
        rows.append(row)
    return pl.DataFrame(rows, schema=RECORD_POLARS_SCHEMA)
