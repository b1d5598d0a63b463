"""The one guard every run-folder file is read through.

A run folder may come from elsewhere (a CI artifact, a colleague's tarball), so a
reader trusts none of its names: each file is read with
:func:`tokrate.fileio.read_regular` / :func:`~tokrate.fileio.open_regular` (a regular
file, checked before it is opened and again on the open descriptor, opened without
blocking, of at most its kind's size limit below), and every refusal is one
:class:`~tokrate.errors.RunFolderError` line naming the file: a FIFO as run.json no
longer hangs ``report``, ``compare`` or ``history``, a link to ``/dev/zero`` or a
file past its limit no longer ends in a MemoryError traceback.

The limits are far above what a real run writes (a 10,000-request run of 512-token
answers is ~60 MB of records.jsonl and a few MB of parquet; its JSON files are KiB to a
few MiB) and low enough that reading one cannot exhaust an ordinary machine's memory.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO, Final

import orjson

from tokrate.errors import RunFolderError
from tokrate.fileio import FileRefused, open_regular, read_regular, size_text

__all__ = [
    "JSON_LIMIT_BYTES",
    "PARQUET_LIMIT_BYTES",
    "POINTER_LIMIT_BYTES",
    "RECORDS_JSONL_LIMIT_BYTES",
    "RunFileRefused",
    "open_run_file",
    "read_json",
    "read_run_file",
    "too_large",
]

#: run.json, summary.json, comparison.json, capacity.json, checks.json, routing.json.
JSON_LIMIT_BYTES: Final = 256 << 20
#: records.jsonl (~3 KB a record of 256 tokens: over a million records).
RECORDS_JSONL_LIMIT_BYTES: Final = 4 << 30
#: records.parquet and server_metrics.parquet.
PARQUET_LIMIT_BYTES: Final = 2 << 30
#: The ``latest-good`` pointer: one folder name.
POINTER_LIMIT_BYTES: Final = 4096


class RunFileRefused(RunFolderError):
    """A run-folder file the guard refuses (not a regular file, past its limit): never
    read, and never passed over for another file the way an unreadable parquet is
    (the folder is not what tokrate wrote)."""


def _refused(path: Path, err: Exception) -> RunFolderError:
    if isinstance(err, FileRefused):
        return RunFileRefused(f"{path}: {err}")
    reason = getattr(err, "strerror", None) or str(err)
    return RunFolderError(f"{path}: cannot read ({reason})")


def read_run_file(path: Path, limit_bytes: int) -> bytes | None:
    """The bytes of the run-folder file ``path``; None when there is no such file.
    Raises RunFolderError (module doc)."""
    try:
        return read_regular(path, limit_bytes)
    except FileNotFoundError:
        return None
    except (FileRefused, OSError, ValueError) as err:  # ValueError: a NUL byte in the path
        raise _refused(path, err) from None


@contextlib.contextmanager
def open_run_file(path: Path, limit_bytes: int) -> Iterator[BinaryIO]:
    """The run-folder file ``path`` open for reading (a parquet reader takes it).
    Raises RunFolderError (module doc), FileNotFoundError when it is missing."""
    try:
        opened = open_regular(path, limit_bytes)
        f = opened.__enter__()
    except FileNotFoundError:
        raise
    except (FileRefused, OSError, ValueError) as err:
        raise _refused(path, err) from None
    try:
        yield f
    finally:
        opened.__exit__(None, None, None)


def read_json(path: Path, limit_bytes: int = JSON_LIMIT_BYTES) -> Any | None:
    """The JSON document in ``path``; None when there is no such file. Raises
    RunFolderError for a refused or unreadable file, or one that is not JSON."""
    data = read_run_file(path, limit_bytes)
    if data is None:
        return None
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError as err:
        raise RunFolderError(f"{path}: unreadable ({err})") from None


def too_large(path: Path, size: int) -> RunFolderError:
    """The error for a file within its limit that still did not fit in memory."""
    return RunFileRefused(
        f"{path}: {size_text(size)}, too large to read into this machine's memory"
    )
