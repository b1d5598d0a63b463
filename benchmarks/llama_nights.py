"""The nightly gate against real llama-servers: false alarms on unchanged nights, and a
slower server caught (issue 40).

Run by hand (not a test; ``.ci/real-servers-setup`` first)::

    cpuslot .venv/bin/python benchmarks/llama_nights.py [--first 5] [--nights 10] [--requests 200] [--busy 0|2]

Starts two llama-servers the way the ``real_server`` tests do (one compute thread, 4
slots): rand-24m as target ``small`` and rand-91m as target ``large``, and keeps them
for every unchanged night, so their speed drifts as a real host's does. Each night runs
as the nightly recipe runs it: ``tokrate run -c CONFIG --baseline latest-good --quiet
--no-report`` into one reports folder (CONFIG: both servers as endpoints, c=4,
``--requests`` per target, 128-token prompts, 32-token answers with ``ignore_eos``).

- ``--first`` nights build the history (the gate fits the night-to-night noise once it
  has 5), then ``--nights`` unchanged nights: a false alarm is one that exits 1;
- then one slowed night: ``large`` served by rand-265m instead (the same name and
  prompts, about 2-3x the time per token: the printed ratio is of tpot p50, tonight
  against the unchanged nights' median). It should exit 1 naming ``large``.

Prints every night's exit code, its ``--quiet`` lines (regressed and inconclusive
metrics, the smallest change the history lets the gate detect) and the 1-minute load
before it; then the counts, the commit and ``uptime``. ``--busy K`` adds K spinning
processes (stopped by pid at the end).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from _background_load import busy_processes  # noqa: E402
from real_servers import models as model_files  # noqa: E402
from real_servers.servers import Server, llama_server  # noqa: E402

TOKRATE = [sys.executable, "-m", "tokrate"]
SHAPES = {s.name: s for s in model_files.GGUF_SHAPES}


def config_text(urls: dict[str, str], requests: int) -> str:
    endpoints = "".join(
        f'[[endpoint]]\nname = "{name}"\nbase_url = "{url}"\n\n' for name, url in urls.items()
    )
    models = "".join(
        f'[[model]]\nendpoint = "{name}"\nname = "{name}"\nextra_body = {{ cache_prompt = false }}\n\n'
        for name in urls
    )
    return (
        endpoints + models + f'[load]\nmode = "closed"\nconcurrency = [4]\nrequests = {requests}\n'
        "warmup_requests = 4\nignore_eos = true\nseed = 0\n\n"
        "[prompts.synthetic]\ncount = 64\ninput_tokens = 128\noutput_tokens = 32\nseed = 0\n"
    )


def night(reports: Path, urls: dict[str, str], run_id: str, requests: int) -> tuple[int, list[str]]:
    """One night as the recipe runs it: (exit code, its --quiet lines)."""
    config = reports.parent / "night.toml"
    config.write_text(config_text(urls, requests))
    done = subprocess.run(
        [
            *TOKRATE,
            "run",
            "-c",
            str(config),
            "--output-dir",
            str(reports),
            "--run-id",
            run_id,
            "--baseline",
            "latest-good",
            "--quiet",
            "--no-report",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode not in (0, 1, 3):
        sys.stderr.write(done.stderr)
        raise SystemExit(f"night {run_id} failed with exit code {done.returncode}")
    said = ("regressed: ", "inconclusive: ", "on these ", "baseline ")
    return done.returncode, [ln for ln in done.stderr.splitlines() if ln.startswith(said)]


def tpot_p50(run_dir: Path, model: str) -> float:
    doc = json.loads((run_dir / "summary.json").read_text())
    return next(float(g["tpot_s"]["p50"]) for g in doc["groups"] if g["model"] == model)


def commit() -> str:
    out = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
        capture_output=True,
        text=True,
        check=False,
    )
    return out.stdout.strip()


def uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True, check=False).stdout.strip()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--first", type=int, default=5, help="nights that build the history")
    ap.add_argument("--nights", type=int, default=10, help="unchanged nights judged after them")
    ap.add_argument("--requests", type=int, default=200, help="requests per target and night")
    ap.add_argument("--busy", type=int, default=0, help="busy processes started for the run")
    ap.add_argument("--keep", type=Path, help="keep every run folder under this folder")
    args = ap.parse_args()
    started = time.perf_counter()
    print(f"commit {commit()}; start: {uptime()}")
    with contextlib.ExitStack() as stack:
        work = args.keep or Path(stack.enter_context(tempfile.TemporaryDirectory()))
        work.mkdir(parents=True, exist_ok=True)
        reports = work / "reports"
        stack.enter_context(busy_processes(args.busy))

        def serve(shape: str, alias: str) -> Server:
            ctx = 4 * (128 + 64)
            log = work / f"{alias}-{shape}.log"
            return stack.enter_context(
                llama_server(model_files.gguf_model(SHAPES[shape]), alias, log, context=ctx)
            )

        urls = {
            "small": serve("rand-24m", "small").base_url,
            "large": serve("rand-91m", "large").base_url,
        }
        codes: list[int] = []
        for i in range(args.first + args.nights):
            load = os.getloadavg()[0]
            code, lines = night(reports, urls, f"night-{i:02d}", args.requests)
            judged = i >= args.first
            codes += [code] if judged else []
            tag = "unchanged" if judged else "history"
            print(f"night {i:02d} ({tag}): exit {code} (load {load:.2f})", flush=True)
            for line in lines:
                print(f"    {line}", flush=True)
        slow_url = serve("rand-265m", "large").base_url
        load = os.getloadavg()[0]
        code, lines = night(
            reports, {"small": urls["small"], "large": slow_url}, "slowed", args.requests
        )
        usual = statistics.median(
            tpot_p50(reports / f"night-{i:02d}", "large") for i in range(args.first + args.nights)
        )
        ratio = tpot_p50(reports / "slowed", "large") / usual
        print(f"slowed (large: rand-265m): exit {code}, tpot p50 x{ratio:.2f} (load {load:.2f})")
        for line in lines:
            print(f"    {line}")
        caught = code == 1 and any(ln.startswith("regressed: large") for ln in lines)
    print(f"\nend: {uptime()}; wall time {time.perf_counter() - started:.0f} s")
    print("\n| unchanged nights that exit 1 | exit 3 | slower server caught | its tpot p50 ratio |")
    print("|---:|---:|---|---:|")
    print(
        f"| **{sum(c == 1 for c in codes)}/{len(codes)}** | {sum(c == 3 for c in codes)}/{len(codes)}"
        f" | {'yes' if caught else 'no'} | x{ratio:.2f} |"
    )


if __name__ == "__main__":
    main()
