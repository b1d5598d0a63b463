"""A run whose disk fills mid-run: ``python full_disk.py MOUNT BASE_URL METRICS_URL``,
run inside a private mount namespace (``unshare --mount --map-root-user``), so the
small tmpfs it mounts at MOUNT is seen by nothing else and goes with the namespace.

It mounts an 80 MiB tmpfs (a run needs 64 MiB free to start), starts ``tokrate run``
writing into it against BASE_URL (scraping METRICS_URL), waits until records.jsonl
holds 20 records, then fills the tmpfs to its last byte and waits for the run to end.
It prints one JSON object: the run's exit code and stderr, records.jsonl's lines (and
whether the file ends in a whole line), the files left in the run folder, and run.json.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from pathlib import Path

import orjson


def _fill(path: Path) -> None:
    """Write ``path`` until the file system refuses a single byte."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        for size in (1 << 20, 1 << 16, 1 << 12, 1 << 8, 1):
            block = b"\0" * size
            with contextlib.suppress(OSError):
                while True:
                    os.write(fd, block)
    finally:
        os.close(fd)


def main(mount: str, base_url: str, metrics_url: str) -> None:
    root = Path(mount)
    root.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=80m", "tmpfs", str(root)], check=True)
    out = root / "reports"
    cmd = [
        sys.executable,
        "-m",
        "tokrate",
        "run",
        "--base-url",
        base_url,
        "--metrics-url",
        metrics_url,
        "-m",
        "sim-1b",
        "--max-tokens",
        "64",
        "--concurrency",
        "4",
        "--requests",
        "100000",
        "--output-dir",
        str(out),
        "--run-id",
        "full",
        "--no-report",
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    jsonl = out / "full" / "records.jsonl"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        if jsonl.exists() and jsonl.read_bytes().count(b"\n") >= 20:
            break
        time.sleep(0.05)
    _fill(root / "filler")
    _, err = proc.communicate(timeout=300)
    data = jsonl.read_bytes() if jsonl.exists() else b""
    lines = data.split(b"\n")
    parsed = 0
    for line in lines[:-1]:
        orjson.loads(line)  # every line a whole record, or this raises
        parsed += 1
    run = orjson.loads((out / "full" / "run.json").read_bytes())
    result = {
        "returncode": proc.returncode,
        "stderr": err.decode("utf-8", "replace"),
        "records": parsed,
        "whole_lines": data.endswith(b"\n") and lines[-1] == b"",
        "files": sorted(p.name for p in (out / "full").iterdir()),
        "run": run,
    }
    sys.stdout.write(orjson.dumps(result).decode() + "\n")


if __name__ == "__main__":
    main(*sys.argv[1:4])
