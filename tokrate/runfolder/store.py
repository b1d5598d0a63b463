"""The run folder: the only writer of measurements, and the readers of its JSON documents.

Layout version 1 (docs/run-folder.md):

    run.json          :class:`tokrate.runfolder.run_info.RunInfo`; written at start (status
                      "running"), rewritten at the end
    records.jsonl     append-only, one RequestRecord per line (jsondoc.to_json)
    records.parquet   written at the end from records.jsonl
    summary.json      :class:`tokrate.runfolder.summary.Summary` of the records
    capacity.json     :class:`tokrate.runfolder.capacity_result.CapacityResult` of a
                      capacity search (before summary.json, which carries it too)
    comparison.json   :class:`tokrate.runfolder.comparison.Comparison` of a baseline
    comparison.md     check, and its markdown
    accepted.json     :class:`tokrate.runfolder.acceptance.Acceptance`: the user accepted
                      this run's level as its benchmark's new normal (``tokrate accept``)
    server_metrics.parquet  the endpoints' /metrics samples (tokrate.runfolder.server_metrics),
                      only when a metrics_url was scraped (tokrate.load.scrape);
                      written before run.json

Durability: each record is one ``os.write`` of one whole line on an ``O_APPEND`` file
descriptor, so a SIGKILL can at worst tear the line being written (the reader skips a
torn last line); the file is fsynced at every scenario end and when the store closes. run.json
is replaced atomically (:func:`tokrate.fileio.write_atomic`), so it is never
half-written.

Writers: :class:`RunStore` while the run measures (run.json, records.jsonl); after the
load, the finishing process (tokrate.finish) writes the rest with the functions here,
one per file: :func:`write_run_info`, :func:`write_summary`, :func:`write_capacity`,
:func:`write_comparison`, :func:`write_acceptance`, and records.parquet with
:func:`tokrate.runfolder.loaded_run.write_records_parquet`; server_metrics.parquet is
:func:`tokrate.runfolder.server_metrics.write_server_metrics`'s and the report writes its
own files (report.html, summary.md, charts/). Nothing else writes a run folder's files.

Readers: :func:`tokrate.runfolder.loaded_run.load_run` (everything, records as a polars
frame) and :func:`load_run_info` (run.json alone, for history over hundreds of runs),
:func:`load_summary` and the other JSON documents' readers here are the only code that
reads a run folder. The ``latest-good`` pointer of nightly baselines lives here too
(:func:`resolve_latest_good`, :func:`point_latest_good`). Nothing here imports polars:
the measuring process writes and reads its run folder with this module alone.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as _dt
import os
import secrets
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

import orjson

from tokrate.errors import OutputError, RunFolderError
from tokrate.fileio import FileRefused, create_new, cut_after_last_line, write_atomic
from tokrate.redact import strip_control
from tokrate.runfolder.acceptance import ACCEPTANCE_FILE, Acceptance, acceptance_from_json
from tokrate.runfolder.capacity_result import CapacityResult, capacity_from_json
from tokrate.runfolder.checks_file import CHECKS_FILE, CheckEntry, checks_document
from tokrate.runfolder.comparison import COMPARISON_FILE
from tokrate.runfolder.files import POINTER_LIMIT_BYTES, RunFileRefused, read_json, read_run_file
from tokrate.runfolder.jsondoc import to_json
from tokrate.runfolder.records import RequestRecord
from tokrate.runfolder.routing import ROUTING_FILE, RoutingFile
from tokrate.runfolder.run_info import RunInfo, run_info_from_json
from tokrate.runfolder.summary import Summary, summary_from_json

__all__ = [
    "LATEST_GOOD",
    "MIN_FREE_BYTES",
    "RECORDS_JSONL",
    "RECORDS_PARQUET",
    "RunStore",
    "iso_now",
    "load_run_info",
    "load_summary",
    "new_run_id",
    "point_latest_good",
    "read_acceptance",
    "read_capacity",
    "resolve_latest_good",
    "run_folders",
    "write_acceptance",
    "write_capacity",
    "write_comparison",
    "write_run_info",
    "write_summary",
    "write_checks",
    "write_routing",
]

#: Free space the output folder needs before any load is sent (a 10,000-request run
#: with 512-token streams is ~60 MB of jsonl + parquet).
MIN_FREE_BYTES: Final = 64 * 1024 * 1024

#: Name of the pointer file in the reports root. A plain text file holding the run
#: folder's name, not a symlink: it survives artefact stores, caches, zip files and
#: Windows checkouts, none of which keep symlinks reliably.
LATEST_GOOD: Final = "latest-good"

_RUN_JSON = "run.json"
#: The records as each request ended (this store appends them, the measuring process).
RECORDS_JSONL: Final = "records.jsonl"
#: The records after the load (the finishing process; tokrate.runfolder.loaded_run).
RECORDS_PARQUET: Final = "records.parquet"
_SUMMARY = "summary.json"
_CAPACITY = "capacity.json"
_COMPARISON_MD = "comparison.md"


def new_run_id(now: _dt.datetime | None = None) -> str:
    """``YYYYMMDD-HHMMSS-xxxx`` (UTC time, 4 random hex digits): sorts by start time."""
    now = now or _dt.datetime.now(_dt.UTC)
    return f"{now:%Y%m%d-%H%M%S}-{secrets.token_hex(2)}"


def iso_now(ts: _dt.datetime | None = None) -> str:
    """An ISO-8601 UTC timestamp to the second, as run.json writes them."""
    return (ts or _dt.datetime.now(_dt.UTC)).isoformat(timespec="seconds").replace("+00:00", "Z")


def _dump(obj: Any) -> bytes:
    return orjson.dumps(obj, option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY) + b"\n"


class RunStore:
    """Writer of one run folder.

    Construction checks, *before any load is sent*, that the folder can be created
    (it must not exist yet: a run folder is never overwritten), written, and has
    MIN_FREE_BYTES free. Then: :meth:`start` (run.json "running"), :meth:`append` per
    record, :meth:`end_scenario` (fsync), :meth:`update` (run.json's end-of-run fields)
    and :meth:`close`; the files after the load are written by the finishing process
    (module doc).

    Raises:
        OutputError: the folder exists, cannot be created/written, or the disk is full.
    """

    def __init__(self, path: Path | str, *, min_free_bytes: int = MIN_FREE_BYTES) -> None:
        self.path = Path(path)
        self.info = RunInfo(run_id=self.path.name)
        self.count = 0
        self._fd: int | None = None
        try:
            taken = self.path.exists()
        except (OSError, ValueError) as err:  # a name too long, a NUL byte
            raise OutputError(
                f"{self.path!s:.200}: unusable run folder path ({err!s:.80})"
            ) from None
        if taken:
            raise OutputError(f"{self.path}: run folder already exists; refusing to overwrite it")
        # The folders this run creates (the run folder and any missing parents), so a
        # refused start can remove exactly those and nothing the user already had.
        self._created = [p for p in (self.path, *self.path.parents) if not p.exists()]
        try:
            self.path.mkdir(parents=True)
        except OSError as err:
            self._remove_created()
            raise OutputError(
                f"{self.path}: cannot create the run folder ({err.strerror or err})"
            ) from None
        try:
            self._check_writable(min_free_bytes)
        except OutputError:
            self.discard()
            raise

    def _check_writable(self, min_free_bytes: int) -> None:
        try:
            free = shutil.disk_usage(self.path).free
            if free < min_free_bytes:
                raise OutputError(
                    f"{self.path}: only {free // (1024 * 1024)} MiB free,"
                    f" need {min_free_bytes // (1024 * 1024)} MiB; free some space or use"
                    " --output-dir"
                )
            self._fd = create_new(self.path / RECORDS_JSONL)
        except OSError as err:
            raise OutputError(
                f"{self.path}: output folder is not writable ({err.strerror or err})"
            ) from None

    @property
    def jsonl_path(self) -> Path:
        return self.path / RECORDS_JSONL

    def start(self, info: RunInfo) -> None:
        """Write run.json with status "running" (``info`` supplies everything else;
        ``started_at`` defaults to now)."""
        self.info = dataclasses.replace(
            info, status="running", started_at=info.started_at or iso_now(), ended_at=None
        )
        self._write_run()

    def update(self, **changes: Any) -> None:
        """Replace RunInfo fields and rewrite run.json atomically."""
        self.info = dataclasses.replace(self.info, **changes)
        self._write_run()

    def _write_run(self) -> None:
        write_run_info(self.path, self.info)

    def append(self, record: RequestRecord) -> None:
        """Append one record as one whole line (one write call; the OS appends it whole).

        Raises: OutputError when the write fails (disk full).
        """
        if self._fd is None:
            raise OutputError(f"{self.path}: store is closed")
        line = orjson.dumps(to_json(record)) + b"\n"
        try:
            written = os.write(self._fd, line)
            while written < len(line):  # a short write (rare: disk nearly full)
                written += os.write(self._fd, line[written:])
        except OSError as err:
            raise OutputError(
                f"{self.jsonl_path}: cannot append a record ({err.strerror or err})"
            ) from None
        self.count += 1

    def cut_torn_line(self) -> None:
        """Truncate records.jsonl to its last whole line: a write the disk refused
        half-way leaves part of a line, which is no record. Never raises (a file that
        cannot even be truncated keeps its torn line, which every reader skips)."""
        if self._fd is None:
            return
        with contextlib.suppress(OSError, FileRefused):
            cut_after_last_line(self._fd, self.jsonl_path)

    def end_scenario(self) -> None:
        """Flush records to stable storage (called at each scenario end). Raises
        OutputError when the disk refuses."""
        if self._fd is not None:
            try:
                os.fsync(self._fd)
            except OSError as err:
                raise OutputError(
                    f"{self.jsonl_path}: cannot flush the records ({err.strerror or err})"
                ) from None

    def close(self) -> None:
        """fsync and close records.jsonl (idempotent; a failed fsync, a disk that
        filled, was said by the write that failed first)."""
        if self._fd is not None:
            try:
                with contextlib.suppress(OSError):
                    os.fsync(self._fd)
            finally:
                os.close(self._fd)
                self._fd = None

    def discard(self) -> None:
        """Remove what this store created when no record was written: a config or
        readiness error before any load leaves no run folder (and no output folder it
        had to create) behind, so a rerun with the same run id is not refused."""
        self.close()
        if self.count:
            return
        for name in (_RUN_JSON, RECORDS_JSONL, CHECKS_FILE):
            with contextlib.suppress(OSError):
                (self.path / name).unlink()
        self._remove_created()

    def _remove_created(self) -> None:
        # rmdir, never rmtree: a folder something else wrote into meanwhile stays.
        for folder in self._created:
            try:
                folder.rmdir()
            except OSError:
                return


# --- the files written after the load ---------------------------------------------------


def _write(path: Path, data: bytes) -> None:
    try:
        write_atomic(path, data)
    except OSError as err:
        raise OutputError(f"{path}: cannot write ({err.strerror or err})") from None


def write_run_info(run_dir: Path | str, info: RunInfo) -> None:
    """Replace run.json with ``info`` (atomically). Raises OutputError."""
    _write(Path(run_dir) / _RUN_JSON, _dump(to_json(info)))


def write_summary(run_dir: Path | str, summary: Summary) -> None:
    """summary.json. Raises OutputError."""
    _write(Path(run_dir) / _SUMMARY, _dump(to_json(summary)))


def write_capacity(run_dir: Path | str, result: CapacityResult) -> None:
    """capacity.json, a capacity search's result. Raises OutputError."""
    _write(Path(run_dir) / _CAPACITY, orjson.dumps(to_json(result), option=orjson.OPT_INDENT_2))


def read_capacity(run_dir: Path | str) -> CapacityResult | None:
    """capacity.json of a run folder, None after a sweep. Raises RunFolderError (one
    line naming the file)."""
    file = Path(run_dir) / _CAPACITY
    data = read_json(file)
    return None if data is None else capacity_from_json(data, str(file))


def write_comparison(run_dir: Path | str, document: str, markdown: str) -> None:
    """comparison.json (``document``, the JSON text of a Comparison or of "no
    baseline yet") and comparison.md beside it. Raises OutputError."""
    folder = Path(run_dir)
    _write(folder / COMPARISON_FILE, document.encode("utf-8"))
    _write(folder / _COMPARISON_MD, markdown.encode("utf-8"))


def write_acceptance(run_dir: Path | str, acceptance: Acceptance) -> None:
    """accepted.json (tokrate.runfolder.acceptance), replacing an earlier one: accepting
    a run again moves the moment of acceptance. Raises OutputError."""
    _write(Path(run_dir) / ACCEPTANCE_FILE, _dump(to_json(acceptance)))


def read_acceptance(run_dir: Path | str) -> Acceptance | None:
    """accepted.json of a run folder, None when the run was never accepted. Raises
    RunFolderError (one line naming the file) for an unreadable one."""
    file = Path(run_dir) / ACCEPTANCE_FILE
    data = read_json(file)
    return None if data is None else acceptance_from_json(data, str(file))


def write_checks(run_dir: Path, entries: Sequence[CheckEntry]) -> None:
    """Write checks.json (nothing when no prompt has a check). Raises OutputError."""
    if entries:
        _write(run_dir / CHECKS_FILE, _dump(checks_document(entries)))


def write_routing(run_dir: Path, routing: RoutingFile | None) -> None:
    """Write routing.json (None: remove a stale one). Raises OutputError."""
    path = run_dir / ROUTING_FILE
    try:
        if routing is None:
            path.unlink(missing_ok=True)
        else:
            write_atomic(path, _dump(to_json(routing)))
    except OSError as err:
        raise OutputError(f"{path}: cannot write ({err.strerror})") from None


def _read_info(folder: Path) -> RunInfo:
    run_json = folder / _RUN_JSON
    try:
        is_dir = folder.is_dir()
    except (OSError, ValueError) as err:  # a name too long, a NUL byte
        raise RunFolderError(f"{folder!s:.200}: not a usable path ({err!s:.100})") from None
    if not is_dir:
        raise RunFolderError(f"{folder}: not a run folder (no such directory)")
    data = read_json(run_json)
    if data is None:
        raise RunFolderError(f"{folder}: not a run folder (no run.json)")
    return run_info_from_json(data, str(run_json))


def load_summary(path: Path | str) -> Summary | None:
    """summary.json of a run folder, None when there is none. Raises RunFolderError
    (one line naming the file) for an unreadable one or an unknown schema version."""
    file = Path(path) / _SUMMARY
    data = read_json(file)
    return None if data is None else summary_from_json(data, str(file))


def load_run_info(path: Path | str) -> RunInfo:
    """run.json of a run folder alone (cheap: one small JSON file). Raises
    RunFolderError (one line naming the file)."""
    return _read_info(Path(path))


def run_folders(root: Path | str) -> list[Path]:
    """Every run folder (a folder holding run.json) under ``root``, at any depth, sorted;
    never one inside another run folder (a run's ``confirm/`` re-measurement is part of
    that run, not a run of its own)."""
    folders = {p.parent for p in Path(root).rglob(_RUN_JSON)}
    return sorted(f for f in folders if not any(parent in folders for parent in f.parents))


# --- the latest-good pointer ---------------------------------------------------------


def resolve_latest_good(reports_root: Path | str) -> Path | None:
    """The run folder ``reports_root/latest-good`` names, or None when there is no
    pointer yet. The pointer is read through the guard (tokrate.runfolder.files) and
    followed only to a folder inside the reports root: an absolute name, ``..`` or a
    symlink that leads out of it is refused (a pointer from elsewhere must not make
    a nightly compare against, or write next to, a folder the user never named).

    Raises RunFolderError (one line) when the pointer is refused, or names a folder
    that is gone or lies outside the root."""
    root = Path(reports_root)
    pointer = root / LATEST_GOOD
    data = read_run_file(pointer, POINTER_LIMIT_BYTES)
    if data is None:
        return None
    name = data.decode("utf-8", "replace").strip()
    shown = strip_control(name)[:200]
    target = root / name
    try:
        resolved, top = target.resolve(), root.resolve()
        inside = resolved.is_relative_to(top) and resolved != top
    except (OSError, ValueError, RuntimeError):  # a NUL byte, a symlink loop
        inside = False
    if not inside:
        raise RunFileRefused(
            f"{pointer}: names {shown!r}, which is not a run folder inside {root};"
            " not following it (point it at a folder under the reports root)"
        )
    if not target.is_dir():
        raise RunFolderError(
            f"{pointer}: names run folder {shown!r}, which does not exist under {root}"
        )
    return target


def point_latest_good(reports_root: Path | str, run_dir: Path | str) -> None:
    """Atomically point ``reports_root/latest-good`` at ``run_dir``, by its path
    relative to the root with / separators. Raises OutputError when ``run_dir`` is
    not below the root (the pointer is followed only inside it: resolve_latest_good)."""
    root = Path(reports_root)
    try:
        name = str(Path(run_dir).resolve().relative_to(root.resolve()))
    except ValueError:
        raise OutputError(
            f"{root / LATEST_GOOD}: {run_dir} is not inside the reports root {root};"
            " the pointer is not moved"
        ) from None
    _write(root / LATEST_GOOD, (name.replace(os.sep, "/") + "\n").encode())
