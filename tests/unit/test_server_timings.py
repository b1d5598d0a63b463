"""Server-reported timings (tokrate.analysis.server_timings): per-request columns by hand, the
summary's ``server`` part, and the report's client-vs-server table and chart."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import polars as pl
import pytest
from helpers.documents import run_info
from helpers.synthetic import SyntheticTier, synthetic_run

from tokrate.analysis.metrics import derive, summarize
from tokrate.report.build import build_report
from tokrate.runfolder.jsondoc import to_json
from tokrate.runfolder.loaded_run import load_run
from tokrate.runfolder.records import RequestRecord
from tokrate.runfolder.records_frame import records_to_frame


def _rec(i: int, tpot: float, timings: dict[str, Any] | None, **kw: Any) -> RequestRecord:
    tokens = 17
    return RequestRecord(
        run_id="r",
        endpoint="llama",
        model="m",
        scenario="c1",
        prompt_id=f"p{i}",
        task="chat",
        request_index=i,
        started_at=1000.0 + i,
        t0_ns=i,
        status="ok",
        concurrency=1,
        ttft_s=0.05,
        e2e_s=0.05 + tpot * (tokens - 1),
        tpot_s=tpot,
        output_tokens=tokens,
        tokens_source="usage",
        chunk_offsets_s=tuple(0.05 + tpot * k for k in range(tokens)),
        server_timings=timings,
        **kw,
    )


def _timings(predicted_ms: float, prompt_ms: float = 40.0, n: int = 17) -> dict[str, Any]:
    return {
        "predicted_n": n,
        "predicted_ms": predicted_ms,
        "predicted_per_token_ms": predicted_ms / (n - 1),
        "predicted_per_second": n / predicted_ms * 1000.0,
        "prompt_n": 12,
        "prompt_ms": prompt_ms,
        "cache_n": 0,
    }


def test_per_request_columns_by_hand() -> None:
    frame = records_to_frame(
        [
            # client 100 tok/s (10 ms/token); server 16 gaps in 152 ms = 105.26 tok/s
            _rec(0, 0.010, _timings(152.0)),
            # no predicted_ms: from the per-token figure (8 ms -> 125 tok/s)
            _rec(1, 0.010, {"predicted_per_token_ms": 8.0, "prompt_ms": 60.0}),
            # one predicted token: no decode speed; nothing at all: nulls
            _rec(2, 0.010, {"predicted_n": 1, "predicted_ms": 0.0}),
            _rec(3, 0.010, None),
        ]
    )
    d = derive(frame).to_dicts()
    assert d[0]["server_decode_tps"] == pytest.approx(16 / 0.152)
    assert d[0]["decode_vs_server"] == pytest.approx(100.0 / (16 / 0.152) - 1.0)
    assert d[0]["server_prompt_s"] == pytest.approx(0.040)
    assert d[0]["ttft_minus_prompt_s"] == pytest.approx(0.010)
    assert d[1]["server_decode_tps"] == pytest.approx(125.0)
    assert d[1]["ttft_minus_prompt_s"] == pytest.approx(-0.010)
    assert d[2]["server_decode_tps"] is None and d[2]["decode_vs_server"] is None
    assert d[3]["server_decode_tps"] is None and d[3]["server_prompt_s"] is None


def test_summary_server_part() -> None:
    records = [_rec(i, 0.010, _timings(152.0 + i)) for i in range(5)] + [_rec(5, 0.010, None)]
    (g,) = summarize(records_to_frame(records), run_info()).groups
    t = g.server
    assert t is not None and t.n == 5
    assert t.decode_tps.p50 == pytest.approx(16 / 0.154)
    assert t.decode_vs_server_p50 == pytest.approx(100.0 / (16 / 0.154) - 1.0)
    assert t.prompt_s.p50 == pytest.approx(0.040)
    assert t.ttft_minus_prompt_p50_s == pytest.approx(0.010)
    assert t.ttft_minus_prompt_min_s == pytest.approx(0.010)
    # Without any timings: no server part at all (not an empty one).
    (plain,) = summarize(records_to_frame([_rec(0, 0.01, None)]), run_info()).groups
    assert plain.server is None
    assert to_json(plain)["server"] is None


def test_parquet_json_column_round_trips_into_the_summary(tmp_path: Path) -> None:
    frame = records_to_frame([_rec(0, 0.010, _timings(152.0))])
    assert frame.schema["server_timings"] == pl.String
    assert orjson.loads(frame["server_timings"][0])["predicted_ms"] == 152.0
    frame.write_parquet(tmp_path / "r.parquet")
    (g,) = summarize(pl.read_parquet(tmp_path / "r.parquet"), run_info()).groups
    assert g.server is not None and g.server.n == 1


def test_report_shows_client_vs_server_only_with_timings(tmp_path: Path) -> None:
    tiers = [SyntheticTier("m-1b", 1.0, 1.0), SyntheticTier("m-7b", 7.0, 7.0)]
    with_t = synthetic_run(
        tmp_path / "with",
        tiers=tiers,
        requests_per_level=12,
        server_timings=True,
        server_speedup=1.05,
        hardware="cpu-ddr5-2ch",
    )
    out = build_report([with_t], formats=("png",))
    assert (out / "charts" / "client_vs_server.png").exists()
    md = (out / "summary.md").read_text(encoding="utf-8")
    section = md.split("### Client vs server")[1]
    # The server decodes 5% faster than the client saw: -4.76% per request.
    assert section.count("-4.76%") == 2
    assert "| 12/12 |" in section
    loaded = load_run(with_t)
    assert loaded.summary is not None
    assert all(g.server is not None for g in loaded.summary.groups)
    without = synthetic_run(tmp_path / "without", tiers=tiers, requests_per_level=12)
    out2 = build_report([without], formats=("png",))
    assert not (out2 / "charts" / "client_vs_server.png").exists()
    md2 = (out2 / "summary.md").read_text(encoding="utf-8")
    assert "Client vs server" not in md2.split("**Left out of the report**")[0]
    assert "client vs server: no request carried server timings" in md2


def test_one_shape_from_llama_cpp_vllm_and_nim() -> None:
    """The same columns whatever the source; names a source does not send stay None."""
    vllm = {
        "queue_time": 0.020,
        "prefill_time": 0.030,
        "ttft": 0.050,
        "decode_time": 0.160,
        "mean_itl": 0.010,
        "num_generation_tokens": 17,
        "speculative_decoding": {"draft_acceptance_rate": 0.62, "mean_acceptance_length": 2.1},
    }
    nim = {"queue_time_ms": 5.0, "ttft_ms": 40.0, "decode_time_ms": 160.0, "output_tokens": 17}
    llama = {**_timings(160.0, prompt_ms=30.0), "draft_n": 40, "draft_n_accepted": 30}
    frame = records_to_frame(
        [
            _rec(0, 0.011, vllm, server_timings_source="metrics"),
            _rec(1, 0.011, nim, server_timings_source="stats"),
            _rec(2, 0.011, llama, server_timings_source="timings"),
        ]
    )
    v, n, ll = derive(frame).to_dicts()
    assert (v["server_queue_s"], v["server_prefill_s"], v["server_ttft_s"]) == pytest.approx(
        (0.020, 0.030, 0.050)
    )
    assert v["server_decode_tps"] == pytest.approx(16 / 0.160)
    assert v["spec_acceptance"] == pytest.approx(0.62)
    # Client: TTFT 50 ms, decode 16 x 11 ms = 176 ms.
    assert v["ttft_minus_server_s"] == pytest.approx(0.0)
    assert v["decode_minus_server_s"] == pytest.approx(0.016)
    assert n["server_queue_s"] == pytest.approx(0.005) and n["server_prefill_s"] is None
    assert n["server_ttft_s"] == pytest.approx(0.040) and n["server_output_tokens"] == 17
    assert n["server_decode_s"] == pytest.approx(0.160) and n["spec_acceptance"] is None
    # llama.cpp: no queue; its TTFT is its prompt time; acceptance from its draft counts.
    assert ll["server_queue_s"] is None
    assert ll["server_ttft_s"] == pytest.approx(0.030) == ll["server_prompt_s"]
    assert ll["ttft_minus_server_s"] == pytest.approx(0.020)
    assert ll["spec_acceptance"] == pytest.approx(0.75)

    summary = summarize(frame, run_info({"run_id": "r"}))
    (group,) = summary.groups
    assert group.server is not None
    assert group.server.sources == ("metrics", "stats", "timings")
    assert group.server.spec_acceptance_p50 == pytest.approx((0.62 + 0.75) / 2)
    assert group.server.queue_s.n == 2 and group.server.ttft_s.n == 3


def test_the_chunk_classifier_keeps_each_source_and_nested_objects() -> None:
    from tokrate.client.chunks import classify_chunk

    usage = {"prompt_tokens": 3, "completion_tokens": 2}
    for key in ("timings", "metrics", "stats"):
        facts = classify_chunk(
            {"choices": [], "usage": usage, key: {"ttft": 0.5, "x": "text", "d": {"a": 1}}}
        )
        assert facts.timings == {"ttft": 0.5, "d": {"a": 1}} and facts.timings_source == key
    both = classify_chunk({"choices": [], "usage": usage, "timings": {"a": 1}, "metrics": {"b": 2}})
    assert both.timings_source == "timings"
