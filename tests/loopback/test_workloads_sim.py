"""Workloads over the real simulator (loopback, real client): multi-turn sessions,
shared prefixes, imported traces and the length grid, with lengths checked against
what the server counted (its truth log and usage)."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import orjson
import polars as pl
import pytest
from helpers.specs import sim_spec

from tokrate.load.run import run_benchmark
from tokrate.physics import count_chat_tokens
from tokrate.report.workload_section import prefix_notes, turn_table
from tokrate.sim.model import token_bytes
from tokrate.spec.types import (
    ClientSpec,
    GridSpec,
    PromptsSpec,
    SessionsSpec,
    SharedPrefixSpec,
    SimulatorSpec,
)

TIERS = """
[[tier]]
name = "sim-7b-long"
params_b = 7.0
context_tokens = 32768
"""


def _run(
    tmp_path: Path,
    prompts: PromptsSpec,
    *,
    prefix_cache: bool = False,
    client: ClientSpec | None = None,
    name: str = "run",
    report: bool = False,
    **load: Any,
) -> pl.DataFrame:
    """The records of one run on the embedded simulator serving the long-context tier
    (``load``: LoadSpec fields, default 2 streams, 2 requests)."""
    tiers = tmp_path / "tiers.toml"
    tiers.write_text(TIERS, encoding="utf-8")
    spec = sim_spec(
        None,
        tmp_path / "out",
        run_id=name,
        prompts=prompts,
        simulator=SimulatorSpec(tiers_file=str(tiers), prefix_cache=prefix_cache),
        client=client,
        report=report,
        **{"concurrency": (2,), "requests": 2, **load},
    )
    result = run_benchmark(spec, quiet=True)
    return pl.read_parquet(Path(result.run_dir) / "records.parquet")


def _median_ttft_by_turn(records: pl.DataFrame) -> list[float]:
    rows = records.filter(pl.col("status") == "ok").group_by("turn").agg(pl.col("ttft_s").median())
    return rows.sort("turn")["ttft_s"].to_list()


def test_session_ttft_grows_with_history_and_drops_with_the_prefix_cache(
    tmp_path: Path,
) -> None:
    sessions = PromptsSpec(
        sessions=SessionsSpec(count=2, turns=4, input_tokens=1024, output_tokens=32)
    )
    off = _run(tmp_path, sessions, name="off", report=True)
    on = _run(tmp_path, sessions, prefix_cache=True, name="on")
    for records in (off, on):
        assert records.height == 8 and (records["status"] == "ok").all()
        assert sorted(records["turn"].to_list()) == [1, 1, 2, 2, 3, 3, 4, 4]
        assert records["session_id"].n_unique() == 2
        # Each turn carries the history: the server counted every earlier answer too.
        per_turn = records.group_by("turn").agg(pl.col("input_tokens").min()).sort("turn")
        tokens = per_turn["input_tokens"].to_list()
        assert all(b > a + 1024 for a, b in itertools.pairwise(tokens))
    ttft_off = _median_ttft_by_turn(off)
    ttft_on = _median_ttft_by_turn(on)
    # Prefill grows with the history: turn 4 prefills ~4x turn 1's tokens.
    assert all(b > a for a, b in itertools.pairwise(ttft_off)), ttft_off
    assert ttft_off[3] > 2.0 * ttft_off[0], ttft_off
    # With the cache only the new answer and message are prefilled.
    assert ttft_on[3] < 0.6 * ttft_off[3], (ttft_on, ttft_off)
    # The records carry what the server said it served from its cache.
    later = on.filter(pl.col("turn") > 1)
    assert (later["cached_tokens"] > 1000).all(), later["cached_tokens"].to_list()
    assert off["cached_tokens"].is_null().all()
    # The report draws TTFT by turn from the same records.
    assert (tmp_path / "out" / "off" / "charts" / "ttft_by_turn.png").stat().st_size > 0
    table = turn_table([("off", off)])
    assert table["turn"].to_list() == [1, 2, 3, 4] and (table["n"] == 2).all()
    assert table["ttft_p50_ms"].to_list() == pytest.approx([t * 1e3 for t in ttft_off])


@pytest.mark.parametrize("kind", ["fast", "httpx", "openai"])
def test_session_turns_send_the_real_answers(tmp_path: Path, kind: str) -> None:
    # The conversation's second turn carries exactly the first answer the server wrote.
    conv = tmp_path / "conv.jsonl"
    conv.write_text(
        json.dumps(
            {
                "id": "c1",
                "system": "Be brief.",
                "turns": [
                    {"user": "Tell me about rivers."},
                    {"user": "And lakes?", "max_tokens": 8},
                ],
                "max_tokens": 16,
            }
        )
        + "\n",
        encoding="utf-8",
    )
    records = _run(
        tmp_path,
        PromptsSpec(paths=(str(conv),)),
        client=ClientSpec(kind=kind, unique_prompts=False),  # type: ignore[arg-type]
        concurrency=(1,),
        requests=1,
    )
    first, second = records.sort("turn").iter_rows(named=True)
    assert (first["output_tokens"], second["output_tokens"]) == (16, 8)
    assert first["session_id"] == second["session_id"] == "c1#0"
    history = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Tell me about rivers."},
        {"role": "assistant", "content": token_bytes(0, 16).decode()},  # the sim's answer
        {"role": "user", "content": "And lakes?"},
    ]
    assert first["input_tokens"] == count_chat_tokens(history[:2])
    assert second["input_tokens"] == count_chat_tokens(history)


@pytest.mark.parametrize("api", ["responses", "anthropic"])
def test_session_turns_in_the_typed_protocols(tmp_path: Path, api: str) -> None:
    conv = tmp_path / "conv.jsonl"
    conv.write_text(
        json.dumps(
            {
                "id": "c1",
                "system": "Be brief.",
                "turns": ["Tell me about rivers.", "And lakes?"],
                "max_tokens": 16,
            }
        )
        + "\n",
        encoding="utf-8",
    )
    records = _run(
        tmp_path,
        PromptsSpec(paths=(str(conv),)),
        client=ClientSpec(api=api, unique_prompts=False),  # type: ignore[arg-type]
        prefix_cache=True,
        concurrency=(1,),
        requests=1,
    )
    first, second = records.sort("turn").iter_rows(named=True)
    assert first["status"] == second["status"] == "ok"
    history = [
        {"role": "user", "content": "Tell me about rivers."},
        {"role": "assistant", "content": token_bytes(0, 16).decode()},
        {"role": "user", "content": "And lakes?"},
    ]
    # The second turn grew by exactly the real answer and the new message.
    grown = count_chat_tokens(history) - count_chat_tokens(history[:1])
    assert second["input_tokens"] - first["input_tokens"] == grown


def test_shared_prefix_is_cached_and_the_unique_control_is_not(tmp_path: Path) -> None:
    prompts = PromptsSpec(
        shared_prefix=SharedPrefixSpec(
            prefix_tokens=4096, input_tokens=64, output_tokens=8, count=6
        )
    )
    records = _run(tmp_path, prompts, prefix_cache=True, concurrency=(1,), requests=12)
    assert (records["status"] == "ok").all()
    assert (records["input_tokens"] == 4096 + 64 + 5).all()  # + the cache-busting tag
    ttft = records.group_by("task").agg(pl.col("ttft_s").median())
    by_task = dict(zip(ttft["task"], ttft["ttft_s"], strict=True))
    assert by_task["shared-prefix"] < 0.6 * by_task["unique-prefix"], by_task
    ((label, text),) = prefix_notes([("run", records)])
    shared_ms = by_task["shared-prefix"] * 1e3
    assert label == "shared prefix" and f"TTFT p50 {shared_ms:.1f} ms with the shared" in text


def _truth_rows(path: Path) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in path.read_bytes().splitlines() if line]


@pytest.mark.parametrize("unique", [True, False])
def test_length_grid_is_exact_as_the_server_counts(tmp_path: Path, unique: bool) -> None:
    grid = GridSpec(input_tokens=(128, 1024, 8192), output_tokens=(16, 64), count=1)
    records = _run(
        tmp_path,
        PromptsSpec(grid=grid),
        client=ClientSpec(unique_prompts=unique),
        concurrency=(3,),
        requests=6,
    )
    assert (records["status"] == "ok").all() and records.height == 6
    assert records["tokens_source"].to_list() == ["usage"] * 6
    for row in records.iter_rows(named=True):
        _, n_in, n_out = row["task"].split("-")
        assert row["input_tokens"] == int(n_in.removeprefix("in"))
        assert row["output_tokens"] == int(n_out.removeprefix("out"))


def test_trace_imports_keep_their_lengths(tmp_path: Path) -> None:
    sharegpt = tmp_path / "sg.json"
    reply = "word " * 40  # 200 bytes: 50 tokens as the simulator counts
    sharegpt.write_text(
        json.dumps(
            [
                {
                    "id": "a",
                    "conversations": [
                        {"from": "human", "value": "Hello there"},
                        {"from": "gpt", "value": reply},
                    ],
                },
                {"id": "skip", "conversations": [{"from": "gpt", "value": "no question"}]},
            ]
        ),
        encoding="utf-8",
    )
    batch = tmp_path / "batch.jsonl"
    batch.write_text(
        json.dumps(
            {
                "custom_id": "b1",
                "method": "POST",
                "url": "/v1/chat/completions",
                "body": {
                    "model": "gpt-4o",
                    "messages": [{"role": "user", "content": "x" * 400}],
                    "max_tokens": 33,
                },
            }
        )
        + "\n",
        encoding="utf-8",
    )
    records = _run(
        tmp_path,
        PromptsSpec(paths=(str(sharegpt), str(batch))),
        client=ClientSpec(unique_prompts=False),
        concurrency=(1,),
        requests=2,
        ignore_eos=True,
    )
    got = {r["prompt_id"]: r for r in records.iter_rows(named=True)}
    assert set(got) == {"a", "b1"}
    assert got["a"]["output_tokens"] == 50
    assert got["a"]["input_tokens"] == 6 + 3  # "Hello there": 11 bytes
    assert got["b1"]["output_tokens"] == 33
    assert got["b1"]["input_tokens"] == 6 + 100


def test_truth_log_records_counted_and_cached_tokens(start_sim: Any, tmp_path: Path) -> None:
    import httpx

    log = tmp_path / "truth.jsonl"
    url = start_sim(truth_log=str(log), prefix_cache=True)
    body = {
        "model": "sim-1b",
        "max_tokens": 2,
        "stream": True,
        "messages": [{"role": "user", "content": "y" * 4000}],
    }
    for _ in range(2):
        with httpx.Client() as c:
            c.post(url + "/chat/completions", json=body).raise_for_status()
    rows = _truth_rows(log)
    assert [r["input_tokens"] for r in rows] == [1006, 1006]
    assert rows[0]["cached_tokens"] == 0
    assert rows[1]["cached_tokens"] == 992  # 62 full blocks of 16 tokens (1006 = 62 x 16 + 14)
