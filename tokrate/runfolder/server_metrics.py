"""server_metrics.parquet: the samples of every endpoint's Prometheus ``/metrics``
scraped during a run (the scraper is :mod:`tokrate.load.scrape`; the roles the report
draws from them, :mod:`tokrate.analysis.server_roles`).

Columns (:func:`server_metrics_schema`, docs/run-folder.md): ``t_s`` is seconds on the
driver's monotonic clock (``time.perf_counter_ns``) since the sampler started; ``at``
is the wall clock (Unix seconds), the clock the records' ``started_at`` uses, so the
report lines samples up with requests; every sample of one scrape shares its (``t_s``,
``at``). ``endpoint``, ``metric`` (the sample name), ``labels`` (JSON, sorted keys)
and ``value``: the float the server wrote.

:func:`write_server_metrics` is the file's one writer: the finishing process, from the
samples the scraper wrote in the lean server_metrics.jsonl
(:mod:`tokrate.runfolder.server_samples`; :func:`samples_to_parquet`).
:func:`read_server_metrics` is its one reader (:func:`tokrate.runfolder.loaded_run.load_run`);
for a run killed before its finishing step it reads server_metrics.jsonl instead.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Any, Final

import polars as pl

from tokrate.errors import OutputError, RunFolderError
from tokrate.fileio import write_atomic_with
from tokrate.runfolder.files import PARQUET_LIMIT_BYTES, open_run_file, too_large
from tokrate.runfolder.server_samples import SERVER_SAMPLES_FILE, read_server_samples

__all__ = [
    "SERVER_METRICS_FILE",
    "read_server_metrics",
    "samples_to_parquet",
    "server_metrics_schema",
    "write_server_metrics",
]

SERVER_METRICS_FILE: Final = "server_metrics.parquet"


def server_metrics_schema() -> dict[str, Any]:
    """The parquet columns and their polars types (docs/run-folder.md)."""
    return {
        "t_s": pl.Float64,
        "at": pl.Float64,
        "endpoint": pl.String,
        "metric": pl.String,
        "labels": pl.String,
        "value": pl.Float64,
    }


def write_server_metrics(folder: Path, frame: pl.DataFrame) -> Path:
    """Write ``frame`` (columns of :func:`server_metrics_schema`) as
    ``folder/server_metrics.parquet``, to a temporary name renamed into place (a
    reader never sees half a file); returns the path. Raises OSError."""
    path = folder / SERVER_METRICS_FILE
    write_atomic_with(path, frame.write_parquet)
    return path


def samples_to_parquet(folder: Path) -> Path | None:
    """Turn ``folder/server_metrics.jsonl`` into server_metrics.parquet and remove it;
    None (nothing written) when the run scraped nothing. Raises RunFolderError for a
    samples file that is not that format, OutputError when the parquet cannot be
    written (the samples file then stays)."""
    columns = read_server_samples(folder)
    if columns is None:
        return None
    frame = pl.DataFrame(columns, schema=server_metrics_schema())
    try:
        path = write_server_metrics(folder, frame)
    except OSError as err:
        raise OutputError(
            f"{folder / SERVER_METRICS_FILE}: cannot write ({err.strerror or err})"
        ) from None
    with contextlib.suppress(OSError):  # the parquet holds the same samples now
        (folder / SERVER_SAMPLES_FILE).unlink()
    return path


def read_server_metrics(folder: Path) -> pl.DataFrame | None:
    """server_metrics.parquet of a run folder (server_metrics.jsonl when a killed run
    has no parquet), None when the run has neither. Raises RunFolderError (one line
    naming the file) for an unreadable one."""
    path = folder / SERVER_METRICS_FILE
    schema = server_metrics_schema()
    try:
        with open_run_file(path, PARQUET_LIMIT_BYTES) as f:
            size = os.fstat(f.fileno()).st_size
            frame = pl.read_parquet(f)
    except FileNotFoundError:
        columns = read_server_samples(folder)
        return None if columns is None else pl.DataFrame(columns, schema=schema)
    except RunFolderError:
        raise
    except MemoryError:
        raise too_large(path, size) from None
    except Exception as err:  # polars raises several unrelated types for a bad file
        raise RunFolderError(f"{path}: unreadable ({type(err).__name__}: {err})") from None
    missing = [c for c in schema if c not in frame.columns]
    if missing:
        raise RunFolderError(f"{path}: missing columns {', '.join(missing)}")
    return frame.select([pl.col(c).cast(t, strict=False) for c, t in schema.items()])
