"""The report on a real llama.cpp sweep over model sizes: the size-vs-speed chart falls
with size under a CPU memory-bandwidth bound, only streams whose per-token figures
are wrong are flagged as buffered, and the client-vs-server part agrees with
llama-server's own timings.

One tokrate run, one endpoint per size (every llama-server of the package fixture), one
stream each, then ``build_report(..., hardware="cpu-ddr5-2ch")``. The F16 weights are
2 bytes per parameter, so the bound is 89.6 GB/s / (params x 2): a single-threaded
llama-server on any machine stays far below it. llama-server's ``timings`` for each
request are read from its log (the same object it streams in the last chunk); when the
client did not keep them in ``server_timings`` itself, they are written into the
records from the log, so the report's client-vs-server chart is checked either way.
"""

from __future__ import annotations

import contextlib
import itertools
import statistics
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import polars as pl
import pytest

from real_servers import harness
from real_servers import models as model_files
from real_servers.models import GGUF_SHAPES
from real_servers.paths import ServerMissing, missing
from real_servers.servers import Server, llama_server
from tokrate.analysis.metrics import derive, summarize
from tokrate.hardware import get_hardware
from tokrate.report.build import build_report
from tokrate.report.data import combine_runs, size_speed_points, targets_frame
from tokrate.runfolder.loaded_run import LoadedRun, load_run
from tokrate.runfolder.summary import Summary
from tokrate.spec.types import ModelSpec

#: Four servers started, then 20 streams of up to 2.5 s each on a shared 2-core box.
pytestmark = [pytest.mark.real_server, pytest.mark.timeout(900)]

SIZES = [s.name for s in GGUF_SHAPES]
HARDWARE = "cpu-ddr5-2ch"
MAX_TOKENS = 128
REQUESTS = 4
#: Client vs server decode speed (the issue's bound, as in test_llama_cpp.py), held
#: where the decode window lasts this long (GGUF_MAX_TOKENS' reasoning: shorter, a
#: millisecond of scheduling at either end is already a few %; test_llama_cpp.py
#: checks every size at its own length).
DECODE_AGREEMENT = 0.02
MIN_DECODE_WINDOW_S = 0.25


def _models() -> list[ModelSpec]:
    return [
        ModelSpec(
            f"llama-{s.name}",
            s.name,
            params_b=s.params_b,
            bytes_per_param=2.0,
            extra_body=(("cache_prompt", False), ("ignore_eos", True)),
        )
        for s in GGUF_SHAPES
    ]


def _sweep(servers: dict[str, Server], out: Path, run_id: str) -> LoadedRun:
    """One run over every size, each record's server timings filled from the log when
    the client did not keep them."""
    from tokrate.load.run import run_benchmark
    from tokrate.spec.types import (
        ClientSpec,
        EndpointSpec,
        LoadSpec,
        OutputSpec,
        PromptsSpec,
        RunSpec,
    )

    prompts = harness.distinct_length_prompts(out / f"{run_id}.jsonl", REQUESTS + 1)
    cursors = {name: harness.LogCursor(servers[name].log) for name in SIZES}
    for cursor in cursors.values():
        cursor.mark()
    spec = RunSpec(
        endpoints=tuple(EndpointSpec(f"llama-{n}", servers[n].base_url) for n in SIZES),
        models=tuple(_models()),
        load=LoadSpec(concurrency=(1,), requests=REQUESTS, warmup_requests=1, targets="sequential"),
        prompts=PromptsSpec(paths=(str(prompts),), max_tokens=MAX_TOKENS),
        client=ClientSpec(unique_prompts=False),
        output=OutputSpec(dir=str(out), run_id=run_id, report=False),
    )
    result = run_benchmark(spec)
    assert result.exit_code == 0
    run = load_run(result.run_dir)
    records = run.records
    if records.get_column("server_timings").drop_nulls().len() == 0:
        records = _timings_from_logs(records, cursors)
        records.write_parquet(run.path / "records.parquet")
        (run.path / "summary.json").unlink(missing_ok=True)
    return load_run(run.path)


def _timings_from_logs(
    records: pl.DataFrame, cursors: dict[str, harness.LogCursor]
) -> pl.DataFrame:
    """``server_timings`` JSON per ok record, from the llama-server task that served it."""
    filled = []
    for name in SIZES:
        part = records.filter(pl.col("endpoint") == f"llama-{name}")
        ok = part.filter(pl.col("status") == "ok")
        tasks = cursors[name].timings_since_mark(ok.height)
        pairs = harness.match_by_prompt_tokens(ok.to_dicts(), tasks)
        by_index = {
            rec["request_index"]: orjson.dumps(
                {
                    "predicted_n": t.predicted_n,
                    "predicted_ms": t.predicted_ms,
                    "predicted_per_token_ms": t.predicted_per_token_ms,
                    "predicted_per_second": t.predicted_per_second,
                    "prompt_n": t.prompt_n,
                    "prompt_ms": t.prompt_ms,
                }
            ).decode()
            for rec, t in pairs
        }
        timings = pl.Series(
            "server_timings",
            [by_index.get(i) for i in part.get_column("request_index").to_list()],
            dtype=pl.String,
        )
        filled.append(part.with_columns(timings))
    return pl.concat(filled)


@pytest.fixture(scope="module")
def own_llama_servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Server]]:
    """One llama-server per size, like the package's ``llama_servers``, but logging
    into this module's temporary folder: the matching below reads the log, and the
    package logs under the shared cache can be written by another test session."""
    logs = tmp_path_factory.mktemp("llama-logs")
    with contextlib.ExitStack() as stack:
        servers: dict[str, Server] = {}
        try:
            for shape in GGUF_SHAPES:
                context = 4 * (MAX_TOKENS + 512)
                server = llama_server(
                    model_files.gguf_model(shape),
                    shape.name,
                    logs / f"{shape.name}.log",
                    context=context,
                )
                servers[shape.name] = stack.enter_context(server)
        except ServerMissing as exc:
            missing(str(exc))
        yield servers


@pytest.fixture(scope="module")
def sweep(
    own_llama_servers: dict[str, Server], tmp_path_factory: pytest.TempPathFactory
) -> LoadedRun:
    return _sweep(own_llama_servers, tmp_path_factory.mktemp("size-chart"), "sizes")


def _summary(run: LoadedRun) -> Summary:
    return summarize(run.records, run.info)


def _measured(run: LoadedRun) -> list[dict[str, Any]]:
    """The ok measured records, derived (buffered flag, server decode speed)."""
    frame = derive(run.records).filter((pl.col("status") == "ok") & pl.col("is_measured"))
    return frame.to_dicts()


def test_size_chart_falls_with_size_under_the_cpu_bound(sweep: LoadedRun) -> None:
    out = build_report([sweep.path], hardware=HARDWARE, formats=("png", "svg"))
    hardware = get_hardware(HARDWARE)
    records = combine_runs([(sweep.name, sweep.records)])
    points, notes = size_speed_points(records, targets_frame([(sweep.name, sweep.info)]), hardware)
    assert notes == []
    rows = points.sort("x_params_b").to_dicts()
    assert [r["model"] for r in rows] == SIZES
    speeds = [r["tps_p50"] for r in rows]
    assert all(a > b for a, b in itertools.pairwise(speeds)), speeds
    for r in rows:
        bound = hardware.bandwidth_bytes_per_s / (r["x_params_b"] * 1e9 * 2.0)
        assert r["bound_tps"] == pytest.approx(bound)
        assert r["tps_p90"] < bound, (r["model"], r["tps_p90"], bound)
    svg = (out / "charts" / "size_vs_speed.svg").read_text(encoding="utf-8")
    assert f"bound: {HARDWARE}, 2 B/param (89.6 GB/s" in svg
    html = (out / "report.html").read_text(encoding="utf-8")
    assert 'id="chart-size_vs_speed"' in html


def test_only_streams_whose_per_token_figures_are_wrong_are_flagged(sweep: LoadedRun) -> None:
    """llama-server sends one token per chunk; on a shared 2-core machine its HTTP
    thread is sometimes starved and the tokens it computed on time reach the socket in
    a burst (seen here: the 3 M model's 128 tokens in ~7 reads, 1/TPOT 250,000 tok/s
    against the server's 5,000; its whole stream lasts ~25 ms, so a 6 ms stall is a
    quarter of it). Such a request may be flagged, a sound one never: every flagged
    request's 1/TPOT disagrees with the server's own decode speed by more than 2%, and
    no request that agrees with the server within 2% is flagged."""
    lines = []
    for rec in _measured(sweep):
        rel = 1.0 / rec["tpot_measured_s"] / rec["server_decode_tps"] - 1.0
        lines.append(
            f"{rec['model']}: buffered={rec['buffered']} reads={rec['stream_reads']} "
            f"first={rec['first_read_share']:.2f} burst={rec['burst_share']:.2f} "
            f"client vs server {rel:+.2%}"
        )
        if rec["buffered"]:
            assert abs(rel) > DECODE_AGREEMENT, lines
        if abs(rel) <= DECODE_AGREEMENT:
            assert not rec["buffered"], lines
    print("\n".join(lines))  # noqa: T201 -- per request, shown with -s
    for g in _summary(sweep).groups:
        assert g.stream is not None and g.stream.judged == REQUESTS
        assert g.decode_tps.n == REQUESTS - g.stream.buffered


def test_client_vs_server_agrees_in_summary_and_report(sweep: LoadedRun) -> None:
    """The summary's server part is the per-request comparison of the records (over
    requests with a decode speed: a buffered one has none), and within 2% of
    llama-server wherever the decode window is long enough to tell."""
    measured = _measured(sweep)
    lines: list[str] = []
    for g in _summary(sweep).groups:
        t = g.server
        assert t is not None and t.n == REQUESTS, g.model
        mine = [rec for rec in measured if rec["model"] == g.model]
        for rec in mine:
            assert rec["ttft_s"] >= rec["server_prompt_s"]
        kept = [rec for rec in mine if not rec["buffered"]]
        if not kept:
            assert t.decode_vs_server_p50 is None
            continue
        diffs = [1.0 / rec["tpot_s"] / rec["server_decode_tps"] - 1.0 for rec in kept]
        assert t.decode_vs_server_p50 == pytest.approx(statistics.median(diffs))
        window = min(rec["tpot_s"] * (rec["output_tokens"] - 1) for rec in kept)
        lines.append(f"{g.model}: client vs server {t.decode_vs_server_p50:+.2%} ({window:.2f} s)")
        if window >= MIN_DECODE_WINDOW_S:
            assert abs(t.decode_vs_server_p50) <= DECODE_AGREEMENT, lines
        assert t.ttft_minus_prompt_min_s is not None and t.ttft_minus_prompt_min_s >= 0.0
    print("\n".join(lines))  # noqa: T201 -- the agreement per size, shown with -s
    out = build_report([sweep.path], hardware=HARDWARE, formats=("png",))
    assert (out / "charts" / "client_vs_server.png").exists()
    md = (out / "summary.md").read_text(encoding="utf-8")
    assert "### Client vs server" in md
    for name in SIZES:
        assert f"| {name} |" in md.split("### Client vs server")[1]
