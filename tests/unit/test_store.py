"""The run folder: written before load, appended per record, finalized, read back."""

from __future__ import annotations

import os
import re
from pathlib import Path

import orjson
import pytest

from tokrate.errors import OutputError, RunFolderError
from tokrate.finish.finalize import finalize_run_folder
from tokrate.runfolder.jsondoc import to_json
from tokrate.runfolder.loaded_run import load_run, read_records_jsonl
from tokrate.runfolder.records import RequestRecord
from tokrate.runfolder.records_frame import RECORD_POLARS_SCHEMA
from tokrate.runfolder.run_info import RunInfo, run_info_from_json
from tokrate.runfolder.store import RunStore, load_run_info, new_run_id
from tokrate.runfolder.summary import summary_from_json

FIXTURES = Path(__file__).parent.parent / "fixtures" / "runs"


def _rec(i: int, status: str = "ok") -> RequestRecord:
    return RequestRecord(
        run_id="r",
        endpoint="e",
        model="m",
        scenario="c1",
        prompt_id=f"p{i}",
        task="chat",
        request_index=i,
        started_at=1.0e9 + i,
        t0_ns=10 + i,
        status=status,  # type: ignore[arg-type]
        ttft_s=0.1 if status == "ok" else None,
        chunk_offsets_s=(0.1, 0.2) if status == "ok" else (),
        error_class=None if status == "ok" else "http_5xx",
    )


def test_run_id_format() -> None:
    assert re.fullmatch(r"\d{8}-\d{6}-[0-9a-f]{4}", new_run_id())


def test_full_cycle(tmp_path: Path) -> None:
    store = RunStore(tmp_path / "run1")
    store.start(RunInfo(run_id="run1", label="nightly"))
    run = orjson.loads((tmp_path / "run1" / "run.json").read_bytes())
    assert run["status"] == "running" and run["layout_version"] == 1
    for i in range(3):
        store.append(_rec(i))
    store.append(_rec(3, "error"))
    store.end_scenario()
    store.close()
    # What the finishing process does after the load (tokrate.finish.finalize).
    summary = finalize_run_folder(tmp_path / "run1", "complete")
    assert summary.groups[0].counts.ok == 3
    loaded = load_run(tmp_path / "run1")
    assert not loaded.interrupted and loaded.name == "nightly"
    assert loaded.records.schema == RECORD_POLARS_SCHEMA
    assert loaded.records["request_index"].to_list() == [0, 1, 2, 3]
    assert loaded.summary == summary and loaded.info.status == "complete"
    assert loaded.info.ended_at is not None
    # run.json round-trips exactly through its type.
    assert run_info_from_json(orjson.loads((tmp_path / "run1" / "run.json").read_bytes())) == (
        loaded.info
    )


def test_refuses_existing_folder(tmp_path: Path) -> None:
    (tmp_path / "run1").mkdir()
    with pytest.raises(OutputError, match="already exists"):
        RunStore(tmp_path / "run1")


def test_unwritable_parent(tmp_path: Path) -> None:
    parent = tmp_path / "ro"
    parent.mkdir()
    parent.chmod(0o500)
    try:
        # Root ignores permission bits; sysfs refuses a new folder even to root.
        target = parent / "run1" if os.geteuid() != 0 else Path("/sys/tokrate-unwritable/run1")
        with pytest.raises(OutputError, match="cannot create the run folder") as info:
            RunStore(target)
        assert "\n" not in str(info.value)
    finally:
        parent.chmod(0o700)


def test_parent_is_a_file(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    with pytest.raises(OutputError) as info:
        RunStore(tmp_path / "file" / "run1")
    assert "\n" not in str(info.value)


def test_not_enough_free_space(tmp_path: Path) -> None:
    with pytest.raises(OutputError, match="MiB free"):
        RunStore(tmp_path / "run1", min_free_bytes=1 << 62)


def test_killed_run_with_torn_line(tmp_path: Path) -> None:
    store = RunStore(tmp_path / "run1")
    store.start(RunInfo(run_id="run1"))
    store.append(_rec(0))
    store.append(_rec(1))
    # A SIGKILL mid-write: half a line at the end, nothing finalized.
    with open(store.jsonl_path, "ab") as fh:
        fh.write(orjson.dumps(to_json(_rec(2)))[:40])
    loaded = load_run(tmp_path / "run1")
    assert loaded.interrupted
    assert loaded.records["request_index"].to_list() == [0, 1]
    assert loaded.summary is None


def test_bad_line_in_the_middle_names_the_line(tmp_path: Path) -> None:
    path = tmp_path / "records.jsonl"
    path.write_bytes(
        orjson.dumps(to_json(_rec(0))) + b"\n{oops\n" + orjson.dumps(to_json(_rec(1))) + b"\n"
    )
    with pytest.raises(RunFolderError, match=r"records.jsonl:2:"):
        read_records_jsonl(path)


def test_load_run_errors(tmp_path: Path) -> None:
    with pytest.raises(RunFolderError, match="no such directory"):
        load_run(tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(RunFolderError, match=r"no run\.json"):
        load_run(tmp_path / "empty")
    (tmp_path / "future").mkdir()
    (tmp_path / "future" / "run.json").write_text('{"layout_version": 99, "kind": "tokrate-run"}')
    with pytest.raises(RunFolderError, match="layout_version 99"):
        load_run(tmp_path / "future")
    (tmp_path / "garbage").mkdir()
    (tmp_path / "garbage" / "run.json").write_text("{not json")
    with pytest.raises(RunFolderError, match="unreadable"):
        load_run(tmp_path / "garbage")


@pytest.mark.parametrize("name", ["v0.1-first-release", "v0.1-connect-s"])
def test_run_folders_of_earlier_versions_load(name: str) -> None:
    """Folders written by earlier tokrate versions load through the one reader: every
    run.json key typed, records upgraded to today's schema, summary.json typed."""
    loaded = load_run(FIXTURES / name)
    info = loaded.info
    assert info.complete and info.name == info.run_id
    assert [t.model for t in info.targets] == ["sim-7b", "sim-70b"]
    assert [s.name for s in info.scenarios] == ["c=1", "c=2"]
    assert info.counts is not None and info.counts.scheduled == 16
    assert loaded.records.schema == RECORD_POLARS_SCHEMA and loaded.records.height == 16
    assert loaded.summary is not None and len(loaded.summary.groups) == 4
    # What compare needs of the config is parsed from it once.
    assert info.load_identity["mode"] == "closed" and info.time_scale == 20.0
    if name == "v0.1-first-release":
        assert info.label is None and info.preconnect is None and info.connections == ()
        assert loaded.records["connect_s"].null_count() == 16
    else:
        assert info.preconnect is True and info.connections
    # Unknown keys survive a rewrite; the summary round-trips.
    assert run_info_from_json(to_json(info)) == info
    assert summary_from_json(to_json(loaded.summary)) == loaded.summary
    assert load_run_info(FIXTURES / name) == info


def test_mistyped_run_json_is_one_line_naming_the_key(tmp_path: Path) -> None:
    folder = tmp_path / "bad"
    folder.mkdir()
    (folder / "run.json").write_text('{"layout_version": 1, "run_id": "x", "workers": "two"}')
    with pytest.raises(RunFolderError, match=r"run\.json: workers must be an integer"):
        load_run(folder)


def _complete_run_with_both_files(tmp_path: Path) -> Path:
    import polars as pl
    from helpers.synthetic import default_synthetic_tiers, synthetic_run

    # One model: the tests read which records file was used, not what the charts show.
    tiers = default_synthetic_tiers()[:1]
    run = synthetic_run(tmp_path / "r", tiers=tiers, concurrency=(1, 4), requests_per_level=6)
    frame = pl.read_parquet(run / "records.parquet")
    lines = [orjson.dumps(r) for r in frame.to_dicts()]
    (run / "records.jsonl").write_bytes(b"\n".join(lines) + b"\n")
    return run


@pytest.mark.parametrize("damage", ["corrupt", "foreign"])
def test_an_unusable_parquet_is_read_from_the_jsonl_with_a_warning(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], damage: str
) -> None:
    """A corrupt or foreign records.parquet of a complete run: its records come from
    records.jsonl (the file it was written from), with one warning line naming the file
    on stderr and in the report's warnings; no traceback."""
    import polars as pl

    from tokrate.cli import main

    run = _complete_run_with_both_files(tmp_path)
    height = pl.read_parquet(run / "records.parquet").height
    if damage == "corrupt":
        (run / "records.parquet").write_bytes(b"PAR1 not really")
    else:
        pl.DataFrame({"x": [1, 2]}).write_parquet(run / "records.parquet")
    loaded = load_run(run)
    assert loaded.records.height == height
    assert any("read from records.jsonl instead" in n for n in loaded.notes)
    assert main(["report", str(run), "--format", "png"]) == 0
    err = capsys.readouterr().err
    warnings = [ln for ln in err.splitlines() if ln.startswith("tokrate: warning:")]
    assert len(warnings) == 1 and "records.parquet" in warnings[0], err
    assert "Traceback" not in err
    assert "read from records.jsonl instead" in (run / "summary.md").read_text(encoding="utf-8")


def test_a_run_with_neither_records_file_usable_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from tokrate.cli import main

    run = _complete_run_with_both_files(tmp_path)
    (run / "records.parquet").write_bytes(b"garbage")
    (run / "records.jsonl").write_bytes(b"{not json\n{nor this\n")
    with pytest.raises(
        RunFolderError, match=r"records\.parquet: unreadable.*; and .*records.jsonl"
    ):
        load_run(run)
    assert main(["report", str(run)]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and "records.jsonl" in err
