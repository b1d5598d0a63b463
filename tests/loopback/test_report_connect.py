"""Connect times in the report, the cold-start note, and v1 records (before connect_s)
still loading and reporting (issue 11)."""

from __future__ import annotations

from pathlib import Path

import orjson
import polars as pl
from helpers.synthetic import synthetic_run

from tokrate.cli import main
from tokrate.report.build import build_report
from tokrate.runfolder.loaded_run import load_run
from tokrate.runfolder.records import ADDED_COLUMNS, RECORD_SCHEMA_VERSION
from tokrate.runfolder.records_frame import RECORD_POLARS_SCHEMA


def _run(out: Path, run_id: str, *extra: str) -> Path:
    code = main(
        [
            "run",
            "-m",
            "sim-1b",
            "-m",
            "sim-7b",
            "--concurrency",
            "1,3",
            "--requests",
            "6",
            "--max-tokens",
            "6",
            "--time-scale",
            "20",
            "--output-dir",
            str(out),
            "--run-id",
            run_id,
            "--quiet",
            *extra,
        ]
    )
    assert code == 0
    return out / run_id


def test_report_shows_connect_times_and_says_when_ttft_has_the_handshake(
    tmp_path: Path,
) -> None:
    warm = _run(tmp_path, "warm")
    cold = _run(tmp_path, "cold", "--no-preconnect")
    for run_dir in (warm, cold):
        assert (run_dir / "charts" / "connect_time.png").read_bytes()[:4] == b"\x89PNG"
    warm_md = (warm / "summary.md").read_text()
    cold_md = (cold / "summary.md").read_text()
    # 1 + 3 streams per target, two targets: 8 connections either way.
    assert "preconnect on: 8 opened before the measured windows" in warm_md
    assert "0 of 24 requests opened a connection" in warm_md
    assert "cold starts (preconnect off): 8 of 24 requests opened a connection" in cold_md
    assert "that TCP/TLS set-up is inside their TTFT from due" in cold_md
    # t0 is when a request left, after its connection came up: the set-up is in the
    # client's own queueing before it (send_queue_s), not in TTFT.
    opened = [
        r
        for r in map(orjson.loads, (cold / "records.jsonl").read_bytes().splitlines())
        if r["connect_s"]
    ]
    assert len(opened) == 8
    assert all(r["send_queue_s"] >= r["connect_s"] for r in opened), opened
    both = build_report([warm, cold], tmp_path / "both", formats=("svg",))
    assert (both / "charts" / "connect_time.svg").exists()
    page = (both / "report.html").read_text()
    assert "warm: connections" in page and "cold: connections" in page


def test_runs_without_connect_times_leave_the_chart_out(tmp_path: Path) -> None:
    run = synthetic_run(tmp_path / "old", run_id="old", requests_per_level=6)
    out = build_report([run], formats=("png",))
    assert not (out / "charts" / "connect_time.png").exists()
    assert "connect time: no connection set-up recorded" in (out / "summary.md").read_text()


def test_version_1_records_load_with_connect_s_unknown(tmp_path: Path) -> None:
    assert RECORD_SCHEMA_VERSION >= 3 and ADDED_COLUMNS["connect_s"] == 2
    run = _run(tmp_path, "v1", "--no-report")
    frame = pl.read_parquet(run / "records.parquet").drop(list(ADDED_COLUMNS))
    frame.write_parquet(run / "records.parquet")  # as tokrate wrote it before v2
    run_json = orjson.loads((run / "run.json").read_bytes())
    for key in ("preconnect", "connections", "label"):
        run_json.pop(key)
    (run / "run.json").write_bytes(orjson.dumps(run_json))
    loaded = load_run(run)
    assert loaded.records.schema == RECORD_POLARS_SCHEMA
    assert loaded.records["connect_s"].null_count() == loaded.records.height
    assert loaded.records["response_model"].null_count() == loaded.records.height
    assert set(loaded.records["stamp_source"]) == {"user"}
    out = build_report([run], formats=("png",))
    assert "connections" not in (out / "summary.md").read_text().split("### ")[0]
