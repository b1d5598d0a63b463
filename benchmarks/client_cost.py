"""The client's own cost, this checkout against a git ref, A/B/A/B (issue 42).

Run it before submitting any change to tokrate/client/ or tokrate/load/: it says
whether the change made the measuring process cheaper, dearer or neither, with an
interval, on the same machine in the same minutes.

Two cases, each against ``tokrate sim`` from this checkout in its own process:

- ``zero``: zero delay (TTFT and ITL 0), 64 streams, 512 tokens per answer: many
  tokens per read, the per-chunk path;
- ``256``: 256 streams, TTFT 50 ms, ITL 20 ms, 64 tokens: one token per read, the
  per-read and per-request paths.

Per case, a plain ``tokrate run`` (closed loop, everything measured, default workers)
of the ref (A) and of this checkout (B), alternately A, B, A, B, ... (``--pairs`` of
each), so a machine that gets busier or quieter meanwhile moves both alike. Each run's
load (first send to last end) is cut into ``--slices`` equal slices; each slice is one
sample of the CPU (user + sys of the run's process and its workers, /proc) per token
received in it (µs). The ratio B / A of the mean with its 95% interval is tokrate's own
comparison of two runs (:func:`tokrate.analysis.stats.relative_change_ci`, the
interval every ``tokrate compare`` row has; blocks of one slice): "faster" or "slower"
when the interval excludes 1, else "not significant". Also per side: tokens per client
CPU-second (the ceiling with a core to itself) and the largest peak RSS.

    .venv/bin/python benchmarks/client_cost.py [--ref REF] [--pairs 2] [--cases zero,256]

REF defaults to the last commit before the change: the merge base with main (HEAD's
parent when the branch is main itself and clean). ``--table`` prints the per-client
cost table of issue 7 instead (``--kinds``, ``--cases STREAMS:ITL_MS,...``).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np
from _tree_runs import ROOT, describe_tree, load1, run_tree, tree_for

from tokrate.analysis.stats import relative_change_ci
from tokrate.sim.model import Tier
from tokrate.sim.server import SimConfig, spawn_simulator


@dataclass(frozen=True)
class Case:
    name: str
    streams: int
    ttft_ms: float
    itl_ms: float
    tokens: int
    rounds: int


CASES = {
    "zero": Case("zero", 64, 0.0, 0.0, 512, 40),
    "256": Case("256", 256, 50.0, 20.0, 64, 4),
}


@dataclass
class Side:
    """Every slice of every run of one tree in one case."""

    us_per_token: list[float]
    tokens_per_cpu_s: list[float]
    peak_mb: list[float]


def default_ref() -> str:
    """The last commit before the change (see the module docstring)."""

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", "-C", str(ROOT), *args], capture_output=True, text=True, check=True
        ).stdout.strip()

    head = git("rev-parse", "HEAD")
    base = git("merge-base", "HEAD", "main")
    dirty = bool(git("status", "--porcelain", "--untracked-files=no"))
    if base == head and not dirty:
        return git("rev-parse", "HEAD~1")
    return base


def one_run(tree: Path, case: Case, slices: int) -> tuple[list[float], float, float]:
    """One ``tokrate run`` of ``tree``: µs per token of each slice of its load, tokens
    per CPU-second over the whole load, and the largest peak RSS (MB)."""
    tier = Tier(
        "fixed",
        7.0,
        7.0,
        fixed_ttft_ms=case.ttft_ms,
        fixed_itl_ms=case.itl_ms,
        output_tokens_min=case.tokens,
        output_tokens_max=case.tokens,
    )
    args = [
        "-m",
        "fixed",
        "--concurrency",
        str(case.streams),
        "--requests",
        str(case.streams * case.rounds),
        "--max-tokens",
        str(case.tokens),
    ]
    config = SimConfig(tiers=(tier,), time_scale=1.0)
    with (
        tempfile.TemporaryDirectory(prefix="tokrate-cost-") as tmp,
        spawn_simulator(config) as (
            url,
            _pid,
        ),
    ):
        run = run_tree(tree, url, args, Path(tmp))
    stamps = sorted(
        r["t0_ns"] + round(offset * 1e9)
        for r in run.records
        if r["status"] == "ok"
        for offset in r["chunk_offsets_s"]
    )
    start = min(r["t0_ns"] for r in run.records)
    end = max(r["t0_ns"] + round((r.get("e2e_s") or 0.0) * 1e9) for r in run.records)
    edges = np.linspace(start, end, slices + 1)
    counts, _ = np.histogram(stamps, bins=edges)
    out = []
    for i in range(slices):
        cpu = run.procs.cpu_between(int(edges[i]), int(edges[i + 1]))
        if counts[i]:
            out.append(cpu / counts[i] * 1e6)
    whole = run.procs.cpu_between(start, end)
    return out, len(stamps) / whole if whole else float("nan"), run.procs.peak_mb


def guard(a: argparse.Namespace) -> None:
    ref = a.ref or default_ref()
    trees = {"A": tree_for(ref), "B": tree_for(None)}
    print(f"A: {describe_tree(trees['A'])}")
    print(f"B: {describe_tree(trees['B'])}")
    print(
        "| case | A µs / token | B µs / token | B / A [95% interval] | verdict |"
        " A / B tokens per CPU-s | A / B peak RSS MB | slices | load 1-min |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for name in a.cases.split(","):
        case = CASES[name]
        sides = {k: Side([], [], []) for k in trees}
        before = load1()
        for _ in range(a.pairs):
            for key in ("A", "B"):
                samples, per_cpu_s, peak = one_run(trees[key], case, a.slices)
                sides[key].us_per_token += samples
                sides[key].tokens_per_cpu_s.append(per_cpu_s)
                sides[key].peak_mb.append(peak)
        va = np.array(sides["A"].us_per_token)
        vb = np.array(sides["B"].us_per_token)
        lo, hi = relative_change_ci(
            va, vb, None, (1, 1), confidence=0.95, resamples=4000, seed=0, key=name
        )
        ratio = vb.mean() / va.mean()
        if lo > 0:
            verdict = "slower"
        elif hi < 0:
            verdict = "faster"
        else:
            verdict = "not significant"
        ceiling = "{:,.0f} / {:,.0f}".format(
            statistics.fmean(sides["A"].tokens_per_cpu_s),
            statistics.fmean(sides["B"].tokens_per_cpu_s),
        )
        peaks = f"{max(sides['A'].peak_mb):.0f} / {max(sides['B'].peak_mb):.0f}"
        print(
            f"| {name} | {va.mean():.2f} | {vb.mean():.2f} |"
            f" **{ratio:.3f}x** [{1 + lo:.3f}, {1 + hi:.3f}] | {verdict} | {ceiling} |"
            f" {peaks} | {va.size} + {vb.size} | {before:.2f} → {load1():.2f} |",
            flush=True,
        )


def table(a: argparse.Namespace) -> None:
    """The per-client cost table of issue 7 (client CPU per token, RSS per stream)."""
    from _client_common import KINDS, Sim, run_load

    kinds = a.kinds or ",".join(KINDS)
    print(
        "| client | streams | ITL ms | tokens | errors | CPU s / 100k tokens | µs / token "
        "| peak RSS MB | RSS KB / in-flight stream |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for spec in a.table_cases.split(","):
        streams, itl = (float(x) for x in spec.split(":"))
        for kind in kinds.split(","):
            sim = Sim(ttft_ms=0 if itl == 0 else 50, itl_ms=itl, tokens=a.tokens)
            try:
                per = 4 if itl == 0 else 1
                load = run_load(kind, sim.base_url, int(streams), per, a.tokens)
            finally:
                sim.close()
            us = load.cpu_s / max(1, load.tokens) * 1e6
            print(
                f"| {kind} | {int(streams)} | {itl:g} | {load.tokens} | {load.errors} | "
                f"{us / 10:.2f} | {us:.1f} | {load.peak_rss_mb:.0f} | "
                f"{load.rss_per_stream_kb:.1f} |",
                flush=True,
            )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ref", help="the tree to compare with (default: before the change)")
    ap.add_argument("--pairs", type=int, default=2, help="runs of each tree per case")
    ap.add_argument("--slices", type=int, default=8, help="samples per run")
    ap.add_argument("--cases", default="zero,256", help="of: " + ", ".join(CASES))
    ap.add_argument("--table", action="store_true", help="the per-client table instead")
    ap.add_argument("--kinds", help="--table: client kinds (default all)")
    ap.add_argument(
        "--table-cases", default="64:5,512:5,256:20,64:0", help="--table: STREAMS:ITL_MS,..."
    )
    ap.add_argument("--tokens", type=int, default=128, help="--table: tokens per answer")
    a = ap.parse_args()
    if a.table:
        table(a)
    else:
        guard(a)


if __name__ == "__main__":
    main()
