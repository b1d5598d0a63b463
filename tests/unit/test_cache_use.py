"""The prompt-cache summary (tokrate.analysis.cache_use), the cache fields the client
reads per protocol, and the request id it sends."""

from __future__ import annotations

from typing import Any

from helpers.documents import run_info

from tokrate.analysis.metrics import summarize
from tokrate.client.events_anthropic import _usage as anthropic_usage
from tokrate.client.request import request_id_value
from tokrate.client.result import cached_tokens_source
from tokrate.runfolder.jsondoc import to_json
from tokrate.runfolder.records import RequestRecord
from tokrate.runfolder.records_frame import records_to_frame
from tokrate.runfolder.summary import CacheUse, summary_from_json


def rec(i: int, ttft: float, cached: int | None, **kw: Any) -> RequestRecord:
    base: dict[str, Any] = {
        "run_id": "r1",
        "endpoint": "ep",
        "model": "m7b",
        "scenario": "c1",
        "prompt_id": f"p{i}",
        "task": "chat",
        "request_index": i,
        "started_at": 1000.0 + i,
        "t0_ns": i,
        "status": "ok",
        "concurrency": 1,
        "ttft_s": ttft,
        "e2e_s": ttft + 0.1,
        "output_tokens": 2,
        "input_tokens": 100,
        "cached_tokens": cached,
        "chunk_offsets_s": (ttft, ttft + 0.1),
        "tokens_source": "usage",
    }
    base.update(kw)
    return RequestRecord(**base)


RUN = {"run_id": "r1", "scenarios": [{"name": "c1", "concurrency": 1}]}


def _cache(records: list[RequestRecord]) -> CacheUse | None:
    (group,) = summarize(records_to_frame(records), run_info(RUN)).groups
    return group.cache


def test_hit_rate_and_ttft_split_count_only_what_the_server_reported() -> None:
    records = [
        rec(0, 0.200, 0),
        rec(1, 0.180, 0),
        rec(2, 0.040, 96),
        rec(3, 0.050, 90),
        rec(4, 0.030, 500),  # more than the prompt: capped at its 100 input tokens
        rec(5, 0.300, None),  # the server said nothing: unknown, not a miss
        rec(6, 0.010, 100, warmup=True),  # warm-up: out
    ]
    cache = _cache(records)
    assert cache is not None
    assert (cache.n, cache.hit_requests) == (5, 3)
    assert (cache.input_tokens, cache.cached_tokens) == (500, 286)
    assert cache.hit_rate == 286 / 500
    assert cache.ttft_cold_s.n == 2 and cache.ttft_cold_s.p50 == 0.19
    assert cache.ttft_cached_s.n == 3 and cache.ttft_cached_s.p50 == 0.04
    assert cache.cached_share_p50 == 0.96
    assert cache.write_tokens is None
    assert cache.by_turn == () and cache.session_hit_rate.n == 0


def test_no_reported_figure_means_no_cache_entry() -> None:
    assert _cache([rec(0, 0.2, None), rec(1, 0.2, None)]) is None


def test_turns_sessions_and_writes() -> None:
    records = [
        rec(0, 0.2, 0, session_id="a", turn=1, cache_write_tokens=80),
        rec(1, 0.1, 100, session_id="a", turn=2, input_tokens=200, cache_write_tokens=0),
        rec(2, 0.2, 0, session_id="b", turn=1),
        rec(3, 0.1, 150, session_id="b", turn=2, input_tokens=200),
    ]
    cache = _cache(records)
    assert cache is not None
    assert [(t.turn, t.n, t.hit_rate) for t in cache.by_turn] == [(1, 2, 0.0), (2, 2, 0.625)]
    assert cache.session_hit_rate.n == 2
    assert cache.session_hit_rate.min == 100 / 300 and cache.session_hit_rate.max == 150 / 300
    assert cache.write_tokens == 80


def test_the_cache_entry_survives_summary_json() -> None:
    records = [rec(0, 0.2, 0, session_id="a", turn=1), rec(1, 0.1, 64, session_id="a", turn=2)]
    summary = summarize(records_to_frame(records), run_info(RUN))
    again = summary_from_json(to_json(summary))
    assert again == summary and again.groups[0].cache is not None


def test_where_each_protocol_reports_cache_reads_and_writes() -> None:
    usage = anthropic_usage(
        {"input_tokens": 10, "cache_read_input_tokens": 2000, "cache_creation_input_tokens": 300},
        with_output=False,
    )
    assert usage == {"prompt_tokens": 2310, "cached_tokens": 2000, "cache_write_tokens": 300}
    assert cached_tokens_source("anthropic", usage, None) == "cache_read_input_tokens"
    assert cached_tokens_source("chat", {"cached_tokens": 0}, None) == (
        "prompt_tokens_details.cached_tokens"
    )
    assert cached_tokens_source("responses", {"cached_tokens": 5}, None) == (
        "input_tokens_details.cached_tokens"
    )
    assert cached_tokens_source("chat", {"completion_tokens": 3}, {"cache_n": 12}) == (
        "timings.cache_n"
    )
    assert cached_tokens_source("chat", {"completion_tokens": 3}, None) is None


def test_request_ids_are_derived_and_header_safe() -> None:
    assert request_id_value("night-1", "c=4", 17) == "night-1.c=4.17"
    assert request_id_value("night-1", "c=4", 17, attempt=2) == "night-1.c=4.17.a2"
    assert request_id_value("r 1/é", "rate=2/s", 0) == "r_1__.rate=2_s.0"
