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

from tokrate.runfolder.jsondoc import to_json
from tokrate.runfolder.records import (
    ADDED_COLUMNS,
    ADDED_DEFAULTS,
    RECORD_COLUMN_TYPES,
    RequestRecord,
    record_from_json,
)

__all__ = ["RECORD_POLARS_SCHEMA", "frame_to_records", "records_to_frame", "upgrade_frame"]

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
        row = to_json(rec) if isinstance(rec, RequestRecord) else dict(rec)
        extra = row.get("extra")
        row["extra"] = orjson.dumps(extra).decode() if extra else None
        for name in ("server_timings", "tool_calls"):
            value = row.get(name)
            if value is not None and not isinstance(value, str):
                row[name] = orjson.dumps(value).decode()
        rows.append(row)
    return pl.DataFrame(rows, schema=RECORD_POLARS_SCHEMA)


#: Columns records.parquet keeps as JSON text (an object or a list per row).
_JSON_COLUMNS: Final = ("server_timings", "tool_calls", "extra")


def frame_to_records(frame: pl.DataFrame, where: str = "records.parquet") -> list[RequestRecord]:
    """The records of a frame of RECORD_POLARS_SCHEMA (the inverse of
    :func:`records_to_frame`): its JSON-text columns decoded, each row read as a
    records.jsonl object. Raises RunFolderError naming ``where`` and the row."""
    out = []
    for i, row in enumerate(frame.iter_rows(named=True)):
        for name in _JSON_COLUMNS:
            if isinstance(row.get(name), str):
                row[name] = orjson.loads(row[name])
        out.append(record_from_json(row, f"{where}: row {i}"))
    return out
