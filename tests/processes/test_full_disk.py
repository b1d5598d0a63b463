"""A disk that fills mid-run (issue 41, item 6): the run stops like a signal, cuts
records.jsonl back to its last whole line, leaves no temporary file, says so in one
line and exits 2 (the old run ended in two chained tracebacks, exit 1, the code a
nightly gate reads as a regression, with run.json "running", a torn last line and a
temporary file left).

The disk is a real 80 MiB tmpfs, mounted in a private mount namespace
(tests/helpers/full_disk.py) by ``unshare --mount --map-root-user``, so the test needs
no root on the host; where user namespaces are not allowed it is skipped.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

HELPER = Path(__file__).resolve().parents[1] / "helpers" / "full_disk.py"


def _unshare_works() -> bool:
    if shutil.which("unshare") is None or shutil.which("mount") is None:
        return False
    probe = ["unshare", "--mount", "--map-root-user", "true"]
    return subprocess.run(probe, capture_output=True).returncode == 0


@pytest.mark.skipif(not _unshare_works(), reason="needs unshare --mount --map-root-user")
def test_a_disk_that_fills_mid_run_stops_the_load_in_one_line(tmp_path: Path, sim_url: str) -> None:
    metrics = sim_url.removesuffix("/v1") + "/metrics"
    cmd = [
        "unshare",
        "--mount",
        "--map-root-user",
        "--propagation",
        "private",
        sys.executable,
        str(HELPER),
        str(tmp_path / "disk"),
        sim_url,
        metrics,
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    result = orjson.loads(done.stdout)
    err = result["stderr"]
    assert result["returncode"] == 2, err
    assert "Traceback" not in err
    (line,) = [ln for ln in err.splitlines() if ln.startswith("tokrate: error:")]
    assert "records.jsonl: cannot append a record (No space left on device)" in line
    assert "the load was stopped after" in line and "tokrate report" in line
    assert result["whole_lines"] and result["records"] >= 20
    assert not [f for f in result["files"] if f.endswith(".tmp")], result["files"]
    run = result["run"]
    # run.json said "running" until its end; whether the full disk took the rewrite or
    # not, it never claims a finished run, and records.jsonl is what a report reads.
    assert run["status"] in ("running", "interrupted")
