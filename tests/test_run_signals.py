"""Ctrl-C and SIGKILL of a real `python -m tokrate run` subprocess lose nothing."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import orjson

from tokrate.store import load_run


def _start(tmp_path: Path, run_id: str) -> tuple[subprocess.Popen[bytes], Path]:
    # The embedded simulator runs in a child process of tokrate that exits with it
    # (even after a SIGKILL, see the test below). sim-70b at real time with 6 tokens:
    # ~0.35 s per request, 2 streams.
    cmd = [
        sys.executable, "-m", "tokrate", "run", "-m", "sim-70b", "--max-tokens", "6",
        "--concurrency", "2", "--requests", "400", "--time-scale", "1",
        "--output-dir", str(tmp_path), "--run-id", run_id, "--no-report",
    ]  # fmt: skip
    env = {**os.environ, "COLUMNS": "120"}
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    return proc, tmp_path / run_id


def _wait_for_records(proc: subprocess.Popen[bytes], jsonl: Path, n: int) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(proc.communicate())
        if jsonl.exists() and jsonl.read_bytes().count(b"\n") >= n:
            return
        time.sleep(0.05)
    raise AssertionError("no records appeared")


def test_sigint_writes_everything_and_exits_130(tmp_path: Path) -> None:
    proc, run_dir = _start(tmp_path, "sigint")
    _wait_for_records(proc, run_dir / "records.jsonl", 4)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 130, err.decode()
    assert b"Traceback" not in err
    run = orjson.loads((run_dir / "run.json").read_bytes())
    assert run["status"] == "interrupted"
    loaded = load_run(run_dir)
    assert loaded.interrupted
    lines = (run_dir / "records.jsonl").read_bytes().splitlines()
    assert loaded.records.height == len(lines) >= 4
    assert (run_dir / "records.parquet").exists() and (run_dir / "summary.json").exists()
    counts = run["counts"]
    assert counts["scheduled"] == counts["ok"] + counts["error"] + counts["cancelled"]
    assert counts["scheduled"] < 400
    assert b"interrupted" in err and b"sim-70b" in out  # the summary table still printed


def test_sigkill_leaves_every_finished_request_readable(tmp_path: Path) -> None:
    proc, run_dir = _start(tmp_path, "sigkill")
    _wait_for_records(proc, run_dir / "records.jsonl", 4)
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=30)
    # Everything the OS had been handed before the kill is on disk.
    lines = [ln for ln in (run_dir / "records.jsonl").read_bytes().split(b"\n") if ln]
    loaded = load_run(run_dir)
    assert loaded.interrupted and loaded.info.to_dict()["status"] == "running"
    complete = [ln for ln in lines if ln.endswith(b"}")]
    assert loaded.records.height == len(complete) >= 4
    assert set(loaded.records["status"].to_list()) == {"ok"}
    # The embedded simulator's process noticed its parent is gone and stopped serving.
    _assert_port_closes(loaded.info.to_dict()["targets"][0]["base_url"])
    # The report reads the killed run and says it was interrupted.
    from tokrate.report import build_report

    out = build_report([run_dir], formats=("svg",))
    html = (out / "report.html").read_text()
    assert "interrupted" in html


def _assert_port_closes(base_url: str) -> None:
    import socket
    from urllib.parse import urlsplit

    parts = urlsplit(base_url)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            with socket.create_connection((parts.hostname, parts.port), timeout=1):
                pass
        except OSError:
            return
        time.sleep(0.1)
    raise AssertionError(f"the simulator at {base_url} outlived its killed parent")
