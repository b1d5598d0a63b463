"""server_metrics.jsonl: the scraper's samples as the measuring process writes them,
before the finishing process turns them into server_metrics.parquet.

The measuring process never imports polars, so the scraper
(:mod:`tokrate.load.scrape`) writes what it scraped in this lean format when the load
ends; the finishing process's finalize step reads it back
(:func:`read_server_samples`), writes server_metrics.parquet
(:func:`tokrate.runfolder.server_metrics.write_server_metrics`) and removes it. A run
killed before that keeps this file, and
:func:`tokrate.runfolder.server_metrics.read_server_metrics` reads it instead.

One line per scrape of one endpoint, in scrape order: a JSON object ``{"endpoint": str,
"t_s": float, "at": float, "samples": [[metric, labels, value], ...]}``, the fields of
server_metrics.parquet's columns (docs/run-folder.md): ``t_s`` seconds on the driver's
monotonic clock since the sampler started, ``at`` the wall clock (Unix seconds),
``labels`` JSON with sorted keys, ``value`` the float the server wrote (JSON has no
NaN or infinity: those are the strings ``"NaN"``, ``"+Inf"``, ``"-Inf"``, as in
Prometheus text).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, BinaryIO, Final

import orjson

from tokrate.errors import RunFolderError
from tokrate.fileio import write_atomic_with
from tokrate.runfolder.files import RECORDS_JSONL_LIMIT_BYTES, read_run_file

__all__ = [
    "SERVER_SAMPLES_FILE",
    "SERVER_SAMPLE_COLUMNS",
    "read_server_samples",
    "scrape_line",
    "write_server_samples",
]

SERVER_SAMPLES_FILE: Final = "server_metrics.jsonl"
#: The columns a scrape's samples fill, in server_metrics.parquet's order.
SERVER_SAMPLE_COLUMNS: Final = ("t_s", "at", "endpoint", "metric", "labels", "value")


def scrape_line(
    endpoint: str, t_s: float, at: float, samples: Sequence[tuple[str, str, float]]
) -> bytes:
    """One scrape's line (module doc), newline included."""
    rows = [(metric, labels, _json_value(value)) for metric, labels, value in samples]
    document = {"endpoint": endpoint, "t_s": t_s, "at": at, "samples": rows}
    return orjson.dumps(document) + b"\n"


def _json_value(value: float) -> float | str:
    """``value``, or its Prometheus spelling when JSON cannot hold it (float() reads
    both back)."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return value


def write_server_samples(folder: Path, lines: Iterable[bytes]) -> Path:
    """Write ``lines`` (each from :func:`scrape_line`) as ``folder/server_metrics.jsonl``,
    atomically; returns the path. Raises OSError."""
    path = folder / SERVER_SAMPLES_FILE

    def write(f: BinaryIO) -> None:
        for line in lines:
            f.write(line)

    write_atomic_with(path, write)
    return path


def read_server_samples(folder: Path) -> dict[str, list[Any]] | None:
    """The samples of ``folder/server_metrics.jsonl`` as columns
    (:data:`SERVER_SAMPLE_COLUMNS`), None when there is no such file. Raises
    RunFolderError (one line naming the file and line) for one that is not this format."""
    path = folder / SERVER_SAMPLES_FILE
    data = read_run_file(path, RECORDS_JSONL_LIMIT_BYTES)
    if data is None:
        return None
    columns: dict[str, list[Any]] = {c: [] for c in SERVER_SAMPLE_COLUMNS}
    for number, line in enumerate(data.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            scrape = orjson.loads(line)
            endpoint, t_s, at = str(scrape["endpoint"]), float(scrape["t_s"]), float(scrape["at"])
            samples = [(str(m), str(lab), float(v)) for m, lab, v in scrape["samples"]]
        except (ValueError, KeyError, TypeError) as err:
            raise RunFolderError(f"{path}:{number}: not a scrape ({err})") from None
        for metric, labels, value in samples:
            columns["t_s"].append(t_s)
            columns["at"].append(at)
            columns["endpoint"].append(endpoint)
            columns["metric"].append(metric)
            columns["labels"].append(labels)
            columns["value"].append(value)
    return columns
