"""Shared pieces of the simulator's protocol tests: a reasoning tier, truth rows, texts."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

from tokrate.sim.model import Tier, token_text

__all__ = ["STRADDLER", "THINKER", "start_thinker", "truth_rows", "words"]

#: 4 reasoning tokens then 6 answer tokens, at a fixed quick pace.
THINKER = Tier(
    "sim-thinker",
    7.0,
    7.0,
    fixed_ttft_ms=5.0,
    fixed_itl_ms=1.0,
    output_tokens_min=10,
    output_tokens_max=10,
    reasoning_tokens=4,
)


def start_thinker(start_sim: Callable[..., str], tmp_path: Path) -> tuple[str, Path]:
    """An in-process simulator serving THINKER, and its truth log's path."""
    log = tmp_path / "truth.jsonl"
    return start_sim(tiers=(THINKER,), truth_log=str(log), time_scale=1.0), log


def truth_rows(log: Path) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in log.read_bytes().splitlines()]


def words(start: int, stop: int) -> str:
    """The simulator's text of output tokens ``start`` .. ``stop - 1``."""
    return "".join(token_text(i) for i in range(start, stop))


#: 4 tokens per chunk with 6 reasoning tokens: the second chunk straddles the boundary.
STRADDLER = Tier(
    "sim-straddler",
    7.0,
    7.0,
    fixed_ttft_ms=5.0,
    fixed_itl_ms=1.0,
    tokens_per_chunk=4,
    output_tokens_min=16,
    output_tokens_max=16,
    reasoning_tokens=6,
)
