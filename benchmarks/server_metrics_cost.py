"""What one scrape costs the measuring process: parsing a /metrics page.

The sampler parses each page with prometheus_client's parser in its own thread; in the
default in-process backend that thread shares the interpreter lock with the worker's
event loop, so the parse time per scrape is the most it can hold the load back (once
per ``metrics_interval_s``). Pages: the simulator's (6 tiers), one shaped like vLLM's
(gauges, counters and 20-bucket histograms for one model) and one ten times that.

    python benchmarks/server_metrics_cost.py
"""

from __future__ import annotations

import os
import statistics
import time

from tokrate.hardware import get_hardware
from tokrate.load.scrape import parse_metrics_text
from tokrate.sim.model import TierTiming, default_tiers
from tokrate.sim.prometheus_page import render_metrics


def _vllm_like(models: int) -> str:
    lines = []
    for g in range(12):
        lines.append(f"# TYPE vllm:gauge_{g} gauge")
        lines += [f'vllm:gauge_{g}{{engine="0",model_name="m{m}"}} {g}.5' for m in range(models)]
    for c in range(10):
        lines.append(f"# TYPE vllm:counter_{c} counter")
        lines += [f'vllm:counter_{c}_total{{model_name="m{m}"}} 1234.0' for m in range(models)]
    for h in range(12):
        lines.append(f"# TYPE vllm:hist_{h} histogram")
        for m in range(models):
            for b in (*(2.0**k for k in range(19)), "+Inf"):
                lines.append(f'vllm:hist_{h}_bucket{{le="{b}",model_name="m{m}"}} 7.0')
            lines.append(f'vllm:hist_{h}_sum{{model_name="m{m}"}} 42.0')
            lines.append(f'vllm:hist_{h}_count{{model_name="m{m}"}} 7.0')
    return "\n".join(lines) + "\n"


def _sim_page() -> str:
    gpu = get_hardware("a100-80g")
    timings = {t.name: TierTiming.place(t, gpu, 0.8, {}) for t in default_tiers()}
    return render_metrics(timings, {}).decode()


def main() -> None:
    pages = {
        "simulator (6 tiers)": _sim_page(),
        "vLLM-like, 1 model": _vllm_like(1),
        "vLLM-like, 10 models": _vllm_like(10),
    }
    print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"{'page':<22} {'bytes':>8} {'samples':>8} {'parse ms (median of 30)':>24}")
    for name, text in pages.items():
        times = []
        for _ in range(30):
            t = time.perf_counter()
            rows = parse_metrics_text(text)
            times.append((time.perf_counter() - t) * 1e3)
        print(f"{name:<22} {len(text):>8} {len(rows):>8} {statistics.median(times):>24.2f}")


if __name__ == "__main__":
    main()
