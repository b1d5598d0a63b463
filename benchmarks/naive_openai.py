"""The naive baseline: what a 30-line script with the openai SDK does (issue 7, row 4).

python benchmarks/naive_openai.py URL [streams]
"""

from __future__ import annotations

import asyncio
import sys
import time
from typing import Any

import openai


def naive_client(base_url: str) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=base_url, api_key="unused")


async def naive_stream(client: openai.AsyncOpenAI, model: str, max_tokens: int) -> dict[str, Any]:
    t0 = time.perf_counter_ns()
    out: dict[str, Any] = {"t0_ns": t0, "chunk_ns": [], "id": "", "error": None}
    try:
        stream = await client.chat.completions.create(
            model=model,
            messages=[{"role": "user", "content": "hello"}],
            max_tokens=max_tokens,
            stream=True,
        )
        async for chunk in stream:
            if chunk.choices and chunk.choices[0].delta.content:
                out["chunk_ns"].append(time.perf_counter_ns())
                out["id"] = chunk.id
    except Exception as exc:  # the naive script just notes the failure
        out["error"] = repr(exc)
    return out


async def _main(base_url: str, streams: int) -> None:
    client = naive_client(base_url)
    results = await asyncio.gather(*(naive_stream(client, "fixed", 32) for _ in range(streams)))
    ttft = [(r["chunk_ns"][0] - r["t0_ns"]) / 1e6 for r in results if r["chunk_ns"]]
    print(f"{len(ttft)}/{streams} ok, mean TTFT {sum(ttft) / max(1, len(ttft)):.1f} ms")
    await client.close()


if __name__ == "__main__":
    asyncio.run(_main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 4))
