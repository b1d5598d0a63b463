"""A stored run read back whole: run.json, the records as a polars frame, summary.json
and the server metrics (:class:`LoadedRun`, :func:`load_run`), and records.parquet's
writer (the finishing process).

Every reader of a run's records goes through :func:`load_run`. Kept apart from
:mod:`tokrate.runfolder.store` (the writers and the JSON documents' readers, which the
measuring process imports) because it imports polars.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import polars as pl

from tokrate.errors import OutputError, RunFolderError
from tokrate.fileio import write_atomic_with
from tokrate.runfolder.files import (
    PARQUET_LIMIT_BYTES,
    RECORDS_JSONL_LIMIT_BYTES,
    RunFileRefused,
    open_run_file,
    read_run_file,
    too_large,
)
from tokrate.runfolder.records import ADDED_COLUMNS
from tokrate.runfolder.records_frame import RECORD_POLARS_SCHEMA, records_to_frame, upgrade_frame
from tokrate.runfolder.run_info import RunInfo
from tokrate.runfolder.server_metrics import read_server_metrics
from tokrate.runfolder.store import RECORDS_JSONL, RECORDS_PARQUET, load_run_info, load_summary
from tokrate.runfolder.summary import Summary

__all__ = [
    "LoadedRun",
    "load_run",
    "read_records_jsonl",
    "records_warning",
    "write_records_parquet",
]


def write_records_parquet(run_dir: Path | str, frame: pl.DataFrame) -> None:
    """records.parquet from the records frame (RECORD_POLARS_SCHEMA), written to a
    temporary name and renamed, like every file here. Raises OutputError."""
    path = Path(run_dir) / RECORDS_PARQUET
    try:
        write_atomic_with(path, frame.write_parquet)
    except OSError as err:
        raise OutputError(f"{path}: cannot write ({err.strerror or err})") from None


def read_records_jsonl(path: Path) -> pl.DataFrame:
    """Records from a records.jsonl; a torn (unparsable) *last* line is skipped, a bad
    line elsewhere raises RunFolderError naming the line, as does a file the guard
    refuses (tokrate.runfolder.files) or one too large for memory."""
    data = read_run_file(path, RECORDS_JSONL_LIMIT_BYTES)
    if data is None:
        raise RunFolderError(f"{path}: cannot read (No such file or directory)")
    try:
        return _parse_jsonl(path, data)
    except MemoryError:
        raise too_large(path, len(data)) from None


def _parse_jsonl(path: Path, data: bytes) -> pl.DataFrame:
    rows: list[dict[str, Any]] = []
    lines = data.split(b"\n")
    last = len(lines) - 1
    while last >= 0 and not lines[last].strip():
        last -= 1
    for number, line in enumerate(lines[: last + 1], start=1):
        if not line.strip():
            continue
        try:
            row = orjson.loads(line)
            if not isinstance(row, dict):
                raise ValueError("not an object")
        except ValueError as err:
            if number - 1 == last:
                break  # torn by a crash mid-write: everything before it is intact
            raise RunFolderError(f"{path}:{number}: not a record ({err})") from None
        rows.append(row)
    try:
        return records_to_frame(rows)
    except Exception as err:  # a polars type mismatch: a hand-edited or foreign file
        raise RunFolderError(f"{path}: records do not match the schema ({err})") from None


@dataclass(frozen=True, slots=True)
class LoadedRun:
    """A stored run: ``info`` is run.json, ``records`` has RECORD_POLARS_SCHEMA,
    ``summary`` is summary.json (None when absent or unreadable by this version, then
    ``notes`` says why)."""

    path: Path
    info: RunInfo
    records: pl.DataFrame
    summary: Summary | None
    notes: tuple[str, ...] = ()
    #: server_metrics.parquet (tokrate.runfolder.server_metrics); None when the run scraped none.
    server_metrics: pl.DataFrame | None = None

    @property
    def interrupted(self) -> bool:
        """True unless run.json says "complete" (a killed run still says "running")."""
        return self.info.interrupted

    @property
    def name(self) -> str:
        """The run's label, else its id."""
        return self.info.name


def load_run(path: Path | str) -> LoadedRun:
    """Read a run folder (complete, interrupted or killed).

    Records come from records.parquet when the run ended through its finishing step
    (run.json "complete" or "interrupted": the parquet was written from the whole
    records.jsonl, with the answers' check verdicts, before run.json got its status),
    else from records.jsonl (a killed run: every request that finished before the end,
    no verdicts; tokrate.analysis.checks.with_verdicts judges them); records of older
    schema versions are upgraded (added columns as nulls).

    Raises:
        RunFolderError: missing folder or run.json, unreadable files, or an unknown
            layout or schema version (one line naming the file).
    """
    folder = Path(path)
    info = load_run_info(folder)
    parquet = folder / RECORDS_PARQUET
    jsonl = folder / RECORDS_JSONL
    notes: tuple[str, ...] = ()
    if parquet.exists() and info.status in ("complete", "interrupted"):
        try:
            records = _read_parquet(parquet)
        except RunFileRefused:
            raise  # not what tokrate wrote: the folder is refused, not worked around
        except RunFolderError as err:
            # records.jsonl holds the same records (the parquet is written from it):
            # read them from there, and say so; refuse only when neither can be read.
            if not jsonl.exists():
                raise
            records = _read_jsonl_instead(jsonl, str(err))
            notes += (f"{err}; {_FALLBACK_NOTE}",)
    elif jsonl.exists():
        records = read_records_jsonl(jsonl)
    elif parquet.exists():
        records = _read_parquet(parquet)
    else:
        records = records_to_frame([])
    try:
        summary = load_summary(folder)
    except RunFileRefused:
        raise
    except RunFolderError as err:
        # The records are the truth and every reader recomputes from them; an
        # unreadable summary (a newer schema) is said, not fatal.
        summary, notes = None, (*notes, str(err))
    return LoadedRun(
        path=folder,
        info=info,
        records=records,
        summary=summary,
        notes=notes,
        server_metrics=read_server_metrics(folder),
    )


#: What load_run notes (and ``tokrate report``/``compare`` warn) after a fallback.
_FALLBACK_NOTE = "the records were read from records.jsonl instead"


def _read_jsonl_instead(jsonl: Path, parquet_error: str) -> pl.DataFrame:
    try:
        return read_records_jsonl(jsonl)
    except RunFolderError as err:
        raise RunFolderError(f"{parquet_error}; and {err}") from None


def records_warning(path: Path | str) -> str | None:
    """The warning line for a complete run whose records.parquet cannot be read (corrupt,
    foreign, missing columns), which load_run replaces by records.jsonl; None when the
    parquet is fine or not the file load_run reads. Cheap: the parquet's footer only."""

    folder = Path(path)
    parquet = folder / RECORDS_PARQUET
    if not parquet.exists() or not (folder / RECORDS_JSONL).exists():
        return None
    try:
        if load_run_info(folder).interrupted:
            return None
        with open_run_file(parquet, PARQUET_LIMIT_BYTES) as f:
            columns = pl.read_parquet_schema(f)
    except (RunFolderError, FileNotFoundError):
        return None  # load_run says what is wrong with run.json
    except Exception as err:  # polars raises several unrelated types for a bad file
        return f"{parquet}: unreadable ({type(err).__name__}: {err}); {_FALLBACK_NOTE}"
    missing = [c for c in RECORD_POLARS_SCHEMA if c not in columns and c not in ADDED_COLUMNS]
    if missing:
        return f"{parquet}: missing columns {', '.join(missing[:5])}; {_FALLBACK_NOTE}"
    return None


def _read_parquet(path: Path) -> pl.DataFrame:
    try:
        with open_run_file(path, PARQUET_LIMIT_BYTES) as f:
            size = os.fstat(f.fileno()).st_size
            records = upgrade_frame(pl.read_parquet(f))
    except FileNotFoundError:
        raise RunFolderError(f"{path}: cannot read (No such file or directory)") from None
    except RunFolderError:
        raise
    except MemoryError:
        raise too_large(path, size) from None
    except Exception as err:  # polars raises several unrelated types for a bad file
        raise RunFolderError(f"{path}: unreadable ({type(err).__name__}: {err})") from None
    missing = [c for c in RECORD_POLARS_SCHEMA if c not in records.columns]
    if missing:
        raise RunFolderError(f"{path}: missing columns {', '.join(missing[:5])}")
    return records.select(
        [pl.col(c).cast(t, strict=False) for c, t in RECORD_POLARS_SCHEMA.items()]
    )
