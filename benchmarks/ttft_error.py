"""TTFT error of a default `tokrate run` against the simulator's truth log (issue 42).

At each ``--streams`` level: ``tokrate sim`` (from THIS checkout, in a process of its own,
one fixed-timing tier, truth log on) and a plain ``tokrate run`` of the tree under test
in a process of its own (this checkout, or ``--ref REF``: a git worktree of that commit
under /tmp, run with this checkout's virtual environment), closed loop, every request
measured (no warm-up: the opening wave counts). The run picks its own workers, as a
default run does.

Per ok request, against the truth log (same CLOCK_MONOTONIC):

- error = client TTFT - the server's own TTFT, the server's from the request's arrival
  (``arrived_ns``: the kernel's receive stamp of its last byte, tokrate.sim.arrival) to
  its first content write. It is the send leg (arrival - t0) plus the receive leg (the
  client's first-token stamp - that write);
- "vs app receipt": the same error with the server's TTFT from ``received_ns`` (when the
  simulator's app began handling the request): that adds the simulator's own intake
  queue, what earlier comparisons charged to the client;
- send queue: the records' ``send_queue_s`` (the client's own queueing before t0, where
  the tree records it).

Cost: the CPU (user + sys) of the measuring processes (the run's process and its
worker processes; the finishing child, which reads the records after the load, is left
out) over the load, per received token, and their largest peak RSS (VmHWM). Sampled
from /proc every 20 ms.

    .venv/bin/python benchmarks/ttft_error.py [--streams 1,32,256,1000] [--ref REF]

Not a test: the figures depend on the machine and on what else runs on it.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _tree_runs import (
    describe_tree,
    load1,
    quantile,
    run_tree,
    tree_for,
    truth_by_request_id,
)

from tokrate.sim.model import Tier
from tokrate.sim.server import SimConfig, spawn_simulator


def _ms(xs: Sequence[float]) -> str:
    if not xs:
        return "–"
    return f"{statistics.fmean(xs):.2f} / {quantile(xs, 0.5):.2f} / {quantile(xs, 0.99):.2f}"


def _mean_p99(xs: Sequence[float]) -> str:
    return f"{statistics.fmean(xs):.2f} / {quantile(xs, 0.99):.2f}" if xs else "–"


def measure(tree: Path, streams: int, a: argparse.Namespace) -> dict[str, Any]:
    tier = Tier(
        "fixed",
        7.0,
        7.0,
        fixed_ttft_ms=a.ttft_ms,
        fixed_itl_ms=a.itl_ms,
        output_tokens_min=a.tokens,
        output_tokens_max=a.tokens,
    )
    with tempfile.TemporaryDirectory(prefix="tokrate-ttft-error-") as tmp:
        truth_path = Path(tmp) / "truth.jsonl"
        config = SimConfig(tiers=(tier,), time_scale=1.0, truth_log=str(truth_path))
        with spawn_simulator(config) as (url, _pid):
            args = [
                "-m",
                "fixed",
                "--concurrency",
                str(streams),
                "--requests",
                str(streams * a.rounds),
                "--max-tokens",
                str(a.tokens),
                *a.run_args,
            ]
            run = run_tree(tree, url, args, Path(tmp))
        truth = truth_by_request_id(truth_path)
    records, run_info = run.records, run.run_info
    ok = [r for r in records if r["status"] == "ok" and r.get("request_id") in truth]
    error, vs_app, send_leg, receive_leg, queue = [], [], [], [], []
    tokens = 0
    for r in ok:
        t = truth[r["request_id"]]
        first_ns = r["t0_ns"] + round(r["ttft_s"] * 1e9)
        write = t["content_write_ns"][0]
        arrived = t.get("arrived_ns") or t["received_ns"]
        error.append((first_ns - r["t0_ns"] - (write - arrived)) / 1e6)
        vs_app.append((first_ns - r["t0_ns"] - (write - t["received_ns"])) / 1e6)
        send_leg.append((arrived - r["t0_ns"]) / 1e6)
        receive_leg.append((first_ns - write) / 1e6)
        if r.get("send_queue_s") is not None:
            queue.append(r["send_queue_s"] * 1e3)
        tokens += r.get("output_tokens") or 0
    start = min(r["t0_ns"] for r in records)
    end = max(r["t0_ns"] + round((r.get("e2e_s") or 0.0) * 1e9) for r in records)
    cpu = run.procs.cpu_between(start, end)
    lag = run_info.get("loop_lag") or {}
    workers = run_info.get("workers")  # the worker ids the backend started
    workers = len(workers) if isinstance(workers, list) else workers
    return {
        "ok": len(ok),
        "total": len(records),
        "workers": workers,
        "error": error,
        "vs_app": vs_app,
        "send_leg": send_leg,
        "receive_leg": receive_leg,
        "queue": queue,
        "lag_p99": lag.get("p99_ms"),
        "us_per_token": cpu / max(1, tokens) * 1e6,
        "peak_mb": run.procs.peak_mb,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--streams", default="1,32,256,1000")
    ap.add_argument("--ref", help="git ref whose tokrate runs (default: this checkout)")
    ap.add_argument("--rounds", type=int, default=3, help="requests per stream")
    ap.add_argument("--ttft-ms", type=float, default=100.0)
    ap.add_argument("--itl-ms", type=float, default=20.0)
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument(
        "--run-arg",
        dest="run_args",
        action="append",
        default=[],
        help="an extra argument for tokrate run (repeatable), e.g. --run-arg=--workers=2",
    )
    a = ap.parse_args()
    tree = tree_for(a.ref)
    print(f"tree: {describe_tree(tree)} ({tree})")
    print(
        f"sim: fixed TTFT {a.ttft_ms:g} ms, ITL {a.itl_ms:g} ms, {a.tokens} tokens;"
        f" {a.rounds} requests per stream, none warm-up"
    )
    print(
        "| streams | workers | ok | TTFT error ms mean / p50 / p99 | vs app receipt mean / p99"
        " | send leg mean / p99 | receive leg mean / p99 | send queue ms p50 / p99"
        " | loop lag p99 ms | CPU µs / token | peak RSS MB | load 1-min before → after |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for streams in (int(s) for s in a.streams.split(",")):
        before = load1()
        m = measure(tree, streams, a)
        queue = m["queue"]
        queue_text = f"{quantile(queue, 0.5):.2f} / {quantile(queue, 0.99):.2f}" if queue else "–"
        lag = "–" if m["lag_p99"] is None else f"{m['lag_p99']:.1f}"
        print(
            f"| {streams} | {m['workers']} | {m['ok']}/{m['total']} | **{_ms(m['error'])}** |"
            f" {_mean_p99(m['vs_app'])} | {_mean_p99(m['send_leg'])} |"
            f" {_mean_p99(m['receive_leg'])} | {queue_text} | {lag} |"
            f" {m['us_per_token']:.1f} | {m['peak_mb']:.0f} | {before:.2f} → {load1():.2f} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
