"""Benchmark 2 (issue 7): client CPU per streamed token, and memory.

CPU = user + sys of this process (getrusage) while streaming; the simulator runs in
its own process. Rows: 64 and 512 streams at 5 ms ITL (one token per read), 256
streams at 20 ms ITL, and zero delay (many tokens per read).

    python benchmarks/client_cost.py [--kinds ...] [--tokens 128]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from _client_common import KINDS, Sim, run_load


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--kinds", default=",".join(KINDS))
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--cases", default="64:5,512:5,256:20,64:0")
    a = ap.parse_args()
    print(
        "| client | streams | ITL ms | tokens | errors | CPU s / 100k tokens | µs / token "
        "| peak RSS MB | RSS KB / in-flight stream |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for case in a.cases.split(","):
        streams, itl = (float(x) for x in case.split(":"))
        for kind in a.kinds.split(","):
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


if __name__ == "__main__":
    main()
