"""Capacity search over the simulator's six default tiers vs the simulator's own answer.

Run by hand (not a test): ``python benchmarks/capacity_search.py [--slo e2e|tpot]``.
One ``tokrate run --capacity`` over the embedded simulator (closed loop, every default
tier, one after another), then :func:`tokrate.sim.capacity_answer.closed_loop_capacity`
replays the simulator's batching engine for the same prompt length (as the simulator
counted it) and SLO, twice: *lockstep* (identical requests that start together join,
finish and rejoin together, so their prefills coincide) and *staggered* (joins spread
evenly, each prefill stalling the batch once more).

- ``--slo e2e`` (default; the suite's tests/loopback/test_capacity_sim.py): E2E SLO 1 s of model
  time, 500-token prompts, 8 tokens out. Every stream adds one prefill to every
  request's E2E in either phase, so the two replays agree: the simulator has one answer.
- ``--slo tpot``: TPOT SLO 100 ms of model time, 2,000-token prompts, 32 out. Lockstep
  prefills land in TTFT, staggered ones in every TPOT, so the replays differ and a
  measured closed loop (lockstep at the start, drifting as jitter shifts requests) lies
  between them.

Prints one row per tier (found, the simulator's answers, the difference, the
verification probes at the capacity and twice it) and the machine load before and after.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from tokrate.load.run import run_benchmark
from tokrate.runfolder.loaded_run import load_run
from tokrate.sim.capacity_answer import closed_loop_capacity
from tokrate.sim.server import SimConfig, build_state
from tokrate.spec.config_file import load_spec

MAX_LEVEL = 512


@dataclass(frozen=True)
class Workload:
    metric: str
    limit_model_s: float
    input_tokens: int
    output_tokens: int


WORKLOADS = {
    "e2e": Workload("e2e_s", 1.0, 500, 8),
    "tpot": Workload("tpot_s", 0.100, 2000, 32),
}


def _load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.2f}, {five:.2f}, {fifteen:.2f} on {os.cpu_count()} CPUs"


def _commit() -> str:
    done = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False
    )
    return done.stdout.strip() or "unknown"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--slo", choices=sorted(WORKLOADS), default="e2e")
    ap.add_argument("--time-scale", type=float, default=2.0)
    ap.add_argument("-m", "--model", action="append", help="only these tiers (repeatable)")
    ap.add_argument("--from", dest="run_dir", type=Path, help="print the table of a finished run")
    args = ap.parse_args()
    w = WORKLOADS[args.slo]
    scale = args.time_scale
    if args.run_dir is not None:
        _table(args.run_dir, w, scale)
        return
    out = Path(tempfile.mkdtemp(prefix="tokrate-capacity-"))
    spec = load_spec(
        None,
        {
            "load.capacity": {"start": 4, "max_level": MAX_LEVEL, "verify": True},
            f"slo.{w.metric}": w.limit_model_s / scale,
            "prompts.max_tokens": w.output_tokens,
            "prompts.synthetic": {"count": 8, "input_tokens": w.input_tokens},
            "simulator.time_scale": scale,
            "output.dir": str(out),
            "output.report": False,
            **(
                {"models": [{"endpoint": "sim", "name": m} for m in args.model]}
                if args.model
                else {}
            ),
        },
    )
    print(f"commit {_commit()}, {time.strftime('%Y-%m-%d %H:%M %Z')}")
    print(f"before: {_load()}")
    started = time.monotonic()
    result = run_benchmark(spec)
    took = time.monotonic() - started
    print(f"after:  {_load()}; {took:.0f} s; run folder {result.run_dir}")
    _table(result.run_dir, w, scale)


def _table(run_dir: Path, w: Workload, scale: float) -> None:
    run = load_run(run_dir)
    assert run.summary is not None and run.summary.capacity is not None
    input_tokens = int(run.records["input_tokens"].median() or 0)
    timings = build_state(SimConfig()).timings
    limit_ms = w.limit_model_s * 1000
    print(
        f"\nclosed loop, {w.metric} SLO {limit_ms:g} ms model ({limit_ms / scale:g} ms at"
        f" time_scale {scale:g}), {input_tokens} prompt tokens (median), {w.output_tokens}"
        " out, goodput 90%\n"
    )
    head = (
        "tier",
        "found",
        "verdict",
        "sim lockstep",
        "staggered",
        "found/sim",
        "verify c / 2c",
        "probes",
        "req",
        "s",
    )
    print("{:<9} {:>6} {:<9} {:>12} {:>9} {:>9} {:<24} {:>6} {:>5} {:>5}".format(*head))
    slo = {w.metric: w.limit_model_s}
    for t in run.summary.capacity.targets:
        # The replay scans every level: up to twice the found capacity is enough to
        # compare (a replay answer beyond it prints as "≥").
        top = min(MAX_LEVEL, 2 * int(t.capacity or 0) + 8)
        answers = [
            closed_loop_capacity(
                timings[t.model],
                input_tokens,
                w.output_tokens,
                slo,
                max_level=top,
                staggered=staggered,
            )
            for staggered in (False, True)
        ]
        lock, stag = (f"≥{a}" if a == top else str(a) for a in answers)
        verify = " / ".join(f"{p.level:g} {p.verdict}" for p in t.probes if p.phase == "verify")
        found = "—" if t.capacity is None else f"{t.capacity:g}"
        ratio = "—"
        if t.capacity is not None and answers[0] == answers[1] and answers[0]:
            ratio = f"{t.capacity / answers[0] - 1:+.1%}"
        print(
            f"{t.model:<9} {found:>6} {t.verdict:<9} {lock:>12} {stag:>9} {ratio:>9}"
            f" {verify or '—':<24} {len(t.probes):>6} {t.requests:>5} {t.duration_s:>5.0f}"
        )


if __name__ == "__main__":
    main()
