"""Hostile run folders (issue 41, item 3): a FIFO, a link to /dev/zero or a file past
its size limit in place of each run-folder file makes ``report``, ``compare`` and
``history`` say one line naming the file (exit 2; ``history`` skips the run with a
warning) instead of hanging or ending in a MemoryError traceback; a ``latest-good``
pointer is followed only inside the reports root."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest
from helpers.runfolders import make_records, write_run

from tokrate.cli import main
from tokrate.errors import RunFolderError
from tokrate.runfolder.files import PARQUET_LIMIT_BYTES, RECORDS_JSONL_LIMIT_BYTES
from tokrate.runfolder.store import resolve_latest_good

#: Every file a reader opens, and the status run.json must say for it to be read.
_FILES = {
    "run.json": "complete",
    "records.parquet": "complete",
    "records.jsonl": "running",  # a killed run's records come from the jsonl
    "summary.json": "complete",
    "server_metrics.parquet": "complete",
}


def _run(root: Path, run_id: str, status: str = "complete") -> Path:
    return write_run(root, run_id, make_records(run_id, n=30), status=status)


def _within(argv: list[str], seconds: float = 60) -> int:
    """main(argv) in a thread that must end within ``seconds`` (the old readers blocked
    on a FIFO's open for ever: a hang, not a failure)."""
    outcome: dict[str, object] = {}

    def work() -> None:
        try:
            outcome["code"] = main(argv)
        except BaseException as exc:  # the assertion below shows it
            outcome["error"] = exc

    thread = threading.Thread(target=work, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f"tokrate {argv[0]} hung"
    assert "error" not in outcome, outcome
    return int(outcome["code"])  # type: ignore[call-overload]


def _error_line(err: str) -> str:
    lines = [ln for ln in err.splitlines() if ln.startswith("tokrate: error:")]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def _plant(path: Path, kind: str) -> None:
    path.unlink(missing_ok=True)
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "zero":
        path.symlink_to("/dev/zero")
    else:  # past the size limit, sparse: no disk used
        with path.open("wb") as f:
            f.truncate(RECORDS_JSONL_LIMIT_BYTES + PARQUET_LIMIT_BYTES)


@pytest.mark.parametrize("kind", ["fifo", "zero", "huge"])
@pytest.mark.parametrize("name", list(_FILES))
def test_report_and_compare_refuse_a_hostile_file_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str, kind: str
) -> None:
    good = _run(tmp_path, "good")
    bad = _run(tmp_path, "bad", status=_FILES[name])
    _plant(bad / name, kind)
    assert _within(["report", str(bad), "--format", "svg"]) == 2
    line = _error_line(capsys.readouterr().err)
    assert f"{bad / name}:" in line
    expected = {"fifo": "FIFO", "zero": "character device", "huge": "over the"}[kind]
    assert expected in line
    assert _within(["compare", str(good), str(bad)]) == 2
    assert f"{bad / name}:" in _error_line(capsys.readouterr().err)


@pytest.mark.parametrize("name", ["run.json", "summary.json", "records.parquet"])
def test_history_skips_a_run_with_a_fifo_and_says_which(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str
) -> None:
    for i in range(3):
        _run(tmp_path / "reports", f"r{i}")
    _plant(tmp_path / "reports" / "r1" / name, "fifo")
    _within(["history", str(tmp_path / "reports"), "--output", str(tmp_path / "hist")])
    err = capsys.readouterr().err
    assert "Traceback" not in err
    (line,) = [ln for ln in err.splitlines() if "FIFO" in ln]
    assert f"skipping {tmp_path / 'reports' / 'r1'}: {name}: is a FIFO" in line


def test_latest_good_is_followed_only_inside_the_reports_root(tmp_path: Path) -> None:
    root = tmp_path / "reports"
    inside = _run(root, "night-1")
    outside = _run(tmp_path / "elsewhere", "night-0")
    pointer = root / "latest-good"
    pointer.write_text("night-1\n")
    assert resolve_latest_good(root) == inside
    for name in (str(outside), "../elsewhere/night-0", ".", ""):
        pointer.write_text(name + "\n")
        with pytest.raises(RunFolderError, match="not a run folder inside"):
            resolve_latest_good(root)
    (root / "link").symlink_to(outside)
    pointer.write_text("link\n")
    with pytest.raises(RunFolderError, match="not a run folder inside"):
        resolve_latest_good(root)
    pointer.unlink()
    os.mkfifo(pointer)
    with pytest.raises(RunFolderError, match="FIFO"):
        resolve_latest_good(root)
