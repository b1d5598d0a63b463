"""RequestRecord is validated when built and round-trips through dict and parquet."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from tokrate.runfolder.jsondoc import to_json
from tokrate.runfolder.records import RequestRecord, record_from_json
from tokrate.runfolder.records_frame import RECORD_POLARS_SCHEMA, records_to_frame


def _record(**overrides: object) -> RequestRecord:
    base: dict[str, object] = {
        "run_id": "r1",
        "endpoint": "sim",
        "model": "sim-7b",
        "scenario": "c=1",
        "prompt_id": "p1",
        "task": "chat",
        "request_index": 0,
        "started_at": 1_700_000_000.0,
        "t0_ns": 123_456_789,
        "status": "ok",
        "ttft_s": 0.2,
        "e2e_s": 1.2,
        "chunk_offsets_s": (0.2, 0.3, 0.4),
        "output_tokens": 3,
        "tokens_source": "usage",
    }
    base.update(overrides)
    return RequestRecord(**base)  # type: ignore[arg-type]


def test_dict_round_trip_keeps_every_field() -> None:
    rec = _record(extra={"note": "x"})
    assert record_from_json(to_json(rec)) == rec


def test_unknown_keys_from_newer_writers_land_in_extra() -> None:
    data = to_json(_record()) | {"future_field": 7}
    assert record_from_json(data).extra == {"future_field": 7}


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"status": "done"}, "status"),
        ({"error_class": "timeout"}, "ok record"),
        ({"status": "error", "error_class": "boom"}, "error_class"),
        ({"tokens_source": "guess"}, "tokens_source"),
        ({"chunk_offsets_s": (0.3, 0.2)}, "non-decreasing"),
        ({"chunk_offsets_s": (-0.1,)}, "non-negative"),
    ],
)
def test_invalid_records_are_refused(overrides: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        _record(**overrides)


def test_frame_has_the_documented_schema_and_survives_parquet(tmp_path: Path) -> None:
    records = [_record(request_index=i) for i in range(3)]
    records.append(
        _record(request_index=3, status="error", error_class="http_5xx", ttft_s=None, e2e_s=0.1)
    )
    frame = records_to_frame(records)
    assert dict(frame.schema) == RECORD_POLARS_SCHEMA
    path = tmp_path / "records.parquet"
    frame.write_parquet(path)
    back = pl.read_parquet(path)
    assert back.equals(frame)
    assert back["ttft_s"].null_count() == 1
    assert back["chunk_offsets_s"][0].to_list() == [0.2, 0.3, 0.4]


def test_empty_frame_still_has_the_schema() -> None:
    frame = records_to_frame([])
    assert frame.height == 0
    assert dict(frame.schema) == RECORD_POLARS_SCHEMA
