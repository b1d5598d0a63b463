"""Soak: client memory stays flat over a long steady run (issue 6 "Load held"). Not a test.

Starts `tokrate sim` in its own process, then `tokrate run` (a second process, the
client under test) at steady closed-loop load for DURATION seconds against one tier,
and samples the client's RSS from /proc every INTERVAL seconds together with the number
of records already on disk. Records go to records.jsonl as they end, so RSS must stay
flat while the record count grows. Prints a table and the RSS drift between the first
and last quarter of the run.

    .venv/bin/python benchmarks/soak.py [DURATION_S] [STREAMS]    # default 1800 32
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tokrate.sim.server import SimConfig, simulator_process

INTERVAL_S = 30.0


def _rss_mib(pid: int) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def _records_on_disk(out: Path) -> int:
    total = 0
    for path in out.glob("*/records.jsonl"):
        with path.open("rb") as fh:
            total += sum(1 for _ in fh)
    return total


def main() -> int:
    duration_s = float(sys.argv[1]) if len(sys.argv) > 1 else 1800.0
    streams = int(sys.argv[2]) if len(sys.argv) > 2 else 32
    out = Path(tempfile.mkdtemp(prefix="tokrate-soak-"))
    with simulator_process(SimConfig(time_scale=1.0)) as url:
        client = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tokrate",
                "run",
                "--base-url",
                url,
                "-m",
                "sim-7b",
                "--concurrency",
                str(streams),
                "--duration",
                str(duration_s),
                "--requests",
                "100000000",
                "--max-tokens",
                "64",
                "--quiet",
                "--no-report",
                "--output-dir",
                str(out),
            ],
        )
        samples: list[tuple[float, float, int]] = []
        start = time.monotonic()
        while client.poll() is None:
            rss = _rss_mib(client.pid)
            if rss is not None:
                samples.append((time.monotonic() - start, rss, _records_on_disk(out)))
            time.sleep(INTERVAL_S)
        rc = client.wait()

    print(f"soak: {duration_s:.0f} s, {streams} streams, sim-7b at time-scale 1, exit {rc}")
    print(f"{'t (s)':>8} {'client RSS (MiB)':>17} {'records on disk':>16}")
    for t, rss, n in samples:
        print(f"{t:8.0f} {rss:17.1f} {n:16d}")
    # Samples before the first record are interpreter start-up, not steady state.
    samples = [s for s in samples if s[2] > 0]
    if len(samples) >= 4:
        q = len(samples) // 4
        first = sum(s[1] for s in samples[:q]) / q
        last = sum(s[1] for s in samples[-q:]) / q
        print(
            f"RSS first quarter {first:.1f} MiB, last quarter {last:.1f} MiB, drift {last - first:+.1f} MiB"
        )
    total = _records_on_disk(out)
    print(f"records written: {total}")
    shutil.rmtree(out, ignore_errors=True)
    return rc


if __name__ == "__main__":
    raise SystemExit(main())
