"""Benchmark 1 (issue 7): how exact are the client's timestamps?

Simulator in its own process, fixed TTFT 200 ms / ITL 20 ms, 128 tokens; lag = client
arrival stamp - simulator write time (truth log) of the first and last token.

    python benchmarks/client_accuracy.py [--streams 1,32,256,1024] [--kinds fast,httpx,openai,naive]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from _client_common import KINDS, Sim, lags_ms, run_load, stats


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--streams", default="1,32,256,1024")
    ap.add_argument("--kinds", default=",".join(KINDS))
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--per-stream", type=int, default=1)
    a = ap.parse_args()
    print(
        "| client | streams | ok/total | mean TTFT ms | first-token lag ms mean/p50/p99 "
        "| last-token lag ms mean/p50/p99 | loop lag p99/max ms |"
    )
    print("|---|---|---|---|---|---|---|")
    for streams in (int(s) for s in a.streams.split(",")):
        for kind in a.kinds.split(","):
            sim = Sim(ttft_ms=200, itl_ms=20, tokens=a.tokens)
            try:
                load = run_load(kind, sim.base_url, streams, a.per_stream, a.tokens)
                first, last = lags_ms(load, sim.truth())
            finally:
                sim.close()
            total = streams * a.per_stream
            ttft = statistics.fmean(load.ttft_s) * 1e3 if load.ttft_s else float("nan")
            print(
                f"| {kind} | {streams} | {total - load.errors}/{total} | {ttft:.1f} | "
                f"{stats(first)} | {stats(last)} | {load.lag_p99_ms:.1f}/{load.lag_max_ms:.0f}"
                f"{' WARNED' if load.lag_warned else ''} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
