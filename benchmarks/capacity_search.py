"""Capacity search over the simulator's six default tiers vs the simulator's own answer.

Run by hand (not a test): ``python benchmarks/capacity_search.py [--time-scale 2]``.
One ``tokrate run --capacity`` over the embedded simulator (closed loop, every default
tier, one after another), with long prompts so each joining request's prefill
lengthens the decode steps of the batch and the TPOT SLO binds at a handful to a few
dozen streams; then :func:`tokrate.sim.capacity.closed_loop_capacity` replays the
simulator's batching engine for the same prompt length (as the simulator counted it)
and SLO. Prints one row per tier (found, the simulator's answer, the difference, the
verification probes at the capacity and twice it) and the machine load.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

from tokrate.run import run_benchmark
from tokrate.sim.capacity import closed_loop_capacity
from tokrate.sim.server import SimConfig, build_state
from tokrate.spec import load_spec
from tokrate.store import load_run

OUTPUT_TOKENS = 32
MAX_LEVEL = 64


def _load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.2f}, {five:.2f}, {fifteen:.2f} on {os.cpu_count()} CPUs"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--time-scale", type=float, default=2.0)
    ap.add_argument("--tpot-ms", type=float, default=100.0, help="TPOT SLO in model ms")
    ap.add_argument("--input-tokens", type=int, default=2000)
    ap.add_argument("-m", "--model", action="append", help="only these tiers (repeatable)")
    ap.add_argument("--from", dest="run_dir", type=Path, help="print the table of a finished run")
    args = ap.parse_args()
    scale = args.time_scale
    slo_s = args.tpot_ms / 1000 / scale
    if args.run_dir is not None:
        _table(args.run_dir, args.tpot_ms, scale)
        return
    out = Path(tempfile.mkdtemp(prefix="tokrate-capacity-"))
    spec = load_spec(
        None,
        {
            "load.capacity": {"start": 2, "max_level": MAX_LEVEL, "verify": True},
            "slo.tpot_s": slo_s,
            "prompts.max_tokens": OUTPUT_TOKENS,
            "prompts.synthetic": {"count": 8, "input_tokens": args.input_tokens},
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
    print(f"before: {_load()}")
    started = time.monotonic()
    result = run_benchmark(spec)
    took = time.monotonic() - started
    print(f"after:  {_load()}; {took:.0f} s; run folder {result.run_dir}")
    _table(result.run_dir, args.tpot_ms, scale)


def _table(run_dir: Path, tpot_ms: float, scale: float) -> None:
    """Found capacity per tier next to the simulator's answer, lockstep and staggered
    (tokrate.sim.capacity): identical closed-loop requests that start together stay in
    lockstep (their prefills coincide); jitter spreads them (each join's prefill then
    stalls the whole batch once more), so a measured run lies between the two."""
    run = load_run(run_dir)
    assert run.summary is not None and run.summary.capacity is not None
    input_tokens = int(run.records["input_tokens"].median() or 0)
    timings = build_state(SimConfig()).timings
    print(
        f"\nclosed loop, TPOT SLO {tpot_ms:g} ms model ({tpot_ms / scale:g} ms at time_scale"
        f" {scale:g}), {input_tokens} prompt tokens (median), {OUTPUT_TOKENS} out, goodput 90%\n"
    )
    head = ("tier", "found", "verdict", "sim lockstep", "staggered", "verify c / 2c", "probes",
            "req", "s")  # fmt: skip
    print("{:<9} {:>6} {:<9} {:>12} {:>9} {:<15} {:>6} {:>5} {:>5}".format(*head))
    slo = {"tpot_s": tpot_ms / 1000}
    for t in run.summary.capacity.targets:
        answers = [
            closed_loop_capacity(timings[t.model], input_tokens, OUTPUT_TOKENS, slo,
                                 max_level=MAX_LEVEL, staggered=staggered)
            for staggered in (False, True)
        ]  # fmt: skip
        lock, stag = (f"≥{a}" if a == MAX_LEVEL else str(a) for a in answers)
        verify = " / ".join(p.verdict for p in t.probes if p.phase == "verify") or "—"
        found = "—" if t.capacity is None else f"{t.capacity:g}"
        print(
            f"{t.model:<9} {found:>6} {t.verdict:<9} {lock:>12} {stag:>9} {verify:<15}"
            f" {len(t.probes):>6} {t.requests:>5} {t.duration_s:>5.0f}"
        )


if __name__ == "__main__":
    main()
