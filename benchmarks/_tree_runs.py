"""A plain `tokrate run` of a given checkout against a simulator, and what its measuring
processes cost: shared by ttft_error.py and client_cost.py (run by hand; not tests).

The tree under test is this checkout or a git ref (a worktree under /tmp, run with this
checkout's virtual environment and PYTHONPATH pointing at it), so "before" and "after"
figures come from the same command, the same simulator (this checkout's, with its
truth log) and the same machine. The run's CPU and memory are read from /proc every
20 ms: its own process and its worker processes, never the finishing child (which reads
the records after the load) nor the simulator.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

ROOT = Path(__file__).resolve().parent.parent
CLK_TCK = os.sysconf("SC_CLK_TCK")


def tree_for(ref: str | None) -> Path:
    """The checkout whose tokrate runs: this one (None), or a worktree of ``ref`` under
    the temporary directory, removed (and git's worktree list pruned) when this process
    exits."""
    if ref is None:
        return ROOT
    sha = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--verify", f"{ref}^{{commit}}"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    path = Path(tempfile.gettempdir()) / f"tokrate-ref-{sha[:12]}"
    if not (path / "tokrate").is_dir():
        subprocess.run(
            ["git", "-C", str(ROOT), "worktree", "add", "--detach", str(path), sha],
            check=True,
            capture_output=True,
        )
    atexit.register(_remove_worktree, path)
    return path


def _remove_worktree(path: Path) -> None:
    """Remove the worktree ``tree_for`` made (a run that was killed may have left it
    half made: pruning forgets it then)."""
    for args in (["worktree", "remove", "--force", str(path)], ["worktree", "prune"]):
        subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, check=False)


def describe_tree(tree: Path) -> str:
    """ "<short sha> <subject>" of the tree's commit (plus "+ changes" when dirty)."""
    head = subprocess.run(
        ["git", "-C", str(tree), "log", "-1", "--format=%h %s"], capture_output=True, text=True
    ).stdout.strip()
    dirty = subprocess.run(
        ["git", "-C", str(tree), "status", "--porcelain", "--untracked-files=no"],
        capture_output=True,
        text=True,
    ).stdout.strip()
    return head + (" + uncommitted changes" if dirty else "")


@dataclass
class ProcTree:
    """CPU and peak RSS of a process and its descendants, sampled from /proc."""

    root: int
    interval_s: float = 0.02
    #: (perf_counter_ns, {pid: cpu seconds}) per sample
    samples: list[tuple[int, dict[int, float]]] = field(default_factory=list)
    peak_kb: dict[int, int] = field(default_factory=dict)
    _stop: threading.Event = field(default_factory=threading.Event)

    def _pids(self) -> list[int]:
        out, todo = [], [self.root]
        while todo:
            pid = todo.pop()
            try:
                cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
            except OSError:
                continue
            if b"tokrate.finish" in cmd:
                continue  # the finishing child: after the load
            out.append(pid)
            with contextlib.suppress(OSError):
                for task in os.listdir(f"/proc/{pid}/task"):
                    kids = Path(f"/proc/{pid}/task/{task}/children").read_text().split()
                    todo.extend(int(k) for k in kids)
        return out

    def _sample(self) -> None:
        cpu: dict[int, float] = {}
        for pid in self._pids():
            try:
                stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
                cpu[pid] = (int(stat[11]) + int(stat[12])) / CLK_TCK
                for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                    if line.startswith("VmHWM:"):
                        self.peak_kb[pid] = max(self.peak_kb.get(pid, 0), int(line.split()[1]))
            except (OSError, IndexError, ValueError):
                continue
        self.samples.append((time.perf_counter_ns(), cpu))

    def _run(self) -> None:
        while not self._stop.is_set():
            self._sample()
            time.sleep(self.interval_s)

    @contextlib.contextmanager
    def sampling(self) -> Iterator[ProcTree]:
        thread = threading.Thread(target=self._run, daemon=True)
        thread.start()
        try:
            yield self
        finally:
            self._stop.set()
            thread.join()

    def cpu_between(self, start_ns: int, end_ns: int) -> float:
        """CPU seconds of the tree between two perf_counter_ns moments (each pid's last
        sample at or before each moment; a pid first seen later counts from 0)."""

        def at(moment: int) -> dict[int, float]:
            seen: dict[int, float] = {}
            for stamp, cpu in self.samples:
                if stamp > moment:
                    break
                seen.update(cpu)
            return seen

        before, after = at(start_ns), at(end_ns)
        return sum(cpu - before.get(pid, 0.0) for pid, cpu in after.items())

    @property
    def peak_mb(self) -> float:
        """The largest peak RSS of one measuring process (MB)."""
        return max(self.peak_kb.values(), default=0) / 1024


@dataclass
class TreeRun:
    """What one `tokrate run` left: its records, run.json, and its processes' costs."""

    records: list[dict[str, Any]]
    run_info: dict[str, Any]
    procs: ProcTree


def run_tree(tree: Path, url: str, args: Sequence[str], out_dir: Path) -> TreeRun:
    """``tokrate run --base-url URL ARGS --output-dir OUT --run-id x --no-report
    --quiet`` of ``tree`` in its own process, sampled while it runs. Raises SystemExit
    with its stderr when it fails (exit codes other than 0 and 3)."""
    argv = [
        sys.executable,
        "-m",
        "tokrate",
        "run",
        "--base-url",
        url,
        *args,
        "--output-dir",
        str(out_dir),
        "--run-id",
        "x",
        "--no-report",
        "--quiet",
    ]
    env = {**os.environ, "PYTHONPATH": str(tree)}
    proc = subprocess.Popen(
        argv, cwd=tree, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    procs = ProcTree(proc.pid)
    with procs.sampling():
        _, err = proc.communicate()
    if proc.returncode not in (0, 3):
        raise SystemExit(f"tokrate run exited {proc.returncode}: {err.decode()[-800:]}")
    run_dir = out_dir / "x"
    records = [orjson.loads(line) for line in (run_dir / "records.jsonl").read_bytes().splitlines()]
    run_info = orjson.loads((run_dir / "run.json").read_bytes())
    return TreeRun(records, run_info, procs)


def truth_by_request_id(path: Path) -> dict[str, dict[str, Any]]:
    """The simulator's truth log, by the request id each request was sent with."""
    out = {}
    for line in path.read_bytes().splitlines():
        row = orjson.loads(line)
        out[row["request"]["headers"].get("x-request-id")] = row
    return out


def quantile(xs: Sequence[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * len(s)))] if s else float("nan")


def load1() -> float:
    return os.getloadavg()[0]
