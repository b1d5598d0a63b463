"""Reading run folders for the report.

Uses ``tokrate.store.load_run`` when the store module provides it; otherwise a small,
tolerant private reader with the same result shape (docs/architecture.md LoadedRun):
records from ``records.parquet``, or from ``records.jsonl`` when the run did not finish
(a torn last line is skipped, so a SIGKILLed run still reports).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import polars as pl

from tokrate.errors import RunFolderError
from tokrate.records import RECORD_POLARS_SCHEMA, RequestRecord, records_to_frame, upgrade_frame

__all__ = ["RunData", "read_run"]

_LAYOUT_VERSIONS = (1,)


@dataclass(frozen=True, slots=True)
class RunData:
    """One stored run: ``run`` is run.json, ``records`` has RECORD_POLARS_SCHEMA."""

    path: Path
    run: dict[str, Any]
    records: pl.DataFrame
    summary: dict[str, Any] | None
    interrupted: bool

    @property
    def run_id(self) -> str:
        return str(self.run.get("run_id") or self.path.name)


def read_run(path: Path) -> RunData:
    """Load a run folder; raises RunFolderError (one line) when it cannot be read."""
    try:
        from tokrate.store import load_run  # type: ignore[attr-defined,unused-ignore]
    except ImportError:
        return _read_run(Path(path))
    loaded = load_run(Path(path))
    return RunData(
        path=Path(loaded.path),
        run=dict(loaded.run),
        records=loaded.records,
        summary=loaded.summary,
        interrupted=bool(loaded.interrupted),
    )


def _read_run(path: Path) -> RunData:
    if not path.is_dir():
        raise RunFolderError(f"{path}: not a run folder (no such directory)")
    run_json = path / "run.json"
    try:
        run = orjson.loads(run_json.read_bytes())
    except FileNotFoundError:
        raise RunFolderError(f"{run_json}: missing (not a tokrate run folder)") from None
    except (OSError, orjson.JSONDecodeError) as err:
        raise RunFolderError(f"{run_json}: unreadable ({err})") from None
    if not isinstance(run, dict):
        raise RunFolderError(f"{run_json}: expected a JSON object")
    version = run.get("layout_version", 1)
    if version not in _LAYOUT_VERSIONS:
        raise RunFolderError(f"{run_json}: layout_version {version!r} is not supported (known: 1)")
    status = run.get("status")
    parquet, jsonl = path / "records.parquet", path / "records.jsonl"
    if parquet.exists() and status == "complete":
        records = _read_parquet(parquet)
    elif jsonl.exists():
        records = _read_jsonl(jsonl)
    elif parquet.exists():
        records = _read_parquet(parquet)
    else:
        raise RunFolderError(f"{path}: no records.parquet or records.jsonl")
    summary = None
    summary_path = path / "summary.json"
    if summary_path.exists():
        try:
            loaded = orjson.loads(summary_path.read_bytes())
            summary = loaded if isinstance(loaded, dict) else None
        except (OSError, orjson.JSONDecodeError):
            summary = None  # rebuilt from records anyway
    return RunData(
        path=path,
        run=run,
        records=records,
        summary=summary,
        interrupted=status != "complete",
    )


def _read_parquet(path: Path) -> pl.DataFrame:
    try:
        frame = upgrade_frame(pl.read_parquet(path))
    except Exception as err:  # polars raises several unrelated types for a bad file
        raise RunFolderError(f"{path}: unreadable parquet ({type(err).__name__})") from None
    missing = [c for c in RECORD_POLARS_SCHEMA if c not in frame.columns]
    if missing:
        raise RunFolderError(f"{path}: missing record columns {', '.join(missing[:5])}")
    return frame.select([pl.col(c).cast(t, strict=False) for c, t in RECORD_POLARS_SCHEMA.items()])


def _read_jsonl(path: Path) -> pl.DataFrame:
    rows: list[RequestRecord] = []
    try:
        lines = path.read_bytes().splitlines()
    except OSError as err:
        raise RunFolderError(f"{path}: unreadable ({err.strerror})") from None
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            rows.append(RequestRecord.from_dict(orjson.loads(line)))
        except (orjson.JSONDecodeError, TypeError, ValueError):
            if number == len(lines):
                continue  # a torn last line from a killed run
            raise RunFolderError(f"{path}:{number}: not a valid record line") from None
    return records_to_frame(rows)
