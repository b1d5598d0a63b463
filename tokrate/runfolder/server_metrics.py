"""server_metrics.parquet: the samples of every endpoint's Prometheus ``/metrics``
scraped during a run (the scraper is :mod:`tokrate.load.scrape`; the roles the report
draws from them, :mod:`tokrate.analysis.server_roles`).

Columns (:func:`server_metrics_schema`, docs/run-folder.md): ``t_s`` is seconds on the
driver's monotonic clock (``time.perf_counter_ns``) since the sampler started; ``at``
is the wall clock (Unix seconds), the clock the records' ``started_at`` uses, so the
report lines samples up with requests; every sample of one scrape shares its (``t_s``,
``at``). ``endpoint``, ``metric`` (the sample name), ``labels`` (JSON, sorted keys)
and ``value``: the float the server wrote.

:func:`write_server_metrics` is the file's one writer (the scraper, when the run ends),
:func:`read_server_metrics` its one reader (:func:`tokrate.runfolder.loaded_run.load_run`).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from tokrate.errors import RunFolderError
from tokrate.fileio import write_atomic_with

if TYPE_CHECKING:
    import polars as pl

__all__ = [
    "SERVER_METRICS_FILE",
    "read_server_metrics",
    "server_metrics_schema",
    "write_server_metrics",
]

SERVER_METRICS_FILE: Final = "server_metrics.parquet"


def server_metrics_schema() -> dict[str, Any]:
    """The parquet columns and their polars types (docs/run-folder.md)."""
    import polars as pl

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


def read_server_metrics(folder: Path) -> pl.DataFrame | None:
    """server_metrics.parquet of a run folder, None when the run has none. Raises
    RunFolderError (one line naming the file) for an unreadable one."""
    import polars as pl

    path = folder / SERVER_METRICS_FILE
    if not path.exists():
        return None
    schema = server_metrics_schema()
    try:
        frame = pl.read_parquet(path)
    except Exception as err:  # polars raises several unrelated types for a bad file
        raise RunFolderError(f"{path}: unreadable ({type(err).__name__}: {err})") from None
    missing = [c for c in schema if c not in frame.columns]
    if missing:
        raise RunFolderError(f"{path}: missing columns {', '.join(missing)}")
    return frame.select([pl.col(c).cast(t, strict=False) for c, t in schema.items()])
