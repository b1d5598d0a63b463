"""Benchmark 3 (issue 7): the most streamed tokens/s one client process reaches.

Zero delays, 512 tokens per response, N concurrent streams, simulator in its own
process (on a 2-core machine it competes for the same cores: the figure is a floor).

    python benchmarks/client_ceiling.py [--streams 64] [--requests 4]
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
    ap.add_argument("--streams", type=int, default=64)
    ap.add_argument("--requests", type=int, default=4, help="per stream")
    ap.add_argument("--tokens", type=int, default=512)
    a = ap.parse_args()
    print(
        "| client | streams | tokens | wall s | tokens/s | client CPU s | client-bound tokens/s "
        "| loop lag p99/max ms |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for kind in a.kinds.split(","):
        sim = Sim(ttft_ms=0, itl_ms=0, tokens=a.tokens)
        try:
            load = run_load(kind, sim.base_url, a.streams, a.requests, a.tokens)
        finally:
            sim.close()
        # Client-bound: tokens per CPU-second of the client alone (the ceiling if the
        # server were infinitely fast and the client had a core to itself).
        print(
            f"| {kind} | {a.streams} | {load.tokens} | {load.wall_s:.2f} | "
            f"{load.tokens / load.wall_s:,.0f} | {load.cpu_s:.2f} | "
            f"{load.tokens / max(load.cpu_s, 1e-9):,.0f} | {load.lag_p99_ms:.1f}/{load.lag_max_ms:.0f}"
            f"{' WARNED' if load.lag_warned else ''} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
