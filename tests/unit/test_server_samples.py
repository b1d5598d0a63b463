"""server_metrics.jsonl, the scraper's lean samples file: what the measuring process
writes (no polars), what the finishing child turns into server_metrics.parquet, and
what a killed run's reader falls back to."""

from __future__ import annotations

import math
from pathlib import Path

import polars as pl
import pytest

from tokrate.errors import RunFolderError
from tokrate.runfolder.server_metrics import (
    SERVER_METRICS_FILE,
    read_server_metrics,
    samples_to_parquet,
    server_metrics_schema,
)
from tokrate.runfolder.server_samples import (
    SERVER_SAMPLES_FILE,
    read_server_samples,
    scrape_line,
    write_server_samples,
)

_LABELS = '{"model_name":"m"}'
_SCRAPES = [
    scrape_line("a", 0.0, 100.0, [("running", _LABELS, 2.0), ("quantile", "{}", math.nan)]),
    scrape_line("b", 0.5, 100.5, [("bucket", '{"le":"+Inf"}', math.inf), ("low", "{}", -math.inf)]),
    scrape_line("a", 1.0, 101.0, [("running", _LABELS, 3.0)]),
]


def test_samples_round_trip_in_scrape_order_with_values_json_cannot_hold(tmp_path: Path) -> None:
    write_server_samples(tmp_path, iter(_SCRAPES))
    columns = read_server_samples(tmp_path)
    assert columns is not None
    assert columns["endpoint"] == ["a", "a", "b", "b", "a"]
    assert columns["t_s"] == [0.0, 0.0, 0.5, 0.5, 1.0]
    assert columns["at"] == [100.0, 100.0, 100.5, 100.5, 101.0]
    assert columns["labels"][0] == _LABELS
    values = columns["value"]
    assert values[0] == 2.0 and math.isnan(values[1])
    assert values[2] == math.inf and values[3] == -math.inf and values[4] == 3.0
    assert read_server_samples(tmp_path / "nowhere") is None


def test_the_child_turns_the_samples_into_the_parquet_and_removes_them(tmp_path: Path) -> None:
    write_server_samples(tmp_path, iter(_SCRAPES))
    killed = read_server_metrics(tmp_path)  # a run killed before its finishing step
    assert samples_to_parquet(tmp_path) == tmp_path / SERVER_METRICS_FILE
    assert not (tmp_path / SERVER_SAMPLES_FILE).exists()
    frame = read_server_metrics(tmp_path)
    assert frame is not None and killed is not None
    assert frame.schema == pl.Schema(server_metrics_schema())
    assert frame.equals(killed) and frame.height == 5
    # Nothing scraped: no file either way.
    empty = tmp_path / "empty"
    empty.mkdir()
    assert samples_to_parquet(empty) is None and read_server_metrics(empty) is None


@pytest.mark.parametrize(
    "line",
    [
        b"not json\n",
        b'{"endpoint": "a", "t_s": 0.0}\n',
        b'{"endpoint": "a", "t_s": 0, "at": 1, "samples": [[1]]}\n',
    ],
)
def test_a_file_that_is_not_scrapes_is_one_line_naming_file_and_line(
    tmp_path: Path, line: bytes
) -> None:
    write_server_samples(tmp_path, iter([_SCRAPES[0], line]))
    with pytest.raises(RunFolderError, match=r"server_metrics\.jsonl:2: not a scrape"):
        read_server_samples(tmp_path)
