"""The multi-node Ray cluster of ``tests/cluster``: a head and two worker nodes on this
machine, each in its own network namespace with its own address on a private bridge.

``.ci/netns-cluster`` does all the work (the commands docs/cluster.md shows for
starting it by hand); :class:`NetnsCluster` runs it, starts processes inside the
namespaces (the driver on the head, the simulator on n1) and takes everything down
again, by namespace, so nothing else on the machine is touched. Only the addresses
inside the namespaces (10.231.0.0/24) and 127.0.0.1 are ever used.

Node n2's Python processes read a wall clock ``N2_CLOCK_SKEW_S`` ahead
(``tests/helpers/skewed_clock``): namespaces share the kernel's clock, so this is how a
node with a wrong clock is made here.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Final

__all__ = [
    "ADDRESS",
    "HEAD_ADDRESS",
    "N2_CLOCK_SKEW_S",
    "SCRIPT",
    "NetnsCluster",
    "cannot_make_namespaces",
    "wait_for",
]

ROOT: Final = Path(__file__).resolve().parents[2]
SCRIPT: Final = ROOT / ".ci" / "netns-cluster"
#: Node name -> its address (as .ci/netns-cluster assigns them).
ADDRESS: Final = {"head": "10.231.0.1", "n1": "10.231.0.11", "n2": "10.231.0.12"}
HEAD_ADDRESS: Final = f"{ADDRESS['head']}:6379"
#: The cluster's token (Ray's token authentication); every driver reads it.
TOKEN_PATH: Final = "/tmp/tkr-ray/auth_token"
#: How far n2's wall clock reads ahead of every other node's.
N2_CLOCK_SKEW_S: Final = 2.5
_SKEW_DIR: Final = Path(__file__).resolve().parent / "skewed_clock"


def cannot_make_namespaces() -> str | None:
    """Why this machine cannot run the cluster (one line), or None when it can."""
    try:
        done = subprocess.run(
            ["bash", str(SCRIPT), "check"], capture_output=True, text=True, timeout=30
        )
    except (OSError, subprocess.SubprocessError) as exc:
        return f"cannot run {SCRIPT.name}: {exc}"
    if done.returncode == 0:
        return None
    lines = done.stderr.strip().splitlines()
    return lines[-1] if lines else f"{SCRIPT.name} check failed"


class NetnsCluster:
    """Drives ``.ci/netns-cluster`` with this interpreter's Ray; see the module doc."""

    def __init__(self, python: str = sys.executable) -> None:
        self.python = python
        self._env = dict(os.environ, RAY=str(Path(python).parent / "ray"))
        self.node_env = {
            "n1": (),
            "n2": (f"PYTHONPATH={_SKEW_DIR}", f"TOKRATE_TEST_CLOCK_SKEW_S={N2_CLOCK_SKEW_S}"),
        }
        #: Nodes cut off or killed by a test, restored before the next one.
        self.lost: set[str] = set()
        self._watchdog: subprocess.Popen[bytes] | None = None

    # --- the script ----------------------------------------------------------------

    def script(self, *args: str, timeout: float = 180.0) -> str:
        """Run one ``.ci/netns-cluster`` command; its stderr (the commands it ran).
        Raises RuntimeError with the end of its output when it fails."""
        done = subprocess.run(
            ["bash", str(SCRIPT), *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            env=self._env,
        )
        if done.returncode != 0:
            tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-15:])
            raise RuntimeError(f"netns-cluster {' '.join(args)} failed:\n{tail}")
        return done.stderr

    def up(self) -> None:
        """Remove leftovers of an earlier (killed) run, then bridge, head, n1, n2.

        A watchdog in a session of its own runs ``down`` once this process is gone, so
        a test session killed by SIGKILL (which runs no teardown) leaves no namespace
        and no Ray process behind either."""
        self.script("down")
        if self._watchdog is None:
            wait = f"while kill -0 {os.getpid()} 2>/dev/null; do sleep 0.5; done"
            self._watchdog = subprocess.Popen(
                ["bash", "-c", f"{wait}; exec bash {shlex.quote(str(SCRIPT))} down"],
                start_new_session=True,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                env=self._env,
            )
        self.script("net-up")
        self.script("head-up")
        for node in ("n1", "n2"):
            self.node_up(node)

    def node_up(self, node: str) -> None:
        self.script("node-up", node, *self.node_env[node])

    def restore(self, node: str) -> None:
        """A node that was cut off or killed: kill what is left of it, reconnect its
        link and start it again (Ray gives it a new node id)."""
        self.script("node-kill", node)
        self.script("link-up", node)
        self.node_up(node)
        self.lost.discard(node)

    def cut(self, node: str) -> None:
        """Take ``node``'s link down: it vanishes from the network (its processes run
        on, unreachable) until :meth:`restore`."""
        self.lost.add(node)
        self.script("link-cut", node)

    def down(self) -> None:
        self.script("down")
        if self._watchdog is not None:
            self._watchdog.kill()
            self._watchdog.wait()
            self._watchdog = None

    # --- processes inside the namespaces -------------------------------------------

    def driver_env(self) -> dict[str, str]:
        """The environment of a driver process: the cluster's token (Ray's token
        authentication), nothing else added."""
        return dict(self._env, RAY_AUTH_MODE="token", RAY_AUTH_TOKEN_PATH=TOKEN_PATH)

    def argv_in(self, node: str, argv: Sequence[str]) -> list[str]:
        return ["ip", "netns", "exec", f"tkr-{node}", *argv]

    def tokrate(self, args: Sequence[str]) -> subprocess.Popen[str]:
        """``tokrate ARGS`` as a driver on the head node (stdout and stderr piped)."""
        argv = self.argv_in("head", [self.python, "-m", "tokrate", *args])
        return subprocess.Popen(
            argv,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=self.driver_env(),
        )

    @contextlib.contextmanager
    def simulator(self, node: str, tiers_file: Path, truth_log: Path) -> Iterator[str]:
        """``tokrate sim`` on ``node``'s address at real time; yields its base URL."""
        argv = [self.python, "-m", "tokrate", "sim", "--host", ADDRESS[node], "--port", "0"]
        argv += ["--tiers", str(tiers_file), "--time-scale", "1", "--truth-log", str(truth_log)]
        proc = subprocess.Popen(
            self.argv_in(node, argv),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            assert proc.stdout is not None
            url = proc.stdout.readline().strip()
            if not url.startswith("http://"):
                proc.kill()
                _, err = proc.communicate(timeout=30)
                raise RuntimeError(f"simulator on {node} did not start: {err.strip()[-500:]}")
            yield url
        finally:
            if proc.poll() is None:
                proc.terminate()
            try:
                proc.communicate(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.communicate()


def wait_for(
    predicate: Callable[[], bool], timeout_s: float, what: str, poll_s: float = 0.05
) -> None:
    """Poll ``predicate()`` until true; AssertionError naming ``what`` on timeout."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(poll_s)
    raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what}")
