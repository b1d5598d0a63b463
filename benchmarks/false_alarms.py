"""False alarms and detections of the nightly gate (`tokrate run --baseline latest-good`).

Run by hand (not a test)::

    .venv/bin/python benchmarks/false_alarms.py [--pairs 20] [--busy 0|2] [--config FILE]

Nights are run exactly as docs/regressions.md tells users to run them: ``tokrate run -c
CONFIG --baseline latest-good --quiet`` as a subprocess, into one reports folder that
keeps every night (so ``latest-good`` and the history it lives in grow as they would in
CI). The only differences from the recipe: each night's server is a ``tokrate sim``
process this script starts (an ``[[endpoint]]`` named ``sim`` put in front of the
config's text points its models at it), with the time
scale of the config's ``[simulator]`` table and a seed of its own per night (a provider
is not deterministic either), and ``--no-report`` (the HTML report is built after the
load and does not enter the verdict; it would double the run time).

The sequence, after night 0 (no baseline yet: it becomes latest-good):

- N *identical* nights: the unchanged simulator. A false alarm is a night that exits 1.
- after each identical night, one night with a 20% decode slowdown of one tier
  (``tokrate sim --efficiency TIER=0.64``: 0.8 x 0.8, so its tokens/s drop by 20%) and
  one with that tier's TTFT doubled (``--faults TIER:slow_first_byte=1:seconds=X``:
  every request of that tier waits X before the engine sees it, X = the tier's median
  TTFT in night 0, so its median TTFT doubles), and one with that TTFT doubled *and*
  1% of that tier's requests failing with HTTP 500 (``--faults
  TIER:http_500=0.01,TIER:slow_first_byte=0.99:seconds=X``: a slower night that also
  fails must still be caught, its percentiles judged on the ok requests). A detection is
  a slowed night that exits 1
  with a regressed row of the slowed tier; "other tier" counts slowed nights that also
  flagged a tier that was not slowed. A slowed night is judged and then moved out of
  the reports folder, and latest-good is put back where it was: in a real history a
  regression is rare, and a slowed night must not become the baseline or widen the
  run-to-run spread fitted to the history.

``--busy K`` starts K processes that spin on a core for the whole benchmark (stopped
by their pid at the end, also on Ctrl-C): the loaded setting of the issue is
``--busy 2`` on the 2-core machine. The load average is sampled before every night.

Prints one table per setting: false alarms, detections, inconclusive nights (exit 3)
and, per metric, how often its row was regressed; then the load, the commit and the
wall time. ``--keep DIR`` keeps every run folder there.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from _background_load import busy_processes

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_CONFIG = ROOT / "examples" / "nightly.toml"
TOKRATE = [sys.executable, "-m", "tokrate"]
#: Efficiency of the slowed tier: 0.8 (the simulator's default) x 0.8.
SLOW_EFFICIENCY = 0.64
LATEST_GOOD = "latest-good"
#: The kinds of slowed nights, in table order.
SLOWED = ("decode", "ttft", "ttft_err")


@dataclass
class Night:
    """One judged night: its exit code and the (model, metric) rows it called regressed."""

    kind: str
    code: int
    regressed: set[tuple[str, str]]
    inconclusive: set[tuple[str, str]]
    load: float
    seconds: float
    confirmed: int = 0


@dataclass
class Tally:
    nights: list[Night] = field(default_factory=list)

    def add(self, night: Night) -> None:
        self.nights.append(night)

    def of(self, kind: str) -> list[Night]:
        return [n for n in self.nights if n.kind == kind]


@contextlib.contextmanager
def simulator(time_scale: float, seed: int, extra: list[str]) -> Iterator[str]:
    """A ``tokrate sim`` process; yields its base URL, stops it by pid on exit."""
    argv = [*TOKRATE, "sim", "--time-scale", f"{time_scale:g}", "--seed", str(seed), *extra]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().strip()
        if not url.startswith("http"):
            raise SystemExit(f"tokrate sim did not start: {argv}")
        yield url
    finally:
        os.kill(proc.pid, signal.SIGTERM)
        proc.wait()


def run_night(
    reports: Path, config: Path, run_id: str, time_scale: float, seed: int, sim_extra: list[str]
) -> tuple[int, float]:
    """One night as the recipe runs it; returns (exit code, seconds). The config's
    models go to the simulator through an ``[[endpoint]]`` put in front of its text."""
    with simulator(time_scale, seed, sim_extra) as url:
        night_config = reports.parent / "night.toml"
        endpoint = f'[[endpoint]]\nname = "sim"\nbase_url = "{url}"\n\n'
        night_config.write_text(endpoint + config.read_text())
        started = time.perf_counter()
        done = subprocess.run(
            [
                *TOKRATE,
                "run",
                "-c",
                str(night_config),
                "--output-dir",
                str(reports),
                "--run-id",
                run_id,
                "--baseline",
                LATEST_GOOD,
                "--quiet",
                "--no-report",
            ],
            capture_output=True,
            text=True,
            check=False,
        )
        seconds = time.perf_counter() - started
    if done.returncode not in (0, 1, 3):
        sys.stderr.write(done.stderr)
        raise SystemExit(f"night {run_id} failed with exit code {done.returncode}")
    return done.returncode, seconds


def verdict_rows(run_dir: Path, verdict: str) -> set[tuple[str, str]]:
    doc = json.loads((run_dir / "comparison.json").read_text())
    return {(r["model"], r["metric"]) for r in doc.get("results", []) if r["verdict"] == verdict}


def confirmations(run_dir: Path) -> int:
    return 1 if (run_dir / "confirm" / "run.json").is_file() else 0


def ttft_p50(run_dir: Path, model: str) -> float:
    doc = json.loads((run_dir / "summary.json").read_text())
    for g in doc["groups"]:
        if g["model"] == model:
            return float(g["ttft_s"]["p50"])
    raise SystemExit(f"{run_dir}: no group for {model}")


def judge(
    reports: Path,
    aside: Path,
    config: Path,
    run_id: str,
    kind: str,
    scale: float,
    seed: int,
    sim_extra: list[str],
) -> Night:
    """Run one night; a slowed night is moved aside and latest-good put back after."""
    pointer = reports / LATEST_GOOD
    before = pointer.read_text() if pointer.is_file() else None
    load = os.getloadavg()[0]
    code, seconds = run_night(reports, config, run_id, scale, seed, sim_extra)
    run_dir = reports / run_id
    night = Night(
        kind,
        code,
        verdict_rows(run_dir, "regressed"),
        verdict_rows(run_dir, "inconclusive"),
        load,
        seconds,
        confirmations(run_dir),
    )
    if kind in SLOWED:
        shutil.move(str(run_dir), str(aside / run_id))
        if before is not None:
            pointer.write_text(before)
    return night


def models_of(config: Path) -> list[str]:
    data = tomllib.loads(config.read_text())
    return [m["name"] for m in data.get("model", [])]


def time_scale_of(config: Path) -> float:
    data = tomllib.loads(config.read_text())
    return float(data.get("simulator", {}).get("time_scale", 1.0))


def commit() -> str:
    done = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
        capture_output=True,
        text=True,
        check=False,
    )
    dirty = subprocess.run(
        ["git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=no"],
        capture_output=True,
        text=True,
        check=False,
    )
    return done.stdout.strip() + (" (uncommitted changes)" if dirty.stdout.strip() else "")


def uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True, check=False).stdout.strip()


def print_table(tally: Tally, pairs: int, decode_tier: str, ttft_tier: str, busy: int) -> None:
    same = tally.of("identical")
    slow = {kind: tally.of(kind) for kind in SLOWED}
    tier = {"decode": decode_tier, "ttft": ttft_tier, "ttft_err": ttft_tier}

    def detected(n: Night, t: str) -> bool:
        return n.code == 1 and any(m == t for m, _ in n.regressed)

    def other(n: Night, t: str) -> bool:
        return any(m != t for m, _ in n.regressed)

    alarms = sum(n.code == 1 for n in same)
    print(f"\n### {busy} busy processes: {pairs} identical nights, {pairs} of each slowed kind\n")
    print(
        "| nights | exit 1 | exit 3 (inconclusive only) | slowed tier flagged | other tier flagged | confirmation passes |"
    )
    print("|---|---:|---:|---:|---:|---:|")
    print(
        f"| identical | **{alarms}/{len(same)}** (false alarms) | "
        f"{sum(n.code == 3 for n in same)}/{len(same)} | – | – | "
        f"{sum(n.confirmed for n in same)} |"
    )
    names = {
        "decode": f"{decode_tier} decode -20%",
        "ttft": f"{ttft_tier} TTFT x2",
        "ttft_err": f"{ttft_tier} TTFT x2 + 1% HTTP 500",
    }
    for kind, nights in slow.items():
        t = tier[kind]
        print(
            f"| {names[kind]} | {sum(n.code == 1 for n in nights)}/{len(nights)} | "
            f"{sum(n.code == 3 for n in nights)}/{len(nights)} | "
            f"**{sum(detected(n, t) for n in nights)}/{len(nights)}** | "
            f"{sum(other(n, t) for n in nights)}/{len(nights)} | "
            f"{sum(n.confirmed for n in nights)} |"
        )
    metrics = sorted({m for n in tally.nights for _, m in n.regressed | n.inconclusive})
    if metrics:
        print("\nrows regressed (inconclusive), per metric:\n")
        print(
            "| metric | identical: any tier | "
            + " | ".join(f"{names[k]}: {tier[k]} / other" for k in slow)
            + " |"
        )
        print("|---|---:|" + "---:|" * len(slow))
        for metric in metrics:
            cells = [
                f"{sum(any(x == metric for _, x in n.regressed) for n in same)}"
                f" ({sum(any(x == metric for _, x in n.inconclusive) for n in same)})"
            ]
            for kind, nights in slow.items():
                t = tier[kind]
                mine = sum((t, metric) in n.regressed for n in nights)
                theirs = sum(any(m != t and x == metric for m, x in n.regressed) for n in nights)
                cells.append(f"{mine} / {theirs}")
            print(f"| {metric} | " + " | ".join(cells) + " |")
    loads = [n.load for n in tally.nights]
    secs = [n.seconds for n in tally.nights]
    print(
        f"\n1-minute load average before each night: min {min(loads):.2f}, median "
        f"{statistics.median(loads):.2f}, max {max(loads):.2f}; one night "
        f"{statistics.median(secs):.1f} s (median, run command only)"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--pairs", type=int, default=20, help="identical nights, and slowed of each kind"
    )
    ap.add_argument("--busy", type=int, default=0, help="busy processes started for the run")
    ap.add_argument("--config", type=Path, default=DEFAULT_CONFIG)
    ap.add_argument("--decode-tier", help="tier slowed by 20%% (default: the config's last model)")
    ap.add_argument("--ttft-tier", help="tier whose TTFT doubles (default: the last model)")
    ap.add_argument("--keep", type=Path, help="keep every run folder under this folder")
    args = ap.parse_args()
    models = models_of(args.config)
    decode_tier = args.decode_tier or models[-1]
    ttft_tier = args.ttft_tier or models[-1]
    scale = time_scale_of(args.config)
    started = time.perf_counter()
    print(f"commit {commit()}; config {args.config}; {len(models)} models; time scale {scale:g}")
    print(f"start: {uptime()}")
    with contextlib.ExitStack() as stack:
        if args.keep is not None:
            work = args.keep
            work.mkdir(parents=True, exist_ok=True)
        else:
            work = Path(stack.enter_context(tempfile.TemporaryDirectory()))
        reports, aside = work / "reports", work / "slowed"
        aside.mkdir(parents=True, exist_ok=True)
        pids = stack.enter_context(busy_processes(args.busy))
        if pids:
            print(f"busy processes: pids {', '.join(map(str, pids))}")
        tally = Tally()
        first = judge(reports, aside, args.config, "night-000", "first", scale, 0, [])
        tally.add(first)
        delay = ttft_p50(reports / "night-000", ttft_tier)
        slowdowns = {
            "decode": ["--efficiency", f"{decode_tier}={SLOW_EFFICIENCY}"],
            "ttft": ["--faults", f"{ttft_tier}:slow_first_byte=1:seconds={delay:.4f}"],
            "ttft_err": [
                "--faults",
                f"{ttft_tier}:http_500=0.01,{ttft_tier}:slow_first_byte=0.99:seconds={delay:.4f}",
            ],
        }
        print(f"TTFT x2: {ttft_tier} requests wait {delay * 1000:.1f} ms before the engine")
        for i in range(1, args.pairs + 1):
            night = judge(reports, aside, args.config, f"night-{i:03d}", "identical", scale, i, [])
            tally.add(night)
            line = [f"night {i:3d}: exit {night.code}"]
            for kind, extra in slowdowns.items():
                n = judge(
                    reports, aside, args.config, f"{kind}-{i:03d}", kind, scale, 1000 + i, extra
                )
                tally.add(n)
                line.append(f"{kind} exit {n.code}")
            print(", ".join(line) + f" (load {night.load:.2f})", flush=True)
    print(f"end: {uptime()}")
    print_table(tally, args.pairs, decode_tier, ttft_tier, args.busy)
    print(f"\nwall time {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
