"""Run folders written by the release before the one JSON converter still load, byte for
byte: every document read through today's reader and written back through today's
writer gives the file's own bytes, and the folder still loads and reports.

The folders under tests/fixtures/runs/v0.1-pre-convert-* were written by commit 3b6db18,
before run-folder documents were read and written by tokrate.runfolder.jsondoc
(tests/fixtures/runs/README.md says how). A document that reads into a type and writes
back the same bytes lost nothing and gained nothing on the way.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest

from tokrate.report.terminal.comparison_text import render_json
from tokrate.runfolder.acceptance import ACCEPTANCE_FILE
from tokrate.runfolder.checks_file import CHECKS_FILE, read_checks
from tokrate.runfolder.comparison import COMPARISON_FILE, read_comparison
from tokrate.runfolder.loaded_run import load_run
from tokrate.runfolder.records import record_from_json
from tokrate.runfolder.routing import read_routing
from tokrate.runfolder.store import (
    RECORDS_JSONL,
    RunStore,
    load_run_info,
    load_summary,
    read_acceptance,
    read_capacity,
    write_acceptance,
    write_capacity,
    write_checks,
    write_comparison,
    write_routing,
    write_run_info,
    write_summary,
)

FIXTURES = Path(__file__).parent.parent / "fixtures" / "runs"
FOLDERS = ("default", "priced", "compared", "capacity")
#: Single documents written before comparison.json, the records and routing.json moved
#: onto the converter, covering what the run folders above do not (a confirmation, a
#: reference of nights, thresholds fitted per series, routes picked, every record field).
DOCUMENTS_FIXTURES = Path(__file__).parent.parent / "fixtures" / "documents" / "pre-convert"
DOCUMENT_FOLDERS = ("confirmed", "noise", "routed", "slo")

#: Each run-folder JSON document: its reader (folder -> typed object) and its writer
#: (folder, object -> the file written there), both today's.
DOCUMENTS: dict[str, tuple[Callable[[Path], Any], Callable[[Path, Any], None]]] = {
    "run.json": (load_run_info, write_run_info),
    "summary.json": (load_summary, write_summary),
    CHECKS_FILE: (read_checks, write_checks),
    "routing.json": (read_routing, write_routing),
    COMPARISON_FILE: (
        read_comparison,
        lambda folder, c: write_comparison(folder, render_json(c), ""),
    ),
    "capacity.json": (read_capacity, write_capacity),
    ACCEPTANCE_FILE: (read_acceptance, write_acceptance),
}


def _folder(name: str) -> Path:
    return FIXTURES / f"v0.1-pre-convert-{name}"


def test_the_fixtures_hold_every_document() -> None:
    """Between them the folders hold every document the table above round-trips."""
    held = {p.name for name in FOLDERS for p in _folder(name).iterdir()}
    assert set(DOCUMENTS) <= held


@pytest.mark.parametrize("name", FOLDERS)
def test_every_document_reads_and_writes_back_byte_for_byte(name: str, tmp_path: Path) -> None:
    folder = _folder(name)
    checked = []
    for file, (read, write) in DOCUMENTS.items():
        if not (folder / file).exists():
            continue
        document = read(folder)
        assert document, f"{name}/{file} read as nothing"
        write(tmp_path, document)
        assert (tmp_path / file).read_bytes() == (folder / file).read_bytes(), f"{name}/{file}"
        # The rewritten file reads back to an equal object.
        assert read(tmp_path) == document, f"{name}/{file}"
        checked.append(file)
    assert "run.json" in checked and "summary.json" in checked


@pytest.mark.parametrize("name", DOCUMENT_FOLDERS)
def test_each_document_written_before_reads_and_writes_back(name: str, tmp_path: Path) -> None:
    folder = DOCUMENTS_FIXTURES / name
    (file,) = (p.name for p in folder.iterdir())
    read, write = DOCUMENTS[file]
    document = read(folder)
    assert document, f"{name}/{file} read as nothing"
    write(tmp_path, document)
    assert (tmp_path / file).read_bytes() == (folder / file).read_bytes(), f"{name}/{file}"
    assert read(tmp_path) == document, f"{name}/{file}"


def test_records_written_before_read_and_append_back_byte_for_byte(tmp_path: Path) -> None:
    """records.jsonl, line by line: every field set, a tool call, an error, a bare one."""
    lines = (DOCUMENTS_FIXTURES / "records" / RECORDS_JSONL).read_bytes().splitlines(keepends=True)
    records = [record_from_json(orjson.loads(line)) for line in lines]
    assert records[0].server_timings and records[0].extra and records[1].tool_calls
    store = RunStore(tmp_path / "again")
    for record in records:
        store.append(record)
    store.close()
    assert (tmp_path / "again" / RECORDS_JSONL).read_bytes().splitlines(keepends=True) == lines


@pytest.mark.parametrize("name", FOLDERS)
def test_the_folder_loads_as_the_release_wrote_it(name: str) -> None:
    run = load_run(_folder(name))
    assert run.info.complete and run.summary is not None and run.records.height > 0
    assert {(g.endpoint, g.model) for g in run.summary.groups} == {t.key for t in run.info.targets}
    if name == "priced":
        assert all(t.price_in_per_m is not None for t in run.info.targets)
        assert run.info.slo.ttft_s == 1.0 and run.info.spend is not None
    if name == "compared":
        comparison = read_comparison(run.path)
        assert comparison is not None and comparison.results
    if name == "capacity":
        assert read_capacity(run.path) is not None
