"""Client vs server decode speed on real servers: the table behind issue 15's figures.

    .venv/bin/python benchmarks/real_servers_agreement.py [--requests 8] [--gateway]

Starts the same servers the ``real_server`` tests start (``.ci/real-servers-setup``
first), runs tokrate (fast client) against every llama.cpp size at 1 and 4 streams, pairs
each record with llama-server's own per-task timings, and prints per size and
concurrency: requests, client 1/TPOT p50, server decode tok/s p50, the worst per-request
difference, TTFT p50 and the server's prompt_ms p50. ``--gateway`` adds the same through
the LiteLLM proxy (91 M and 24 M sizes), and a transformers row (no server timings:
client figures only). Ends with ``uptime``: every figure depends on the machine's load.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from real_servers import harness  # noqa: E402
from real_servers import models as model_files  # noqa: E402
from real_servers.servers import (  # noqa: E402
    LITELLM_MASTER_KEY,
    Server,
    litellm_proxy,
    llama_server,
    transformers_server,
)

from tokrate.spec.types import ModelSpec  # noqa: E402

KEY_ENV = "TOKRATE_BENCH_LITELLM_KEY"


def _row(label: str, c: int, measured: tuple[list[tuple[dict, harness.LlamaTimings]], bool]) -> str:
    pairs, late = measured
    client = [1.0 / rec["tpot_s"] for rec, _ in pairs]
    server = [task.decode_tps for _, task in pairs]
    worst = harness.worst_decode_diff(pairs)
    ttft = statistics.median(rec["ttft_s"] * 1000 for rec, _ in pairs)
    prompt = statistics.median(task.prompt_ms for _, task in pairs)
    return (
        f"| {label} | {c} | {len(pairs)} | {statistics.median(client):.2f} | "
        f"{statistics.median(server):.2f} | {worst:+.2%} | {ttft:.1f} | {prompt:.1f} | "
        f"{'yes' if late else 'no'} |"
    )


def _run(
    server: Server, tmp: Path, run_id: str, c: int, requests: int, max_tokens: int, **kw: Any
) -> tuple[list[tuple[dict, harness.LlamaTimings]], bool]:
    size = next(iter(server.models))
    model = kw.pop("model", None) or ModelSpec(
        "llama", size, extra_body=(("cache_prompt", False), ("ignore_eos", True))
    )
    base_url = kw.pop("base_url", server.base_url)
    pairs, run = harness.run_and_match(
        server.log,
        tmp,
        run_id,
        base_url,
        model,
        concurrency=c,
        requests=requests,
        max_tokens=max_tokens,
        **kw,
    )
    lag = run.info.loop_lag
    return pairs, bool(lag is not None and lag.exceeded)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=8)
    parser.add_argument("--gateway", action="store_true")
    args = parser.parse_args()
    os.environ[KEY_ENV] = LITELLM_MASTER_KEY
    print(
        "| target | c | n | client 1/TPOT p50 tok/s | server decode p50 tok/s | "
        "worst per-request diff | TTFT p50 ms | server prompt_ms p50 | tokrate lag warning |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp_name, contextlib.ExitStack() as stack:
        tmp = Path(tmp_name)
        servers = {}
        for shape in model_files.GGUF_SHAPES:
            tokens = model_files.GGUF_MAX_TOKENS[shape.name]
            server = llama_server(
                model_files.gguf_model(shape),
                shape.name,
                tmp / f"{shape.name}.log",
                context=4 * (tokens + 512),
            )
            servers[shape.name] = stack.enter_context(server)
        for shape in model_files.GGUF_SHAPES:
            tokens = model_files.GGUF_MAX_TOKENS[shape.name]
            for c in (1, 4):
                pairs = _run(
                    servers[shape.name], tmp, f"{shape.name}-c{c}", c, args.requests, tokens
                )
                label = f"llama.cpp {shape.name} ({shape.params / 1e6:.0f} M, {tokens} tok)"
                print(_row(label, c, pairs), flush=True)
        if args.gateway:
            checkpoints = {s.name: model_files.hf_model(s) for s in model_files.HF_SHAPES}
            hf = stack.enter_context(transformers_server(checkpoints, tmp / "hf.log"))
            routes = {f"gw-{n}": f"{servers[n].base_url}|{n}" for n in ("rand-24m", "rand-91m")}
            routes["gw-hf"] = f"{hf.base_url}|{checkpoints['hf-rand-24m']}"
            gw = stack.enter_context(litellm_proxy(routes, tmp / "gw.log", tmp / "gw.yaml"))
            for name in ("rand-91m", "rand-24m"):
                tokens = model_files.GGUF_MAX_TOKENS[name]
                model = ModelSpec(
                    "gw", f"gw-{name}", extra_body=(("cache_prompt", False), ("ignore_eos", True))
                )
                for c in (1, 4):
                    pairs = _run(
                        servers[name],
                        tmp,
                        f"gw-{name}-c{c}",
                        c,
                        args.requests,
                        tokens,
                        base_url=gw.base_url,
                        model=model,
                        api_key_env=KEY_ENV,
                    )
                    print(_row(f"LiteLLM -> llama.cpp {name}", c, pairs), flush=True)
            for shape in model_files.HF_SHAPES:
                model = ModelSpec("hf", str(checkpoints[shape.name]))
                for c in (1, 4):
                    prompts = harness.distinct_length_prompts(tmp / "hf.jsonl", args.requests + c)
                    records = harness.bench(
                        tmp,
                        f"hf-{shape.name}-c{c}",
                        hf.base_url,
                        [model],
                        prompts,
                        concurrency=(c,),
                        requests=args.requests,
                        max_tokens=48,
                        warmup_requests=c,
                    )
                    ok = harness.ok_records(records)
                    tps = statistics.median(1.0 / r["tpot_s"] for r in ok)
                    ttft = statistics.median(r["ttft_s"] * 1000 for r in ok)
                    chunks = sum(r["content_chunks"] for r in ok)
                    tokens = sum(r["output_tokens"] for r in ok)
                    label = f"transformers {shape.name} ({shape.params / 1e6:.0f} M, 48 tok)"
                    print(
                        f"| {label} | {c} | {len(ok)} | {tps:.2f} | – | chunks/tokens "
                        f"{chunks}/{tokens} | {ttft:.1f} | – | – |",
                        flush=True,
                    )
    print("\nuptime:", subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip())
    return 0


if __name__ == "__main__":
    sys.exit(main())
