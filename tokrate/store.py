"""The run folder: the only writer of measurements, and the one reader of them.

Layout version 1 (docs/architecture.md "Run folder"):

    run.json          written at start (status "running"), rewritten at the end
    records.jsonl     append-only, one RequestRecord.to_dict() JSON object per line
    records.parquet   written at the end from records.jsonl
    summary.json      tokrate.metrics.summarize(...) of the records

Durability: each record is one ``os.write`` of one whole line on an ``O_APPEND`` file
descriptor, so a SIGKILL can at worst tear the line being written (the reader skips a
torn last line); the file is fsynced at every scenario end and at finalize. run.json
is replaced atomically (write a temp file, fsync, rename), so it is never half-written.

Layout history (bump RUN_LAYOUT_VERSION and add a line for every change):

    1: first version.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import os
import secrets
import shutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import orjson
import polars as pl

from tokrate.errors import OutputError, RunFolderError
from tokrate.records import RECORD_POLARS_SCHEMA, RequestRecord, records_to_frame, upgrade_frame

__all__ = [
    "MIN_FREE_BYTES",
    "RUN_KIND",
    "RUN_LAYOUT_HISTORY",
    "RUN_LAYOUT_VERSION",
    "LoadedRun",
    "RunStore",
    "load_run",
    "new_run_id",
    "read_records_jsonl",
]

RUN_LAYOUT_VERSION: Final = 1
RUN_LAYOUT_HISTORY: Final[dict[int, str]] = {1: "first version"}
RUN_KIND: Final = "tokrate-run"
#: Free space the output folder needs before any load is sent (a 10,000-request run
#: with 512-token streams is ~60 MB of jsonl + parquet).
MIN_FREE_BYTES: Final = 64 * 1024 * 1024

_RUN_JSON = "run.json"
_JSONL = "records.jsonl"
_PARQUET = "records.parquet"
_SUMMARY = "summary.json"


def new_run_id(now: _dt.datetime | None = None) -> str:
    """``YYYYMMDD-HHMMSS-xxxx`` (UTC time, 4 random hex digits): sorts by start time."""
    now = now or _dt.datetime.now(_dt.UTC)
    return f"{now:%Y%m%d-%H%M%S}-{secrets.token_hex(2)}"


def _iso(ts: _dt.datetime | None = None) -> str:
    return (ts or _dt.datetime.now(_dt.UTC)).isoformat(timespec="seconds").replace("+00:00", "Z")


def _dump(obj: Any) -> bytes:
    return orjson.dumps(obj, option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY) + b"\n"


def _write_atomic(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)


class RunStore:
    """Writer of one run folder.

    Construction checks, *before any load is sent*, that the folder can be created
    (it must not exist yet: a run folder is never overwritten), written, and has
    MIN_FREE_BYTES free. Then: :meth:`start` (run.json "running"), :meth:`append` per
    record, :meth:`end_scenario` (fsync), :meth:`finalize`.

    Raises:
        OutputError: the folder exists, cannot be created/written, or the disk is full.
    """

    def __init__(self, path: Path | str, *, min_free_bytes: int = MIN_FREE_BYTES) -> None:
        self.path = Path(path)
        self.run: dict[str, Any] = {}
        self.count = 0
        self._fd: int | None = None
        if self.path.exists():
            raise OutputError(f"{self.path}: run folder already exists; refusing to overwrite it")
        try:
            self.path.mkdir(parents=True)
        except OSError as err:
            raise OutputError(
                f"{self.path}: cannot create the run folder ({err.strerror or err})"
            ) from None
        try:
            free = shutil.disk_usage(self.path).free
            if free < min_free_bytes:
                raise OutputError(
                    f"{self.path}: only {free // (1024 * 1024)} MiB free,"
                    f" need {min_free_bytes // (1024 * 1024)} MiB; free some space or use"
                    " --output-dir"
                )
            self._fd = os.open(
                self.path / _JSONL, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_EXCL, 0o644
            )
        except OSError as err:
            raise OutputError(
                f"{self.path}: output folder is not writable ({err.strerror or err})"
            ) from None

    @property
    def jsonl_path(self) -> Path:
        return self.path / _JSONL

    def start(self, run: Mapping[str, Any]) -> None:
        """Write run.json with status "running" (``run`` supplies the other keys)."""
        self.run = {
            "layout_version": RUN_LAYOUT_VERSION,
            "kind": RUN_KIND,
            **dict(run),
            "status": "running",
            "started_at": run.get("started_at") or _iso(),
            "ended_at": None,
        }
        self._write_run()

    def update(self, **keys: Any) -> None:
        """Merge keys into run.json and rewrite it atomically."""
        self.run.update(keys)
        self._write_run()

    def _write_run(self) -> None:
        try:
            _write_atomic(self.path / _RUN_JSON, _dump(self.run))
        except OSError as err:
            raise OutputError(f"{self.path / _RUN_JSON}: cannot write ({err})") from None

    def append(self, record: RequestRecord) -> None:
        """Append one record as one whole line (one write call; the OS appends it whole).

        Raises: OutputError when the write fails (disk full).
        """
        if self._fd is None:
            raise OutputError(f"{self.path}: store is closed")
        line = orjson.dumps(record.to_dict()) + b"\n"
        try:
            written = os.write(self._fd, line)
            while written < len(line):  # a short write (rare: disk nearly full)
                written += os.write(self._fd, line[written:])
        except OSError as err:
            raise OutputError(f"{self.jsonl_path}: cannot append a record ({err})") from None
        self.count += 1

    def end_scenario(self) -> None:
        """Flush records to stable storage (called at each scenario end)."""
        if self._fd is not None:
            os.fsync(self._fd)

    def close(self) -> None:
        """fsync and close records.jsonl (idempotent)."""
        if self._fd is not None:
            try:
                os.fsync(self._fd)
            finally:
                os.close(self._fd)
                self._fd = None

    def discard(self) -> None:
        """Remove the folder again when the run never started (no run.json yet): a
        config or readiness error before any load leaves no empty run folder behind."""
        self.close()
        if (self.path / _RUN_JSON).exists():
            return
        with contextlib.suppress(OSError):
            (self.path / _JSONL).unlink()
            self.path.rmdir()

    def finalize(
        self,
        *,
        status: str,
        summarize: Callable[[pl.DataFrame, dict[str, Any]], dict[str, Any]] | None = None,
        **run_keys: Any,
    ) -> tuple[pl.DataFrame, dict[str, Any] | None]:
        """Close the jsonl, write records.parquet, then summary.json
        (``summarize(frame, run)``, when given) and last run.json with ``status``
        ("complete" | "interrupted"), ``ended_at`` and ``run_keys``.

        run.json is written last, so "complete" is only ever seen next to a complete
        parquet and summary. Returns (records frame, summary or None).
        """
        self.close()
        frame = read_records_jsonl(self.jsonl_path)
        self.run.update(run_keys)
        self.run["status"] = status
        self.run["ended_at"] = _iso()
        summary = None
        try:
            frame.write_parquet(self.path / _PARQUET)
            if summarize is not None:
                summary = summarize(frame, dict(self.run))
                self.write_summary(summary)
        except OSError as err:
            raise OutputError(f"{self.path}: cannot write the run's files ({err})") from None
        self._write_run()
        return frame, summary

    def write_summary(self, summary: Mapping[str, Any]) -> None:
        _write_atomic(self.path / _SUMMARY, _dump(dict(summary)))


def read_records_jsonl(path: Path) -> pl.DataFrame:
    """Records from a records.jsonl; a torn (unparsable) *last* line is skipped, a bad
    line elsewhere raises RunFolderError naming the line."""
    rows: list[dict[str, Any]] = []
    try:
        data = path.read_bytes()
    except OSError as err:
        raise RunFolderError(f"{path}: cannot read ({err.strerror or err})") from None
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
    """A stored run: ``run`` is run.json, ``records`` has RECORD_POLARS_SCHEMA,
    ``summary`` is summary.json (None when absent), ``interrupted`` is True unless
    run.json says "complete" (a killed run still says "running")."""

    path: Path
    run: dict[str, Any]
    records: pl.DataFrame
    summary: dict[str, Any] | None
    interrupted: bool


def load_run(path: Path | str) -> LoadedRun:
    """Read a run folder (complete, interrupted or killed).

    Records come from records.parquet when the run completed, else from records.jsonl
    (every request that finished before the end).

    Raises:
        RunFolderError: missing folder or run.json, unreadable files, or an unknown
            layout version (one line naming the file).
    """
    folder = Path(path)
    run_json = folder / _RUN_JSON
    if not folder.is_dir():
        raise RunFolderError(f"{folder}: not a run folder (no such directory)")
    try:
        run = orjson.loads(run_json.read_bytes())
    except FileNotFoundError:
        raise RunFolderError(f"{folder}: not a run folder (no run.json)") from None
    except (OSError, ValueError) as err:
        raise RunFolderError(f"{run_json}: unreadable ({err})") from None
    if not isinstance(run, dict) or run.get("kind", RUN_KIND) != RUN_KIND:
        raise RunFolderError(f"{run_json}: not a tokrate run")
    version = run.get("layout_version")
    if version not in RUN_LAYOUT_HISTORY:
        raise RunFolderError(
            f"{run_json}: layout_version {version!r} is not supported"
            f" (known: {sorted(RUN_LAYOUT_HISTORY)})"
        )
    interrupted = run.get("status") != "complete"
    parquet = folder / _PARQUET
    jsonl = folder / _JSONL
    if parquet.exists() and not interrupted:
        try:
            records = upgrade_frame(pl.read_parquet(parquet))
        except Exception as err:
            raise RunFolderError(f"{parquet}: unreadable ({err})") from None
        missing = [c for c in RECORD_POLARS_SCHEMA if c not in records.columns]
        if missing:
            raise RunFolderError(f"{parquet}: missing columns {missing}")
        records = records.select(list(RECORD_POLARS_SCHEMA)).cast(RECORD_POLARS_SCHEMA)  # type: ignore[arg-type]
    elif jsonl.exists():
        records = read_records_jsonl(jsonl)
    elif parquet.exists():
        records = upgrade_frame(pl.read_parquet(parquet))
    else:
        records = records_to_frame([])
    summary = None
    summary_path = folder / _SUMMARY
    if summary_path.exists():
        try:
            summary = orjson.loads(summary_path.read_bytes())
        except (OSError, ValueError) as err:
            raise RunFolderError(f"{summary_path}: unreadable ({err})") from None
    return LoadedRun(
        path=folder, run=run, records=records, summary=summary, interrupted=interrupted
    )
