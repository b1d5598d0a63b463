"""The embedded simulator's temporary tiers file never outlives its start: a SIGKILLed
``tokrate run`` (real process, real signal) leaves no /tmp/tokrate-sim-* folder, and
a folder left by a dead owner is removed when the next simulator starts; the sockets
that keep the kernel stamping are closed at exit."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tokrate.sim.model import Tier
from tokrate.sim.server import SimConfig, simulator_process

TIER = Tier(name="t", params_b=1.0, active_params_b=1.0, fixed_ttft_ms=5.0, fixed_itl_ms=5.0)


def _ours(pid: int) -> list[Path]:
    return list(Path(tempfile.gettempdir()).glob(f"tokrate-sim-{pid}-*"))


def _answered(folder: Path) -> bool:
    """Some request of the run has its record: the simulator is up and serving."""
    return any(p.stat().st_size > 0 for p in folder.rglob("records.jsonl"))


def test_a_sigkilled_run_leaves_no_simulator_folder(tmp_path: Path) -> None:
    """SIGKILL while the embedded simulator serves (its tiers file written from the
    run's settings): the parent has no chance to clean up, so the folder must already
    be gone once the child started."""
    own_tmp = tmp_path / "tmp"  # the run's TMPDIR: only its own folders are there
    own_tmp.mkdir()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tokrate",
            "run",
            "--output-dir",
            str(tmp_path / "out"),
            "--requests",
            "100000",
            "--concurrency",
            "2",
            "--no-report",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, "TMPDIR": str(own_tmp)},
    )
    try:
        deadline = time.monotonic() + 60
        while not _answered(tmp_path) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert _answered(tmp_path), "the run never started its load"
        assert list(own_tmp.glob("tokrate-sim-*")) == []
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    time.sleep(1.5)  # the orphaned simulator notices its parent died within a second
    assert list(own_tmp.glob("tokrate-sim-*")) == []


def test_a_dead_owners_folder_is_swept_at_the_next_start() -> None:
    # A pid no process has: the largest pid the kernel hands out, plus one.
    dead = int(Path("/proc/sys/kernel/pid_max").read_text()) + 1
    left = Path(tempfile.mkdtemp(prefix=f"tokrate-sim-{dead}-"))
    (left / "tiers.toml").write_text("# left behind\n", encoding="utf-8")
    live = Path(tempfile.mkdtemp(prefix=f"tokrate-sim-{os.getpid()}-"))
    try:
        with simulator_process(SimConfig(tiers=(TIER,))) as url:
            assert url.startswith("http://")
            assert _ours(os.getpid()) == [live]  # its own already gone, a live one kept
        assert not left.exists()
    finally:
        live.rmdir()


def test_the_stamping_keeper_sockets_are_closed_at_exit() -> None:
    """The datagram sockets the simulator and the fast client hold open to keep the
    kernel stamping are closed when the process exits, not left to the collector
    (which warns of an unclosed socket under -X dev, and in any process that turns
    warnings on)."""
    code = (
        "from tokrate.sim.arrival import keep_kernel_stamping\n"
        "from tokrate.client.kernel_stamps import keep_stamping_on\n"
        "keep_kernel_stamping()\n"
        "keep_stamping_on()\n"
    )
    done = subprocess.run(
        [sys.executable, "-X", "dev", "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "ResourceWarning" not in done.stderr, done.stderr
