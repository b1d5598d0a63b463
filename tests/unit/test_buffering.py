"""Buffered streams (tokrate.analysis.buffering) over hand-built frames, and how a buffered
request leaves the per-token statistics everywhere (summary, compare, history) while
TTFT and E2E keep it."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any, Final

import polars as pl
import pytest
from helpers.documents import run_info
from rich.console import Console

from tokrate.analysis.buffering import client_held_expr, short_hold_expr, with_buffering
from tokrate.analysis.buffering_rules import MIN_HELD_S
from tokrate.analysis.compare import compare_runs
from tokrate.analysis.metrics import analysed, summarize
from tokrate.report.terminal.run_tables import render_summary
from tokrate.report.terminal.stream_words import SHORT_HOLD_WHO, who_held
from tokrate.runfolder.jsondoc import to_json
from tokrate.runfolder.loaded_run import load_run
from tokrate.runfolder.records import RequestRecord
from tokrate.runfolder.records_frame import records_to_frame
from tokrate.runfolder.summary import summary_from_json

#: name -> (chunk offsets, output tokens, buffered?)
CASES: dict[str, tuple[list[float], int, bool]] = {
    # One token per read, 20 ms apart (a normal stream, llama.cpp's shape).
    "one token per read": ([0.1 + 0.02 * i for i in range(32)], 32, False),
    # The issue's transformers request: 32 tokens in 4 reads, the first ones held back.
    "32 tokens in 4 reads": ([0.5] * 20 + [0.51] * 4 + [0.52] * 4 + [0.53] * 4, 32, True),
    # 3 tokens per chunk, every chunk its own read at high speed: a legitimate server.
    "3 tokens per chunk, fast": ([0.1 + 0.0003 * i for i in range(11)], 32, False),
    # vLLM --stream-interval 10: 10 tokens per chunk, chunks 50 ms apart.
    "10 tokens per chunk": ([0.1 + 0.05 * i for i in range(10)], 100, False),
    # 3 tokens per chunk on a short answer: few reads, but each chunk alone.
    "3 per chunk, 8 tokens": ([0.1, 0.13, 0.16], 8, False),
    # A gateway that re-sends the whole answer as one chunk.
    "whole answer in one chunk": ([0.3], 32, True),
    # Two big chunks: one gap for 32 tokens.
    "two chunks of 16": ([0.3, 0.5], 32, True),
    # A fast client reading a 150,000 tok/s stream one token per read (6.5 us apart).
    "distinct stamps 6.5 us apart": ([0.3 + 6.5e-6 * i for i in range(32)], 32, False),
    # A client that fell behind now and then and read two chunks at once.
    "pairs": ([0.1 * (i // 2) for i in range(32)], 32, False),
    # llama.cpp's 3 M model at ~5,000 tok/s, read ~8 tokens at a time by a busy client.
    "fast llama, 8 tokens per read": ([0.01 + 0.0017 * (i // 8) for i in range(128)], 128, False),
    # A proxy that flushes every 100 ms: no read holds a quarter of the answer.
    "frequent flushes": ([0.1 * (1 + i // 11) for i in range(64)], 64, False),
    # The same proxy in front of a short answer: 3 reads.
    "few flushes": ([0.1 * (1 + i // 11) for i in range(30)], 30, True),
    # A stall later in the stream: the last 40 of 128 tokens in one read. TTFT is on
    # time and the span still ends at the last token, so TPOT stays right.
    "late burst": ([0.01 + 0.0002 * min(i, 88) for i in range(128)], 128, False),
    # A proxy that holds the first 10 of 32 tokens back, then streams normally.
    "first 10 held back": ([0.3] * 10 + [0.3 + 0.02 * k for k in range(1, 23)], 32, True),
    # A proxy that passes the first token on and buffers the rest in 3 flushes.
    "first token passed, rest flushed": ([0.1] + [0.35] * 10 + [0.6] * 10 + [0.85] * 11, 32, False),
    # llama-server's starved HTTP thread: 123 of 128 tokens of a 25 ms answer at once.
    "starved server": ([0.009] * 123 + [0.0092, 0.0093, 0.0094, 0.0094, 0.0094], 128, True),
    # A busy machine's 27 ms hiccup: 19 of 32 tokens of a ~700 tok/s stream in one read.
    "hiccup": ([0.03] * 19 + [0.03 + 0.0014 * k for k in range(1, 14)], 32, False),
    # A busy machine's short answer: the first token on its own, the other three of a
    # 900 tok/s simulator stream in one read 3.3 ms later (the offsets of a default run
    # beside two busy processes). TTFT on time, TPOT the simulator's pace: not held.
    "first token alone, rest in one read": ([0.002419819] + [0.005749879] * 3, 4, False),
    # The same two reads where the first chunk carried several tokens: one gap for 8
    # tokens, the first read may have held some back.
    "two reads, multi-token chunks": ([0.1, 0.1, 0.1, 0.4], 8, True),
    # Too short to tell.
    "3 tokens in one read": ([0.1, 0.1, 0.1], 3, False),
    "no content": ([], 5, False),
}


def _frame(cases: dict[str, tuple[list[float], int, bool]], client: str = "fast") -> pl.DataFrame:
    return pl.DataFrame(
        {
            "name": list(cases),
            "chunk_offsets_s": [c[0] for c in cases.values()],
            "output_tokens": [c[1] for c in cases.values()],
            "client": [client] * len(cases),
        },
        schema_overrides={"chunk_offsets_s": pl.List(pl.Float64)},
    )


def test_which_requests_are_buffered() -> None:
    out = with_buffering(_frame(CASES))
    got = dict(zip(out["name"], out["buffered"], strict=True))
    assert got == {name: case[2] for name, case in CASES.items()}


#: Through the openai SDK (and httpx) every chunk gets its own stamp: 70-250 us apart
#: within one read (httpx ~13 us), with a rare ms stall, so nearby stamps are one read.
SDK_CASES: dict[str, tuple[list[float], int, bool]] = {
    "one read, SDK stamps": ([0.3 + 120e-6 * i for i in range(32)], 32, True),
    "4 reads, SDK stamps, one stall": (
        [
            r + 100e-6 * k + (0.004 if (r, k) == (0.8, 9) else 0.0)
            for r in (0.5, 0.8, 1.1, 1.4)
            for k in range(16)
        ],
        64,
        True,
    ),
    "one token per read, 5 ms apart": ([0.1 + 0.005 * i for i in range(32)], 32, False),
    "3 tokens per chunk, 1 ms apart": ([0.1 + 0.001 * i for i in range(11)], 32, False),
}


@pytest.mark.parametrize("client", ["openai", "httpx"])
def test_which_per_chunk_stamped_requests_are_buffered(client: str) -> None:
    out = with_buffering(_frame(SDK_CASES, client=client))
    got = dict(zip(out["name"], out["buffered"], strict=True))
    assert got == {name: case[2] for name, case in SDK_CASES.items()}
    # The same stamps from the fast client are 32 reads: one stamp per read, exactly.
    fast = with_buffering(_frame(SDK_CASES, client="fast"))
    assert fast["stream_reads"][0] == 32 and not fast["buffered"][0]


def test_reads_reads_per_token_and_burst_share_by_hand() -> None:
    out = with_buffering(_frame(CASES))
    rows = {r["name"]: r for r in out.to_dicts()}
    held = rows["32 tokens in 4 reads"]
    assert (held["stream_reads"], held["reads_per_token"], held["burst_share"]) == (4, 0.125, 1.0)
    assert held["first_read_share"] == pytest.approx(20 / 32)
    normal = rows["one token per read"]
    assert (normal["stream_reads"], normal["reads_per_token"], normal["burst_share"]) == (
        32,
        1.0,
        0.0,
    )
    pairs = rows["pairs"]
    assert (pairs["stream_reads"], pairs["burst_share"]) == (16, 1.0)
    assert rows["3 tokens per chunk, fast"]["reads_per_token"] == pytest.approx(11 / 32)
    empty = rows["no content"]
    assert (empty["stream_reads"], empty["burst_share"]) == (0, None)


def test_one_late_read_among_many_is_not_a_buffered_stream() -> None:
    """A client stall that makes 5 of 64 chunks arrive in one read."""
    offsets = [0.1 + 0.01 * i for i in range(64)]
    offsets[20:25] = [offsets[24]] * 5
    out = with_buffering(_frame({"stall": (offsets, 64, False)}))
    assert out["burst_share"][0] == pytest.approx(5 / 64)
    assert out["buffered"][0] is False


def test_who_held_a_buffered_stream() -> None:
    """The client held it when its loop was late at the first read by at least 5 ms and
    half the hold the read shows; otherwise a proxy or the server did. A stream that is
    not buffered is never client-held, however late the loop."""
    held = [0.3] * 10 + [0.3 + 0.02 * k for k in range(1, 23)]  # held_s 10 x 0.44 / 22
    cases = {
        # name: (offsets, loop lag at the first read in ms or None, client held?)
        "late loop explains the hold": (held, 200.0, True),
        "late loop, half the hold": (held, 100.0, True),
        "late loop, less than half the hold": (held, 90.0, False),
        "slightly late loop, long hold": (held, 6.0, False),
        "on time": (held, 0.0, False),
        "older record (no lag)": (held, None, False),
        "whole answer in one read, loop 20 ms late": ([0.3] * 32, 20.0, True),
        "whole answer in one read, loop 3 ms late": ([0.3] * 32, 3.0, False),
        "not buffered, loop 300 ms late": ([0.1 + 0.02 * i for i in range(32)], 300.0, False),
    }
    frame = pl.DataFrame(
        {
            "name": list(cases),
            "chunk_offsets_s": [c[0] for c in cases.values()],
            "output_tokens": [32] * len(cases),
            "client": ["fast"] * len(cases),
            "loop_lag_ms": [c[1] for c in cases.values()],
        },
        schema_overrides={"chunk_offsets_s": pl.List(pl.Float64), "loop_lag_ms": pl.Float64},
    )
    out = with_buffering(frame).with_columns(client_held_expr())
    assert out["held_s"][0] == pytest.approx(0.2)
    got = dict(zip(out["name"], out["client_held"], strict=True))
    assert got == {name: case[2] for name, case in cases.items()}


#: A default run's sim-1b c=1 request beside two busy processes (its offsets as
#: recorded): a 4-token answer whole in one read 6.3 ms after the send, where the
#: group's other short answers took ~2.7 ms to their first token; loop lag 0.
WHOLE_AT_6_MS: Final = [0.006332939] * 4


def test_a_hold_shorter_than_the_floor_blames_nobody() -> None:
    """A buffered request's hold is at most its first read's offset (the first token was
    not ready before the send), so one whose first read came within 50 ms of the send
    is a short hold: still buffered (a one-read answer's TPOT is 0), but not a proxy's
    or the server's doing. The client's lag, where it explains the hold, comes first;
    a stream that is not buffered is never a short hold."""
    cases = {
        # name: (offsets, output tokens, loop lag ms, (buffered, client held, short hold))
        "busy machine, 4 tokens at once": (WHOLE_AT_6_MS, 4, 0.0, (True, False, True)),
        "the same, loop 8 ms late": (WHOLE_AT_6_MS, 4, 8.0, (True, True, False)),
        "starved server, first read at 9 ms": (
            [0.009] * 123 + [0.0092, 0.0093, 0.0094, 0.0094, 0.0094],
            128,
            0.0,
            (True, False, True),
        ),
        "first read at 49 ms": ([0.049] * 32, 32, 0.0, (True, False, True)),
        "gateway, whole answer at 50 ms": ([0.05] * 32, 32, 0.0, (True, False, False)),
        "gateway, whole answer at 300 ms": ([0.3] * 32, 32, 0.0, (True, False, False)),
        "fast stream, not buffered": (
            [0.002 + 0.001 * i for i in range(32)],
            32,
            0.0,
            (False,) * 3,
        ),
    }
    frame = pl.DataFrame(
        {
            "name": list(cases),
            "chunk_offsets_s": [c[0] for c in cases.values()],
            "output_tokens": [c[1] for c in cases.values()],
            "client": ["fast"] * len(cases),
            "loop_lag_ms": [c[2] for c in cases.values()],
        },
        schema_overrides={"chunk_offsets_s": pl.List(pl.Float64)},
    )
    out = with_buffering(frame).with_columns(client_held_expr()).with_columns(short_hold_expr())
    got = {r["name"]: (r["buffered"], r["client_held"], r["short_hold"]) for r in out.to_dicts()}
    assert got == {name: case[3] for name, case in cases.items()}


def test_a_short_hold_is_counted_apart_and_raises_no_warning(tmp_path: Path) -> None:
    """The run's own group: 29 streamed answers and the one that came whole at 6.3 ms.
    It stays out of TPOT and decode speed, summary.json counts it as a short hold, the
    terminal and the summary table's note say nobody is to blame, summary.md has no
    warning, and its "Buffered streams" table shows it; a version-8 summary loads with
    no short holds."""
    from helpers.runfolders import write_run

    from tokrate.report.build import build_report

    tpot = 1 / 900
    streamed = [
        _rec(i, [0.0027 + tpot * k for k in range(4)], tokens=4, model="sim-1b") for i in range(29)
    ]
    records = [*streamed, _rec(29, WHOLE_AT_6_MS, tokens=4, model="sim-1b", loop_lag_ms=0.0)]
    summary = summarize(records_to_frame(records), run_info())
    (g,) = summary.groups
    assert g.stream is not None
    assert (g.stream.buffered, g.stream.client_held, g.stream.short_hold) == (1, 0, 1)
    assert g.stream.held_elsewhere == 0
    assert g.tpot_s.n == 29 and g.decode_tps.n == 29 and g.ttft_s.n == 30
    assert g.decode_tps.p50 == pytest.approx(900)
    assert summary_from_json(to_json(summary)) == summary
    old = to_json(summary)
    old["schema_version"] = 8
    for group in old["groups"]:
        del group["stream"]["short_hold"]
    assert all(x.stream and x.stream.short_hold == 0 for x in summary_from_json(old).groups)
    buf = io.StringIO()
    render_summary(summary, Console(file=buf, width=80, color_system=None))
    words = " ".join(buf.getvalue().split())
    assert "bunched within 50 ms of the send, too short a hold to blame a proxy or the" in words
    assert "proxy or server)" not in words
    run = write_run(tmp_path, "r", records, scenarios={"c1": 1})
    md = (build_report([run], formats=("png",)) / "summary.md").read_text(encoding="utf-8")
    flat = " ".join(md.split())
    assert "**Warnings**" not in md and "stream held back" not in flat
    assert "1 buffered requests (bunched within 50 ms of the send, too short a hold" in flat
    assert "### Buffered streams" in md and "held under 50 ms" in md


def test_the_hold_words_name_every_side_that_held() -> None:
    """One line over several groups names who held what, client and short holds apart;
    the words say the floor the analysis uses."""
    assert f"within {MIN_HELD_S * 1000:.0f} ms of the send" in SHORT_HOLD_WHO
    assert who_held(3, 0, 0, None) == "stream held back (proxy or server)"
    assert who_held(3, 1, 1, 12.0) == (
        "held back (proxy or server; 1 of them by the client (loop lag 12 ms); "
        "1 within 50 ms of the send)"
    )
    assert (
        who_held(2, 2, 0, 12.0) == "the client held it (loop lag 12 ms), not a proxy or the server"
    )
    assert who_held(2, 0, 2, None) == (
        "bunched within 50 ms of the send, too short a hold to blame a proxy or the server"
    )
    assert who_held(3, 1, 2, 12.0) == (
        "the client held 1 (loop lag 12 ms) and 2 came within 50 ms of the send, "
        "not a proxy or the server"
    )


def _rec(i: int, offsets: list[float], tokens: int = 32, **kw: Any) -> RequestRecord:
    ttft, e2e = offsets[0], offsets[-1]
    fields: dict[str, Any] = {"endpoint": "gw", "model": "tf", **kw}
    return RequestRecord(
        run_id="r",
        scenario="c1",
        prompt_id=f"p{i}",
        task="chat",
        request_index=i,
        started_at=1000.0 + i,
        t0_ns=i,
        status="ok",
        concurrency=1,
        ttft_s=ttft,
        e2e_s=e2e,
        tpot_s=(e2e - ttft) / (tokens - 1),
        output_tokens=tokens,
        tokens_source="usage",
        chunk_offsets_s=tuple(offsets),
        **fields,
    )


def _issue_records() -> list[RequestRecord]:
    """Nine normal requests at 38.8 tok/s and the issue's one: 4 reads for 32 tokens
    whose 1/TPOT reads 349.5 tok/s."""
    tpot = 1 / 38.8
    normal = [_rec(i, [0.2 + tpot * k for k in range(32)]) for i in range(9)]
    span = 31 / 349.5  # first read to last
    held = [1.0] * 20 + [1.0 + span / 3] * 4 + [1.0 + 2 * span / 3] * 4 + [1.0 + span] * 4
    return [*normal, _rec(9, held)]


def test_the_issue_request_is_kept_out_of_decode_percentiles() -> None:
    summary = summarize(records_to_frame(_issue_records()), run_info())
    (g,) = summary.groups
    assert g.decode_tps.n == 9 and g.decode_tps.p50 == pytest.approx(38.8)
    assert g.decode_tps.max == pytest.approx(38.8)
    assert g.tpot_s.n == 9
    assert g.itl_s.n == 9 * 31  # the buffered request's gaps are out too
    assert g.ttft_s.n == 10 and g.e2e_s.n == 10  # TTFT and E2E keep it
    assert g.stream is not None
    assert (g.stream.judged, g.stream.buffered) == (10, 1)
    assert g.stream.buffered_share == pytest.approx(0.1)
    assert g.stream.buffered_decode_tps.n == 1
    assert g.stream.buffered_decode_tps.p50 == pytest.approx(349.5)
    assert g.stream.buffered_reads_per_token_p50 == pytest.approx(4 / 32)
    assert g.stream.buffered_burst_share_p50 == 1.0
    assert g.stream.buffered_first_read_share_p50 == pytest.approx(20 / 32)


def test_a_tpot_slo_holds_vacuously_for_a_buffered_request() -> None:
    """A buffered request has no per-token figures, like a one-token answer."""
    run = run_info(slo={"tpot_s": 0.02})  # the normal ones (25.8 ms) miss, 2.9 ms would pass
    (g,) = summarize(records_to_frame(_issue_records()), run).groups
    assert g.slo_met_fraction == pytest.approx(0.1)  # only the buffered one "meets" it


def test_compare_and_history_leave_buffered_requests_out_too(tmp_path: Path) -> None:
    from helpers.runfolders import write_run

    from tokrate.analysis.history import load_history

    records = _issue_records()
    base = write_run(tmp_path, "a", records, scenarios={"c1": 1})
    cur = write_run(tmp_path, "b", records, scenarios={"c1": 1}, started_at="2026-01-02T00:00:00Z")
    frame = analysed(load_run(base).records)
    assert frame["decode_tps"].drop_nulls().len() == 9
    assert frame.filter(pl.col("buffered"))["tpot_measured_s"].item() == pytest.approx(1 / 349.5)
    comparison = compare_runs(base, cur)
    decode = next(r for r in comparison.results if r.metric == "decode_tps_p50")
    assert (decode.n_baseline, decode.baseline) == (9, pytest.approx(38.8))
    points = load_history(tmp_path).points
    row = points.filter((pl.col("metric") == "decode_tps_p50") & (pl.col("run_id") == "b"))
    assert row["value"].item() == pytest.approx(38.8)


def test_summary_v2_round_trips_and_v1_still_loads() -> None:
    summary = summarize(records_to_frame(_issue_records()), run_info())
    again = summary_from_json(to_json(summary))
    assert again == summary
    old = to_json(summary)
    old["schema_version"] = 1
    for g in old["groups"]:
        del g["stream"], g["server"]
    (g1,) = summary_from_json(old).groups
    assert g1.stream is None and g1.server is None
    fixture = Path(__file__).parent.parent / "fixtures" / "runs" / "v0.1-first-release"
    loaded = load_run(fixture)
    assert loaded.summary is not None and loaded.summary.schema_version == 1
    assert all(g.stream is None for g in loaded.summary.groups)


def test_client_held_streams_are_blamed_on_the_client_everywhere(tmp_path: Path) -> None:
    """Three requests bunched while the loop lagged 180 ms: still out of TPOT and decode
    speed, but summary.json counts them as client-held with the lag, and the terminal
    line, the report's warning and the summary table's note say the client held them
    instead of blaming a proxy; summary.json v4 round-trips and v3 still loads."""
    from helpers.runfolders import write_run

    from tokrate.report.build import build_report

    by_client = [
        _rec(10 + i, [1.0] * 16 + [1.1] * 16, model="gw-only", loop_lag_ms=180.0) for i in range(3)
    ]
    records = [*_issue_records(), *by_client]
    summary = summarize(records_to_frame(records), run_info())
    groups = {g.model: g for g in summary.groups}
    held, proxied = groups["gw-only"].stream, groups["tf"].stream
    assert held is not None and proxied is not None
    assert (held.buffered, held.client_held, held.client_held_lag_max_ms) == (3, 3, 180.0)
    assert (proxied.buffered, proxied.client_held) == (1, 0)
    assert groups["gw-only"].tpot_s.n == 0 and groups["gw-only"].ttft_s.n == 3
    assert summary_from_json(to_json(summary)) == summary
    old = to_json(summary)
    old["schema_version"] = 3
    for g in old["groups"]:
        del g["stream"]["client_held"], g["stream"]["client_held_lag_max_ms"]
    assert all(g.stream and g.stream.client_held == 0 for g in summary_from_json(old).groups)
    buf = io.StringIO()
    render_summary(summary, Console(file=buf, width=80, color_system=None))
    words = " ".join(buf.getvalue().split())
    assert "held back (proxy or server; 3 of them by the client (loop lag 180 ms))" in words
    run = write_run(tmp_path, "r", records, scenarios={"c1": 1})
    md = (build_report([run], formats=("png",)) / "summary.md").read_text(encoding="utf-8")
    flat = " ".join(md.split())
    assert (
        "gw/gw-only c=1: 3 of 3 requests came bunched because this client's event loop lagged"
        " at their first read: the client held it (loop lag 180 ms), not a proxy or the"
        " server: ITL/TPOT not meaningful" in flat
    )
    assert "gw/tf c=1: stream held back (proxy or server): ITL/TPOT not meaningful for 1" in flat
    assert "gw/gw-only c=1: stream held back (proxy or server)" not in flat


def test_terminal_summary_marks_buffered_groups_in_80_columns() -> None:
    all_held = [_rec(10 + i, [1.0] * 16 + [1.1] * 16, model="gw-only") for i in range(3)]
    summary = summarize(records_to_frame([*_issue_records(), *all_held]), run_info())
    buf = io.StringIO()
    render_summary(summary, Console(file=buf, width=80, color_system=None))
    text = buf.getvalue()
    assert all(len(line) <= 80 for line in text.splitlines()), text
    rows = {line.split()[0]: line for line in text.splitlines() if line.startswith(("tf", "gw-"))}
    assert "38.8*" in rows["tf"]
    assert rows["gw-only"].count("buf") == 2  # TPOT and tok/s stream
    words = " ".join(text.split())  # the explanation wraps at 80 columns
    assert "stream held back (proxy or server): ITL/TPOT not meaningful" in words
    assert "tf c=1 1/10" in words and "gw-only c=1 3/3" in words
    # The marks are said in words (issue 38), not as "*/buf:".
    assert (
        "* after a TPOT or tok/s stream figure: it leaves out buffered requests; buf: every "
        "request was buffered, so there is no such figure." in words
    )
