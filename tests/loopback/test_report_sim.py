"""The report from a real run against the simulator (127.0.0.1, port 0).

The simulator times tokens from the bandwidth model at time_scale 1 (a time-scaled run
would measure 1/time_scale of the modelled time and sit above the physical bound), so
the measured size-vs-speed points must follow tokens/s ~ params^-1 and stay under
the bound line.

How far above the bound a client-measured decode rate may go is judged by the
simulator's truth log, not assumed: the simulator decodes at efficiency 0.8, so a
request's TPOT measured 20% short crosses the line, and on a busy 2-core machine that
happens when its first content chunk was written or read ~16 ms late while the rest
came on time (64 tokens of sim-1b are 63 gaps of ~1.23 ms; the issue saw a p90 of
1,027.5 tok/s against a bound of 1,019.5). So the physics is asserted where it lives,
on the server's own write times (every tier's p90 decode rate under the bound), and
the client's decode span of each request is checked against the server's for the same
request: shorter by at most how late the client saw the first chunk (causality on one
clock, CLOCK_MONOTONIC). The medians stay under the bound on the client's side too.
"""

from __future__ import annotations

from pathlib import Path

import orjson
import polars as pl
import pytest
from helpers.specs import sim_spec

from tokrate.analysis.stats import fit_power_law
from tokrate.hardware import get_hardware
from tokrate.load.run import run_benchmark
from tokrate.report import data as rdata
from tokrate.report.build import build_report
from tokrate.runfolder.loaded_run import load_run
from tokrate.sim.model import default_tiers
from tokrate.sim.server import SimConfig, simulator_process
from tokrate.spec.types import ModelSpec, PromptsSpec, SyntheticSpec


@pytest.fixture(scope="module")
def sim_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The run folder and the simulator's truth log (a simulator process of its own,
    the default tiers with their sizes on the models, as the embedded one has them)."""
    out = tmp_path_factory.mktemp("simruns")
    truth = out / "truth.jsonl"
    models = tuple(
        ModelSpec(
            "sim",
            t.name,
            params_b=t.params_b,
            active_params_b=t.active_params_b,
            bytes_per_param=t.bytes_per_param,
            gpus=t.gpus,
        )
        for t in default_tiers()
    )
    with simulator_process(SimConfig(time_scale=1.0, truth_log=str(truth))) as url:
        spec = sim_spec(
            url,
            out,
            models=models,
            run_id="simrun",
            # 64 tokens: TPOT averages 63 gaps.
            prompts=PromptsSpec(
                synthetic=SyntheticSpec(count=6, input_tokens=64, output_tokens=64)
            ),
            concurrency=(6,),
            requests=8,
        )
        result = run_benchmark(spec)
    assert result.exit_code == 0
    return result.run_dir, truth


def test_simulator_run_follows_the_physics(sim_run: tuple[Path, Path]) -> None:
    run_dir, truth = sim_run
    loaded = load_run(run_dir)
    combined = rdata.combine_runs([("simrun", loaded.records)])
    sizes = rdata.targets_frame([("simrun", loaded.info)])
    hardware = get_hardware(loaded.info.hardware or "a100-80g")
    points, notes = rdata.size_speed_points(combined, sizes, hardware)
    assert notes == []
    tiers = {t.name: t for t in default_tiers()}
    assert set(points["model"]) == set(tiers)
    # The bound line sits above every measured median.
    assert (points["tps_p50"] < points["bound_tps"]).all()
    # The physics on the server's side: its own decode rates, p90 included, under it.
    rows = {
        row["request"]["headers"]["x-request-id"]: row
        for row in (orjson.loads(line) for line in truth.read_bytes().splitlines())
    }
    bound = dict(zip(points["model"], points["bound_tps"], strict=True))
    server_rates: dict[str, list[float]] = {}
    ok = loaded.records.filter((pl.col("status") == "ok") & ~pl.col("warmup"))
    assert ok.height == 8 * len(tiers)
    for r in ok.iter_rows(named=True):
        writes = rows[r["request_id"]]["content_write_ns"]
        offsets = r["chunk_offsets_s"]
        server_span_ns = writes[-1] - writes[0]
        server_rates.setdefault(r["model"], []).append((len(writes) - 1) / server_span_ns * 1e9)
        # The client's decode span is shorter than the server's by at most how late it
        # saw the first content chunk (every chunk reached it after it was written).
        late_ns = r["t0_ns"] + offsets[0] * 1e9 - writes[0]
        client_span_ns = (offsets[-1] - offsets[0]) * 1e9
        assert late_ns >= 0, (r["model"], late_ns)
        assert client_span_ns >= server_span_ns - late_ns - 1e5, (r["model"], client_span_ns)
    for model, rates in server_rates.items():
        p90 = sorted(rates)[round(0.9 * (len(rates) - 1))]
        assert p90 < bound[model], (model, p90, bound[model])
    # MoE at its active parameters.
    moe = points.filter(pl.col("model") == "sim-8x7b").row(0, named=True)
    assert moe["x_params_b"] == tiers["sim-8x7b"].active_params_b
    assert moe["total_params_b"] == tiers["sim-8x7b"].params_b
    fit = fit_power_law(points["x_params_b"], points["tps_p50"] / points["gpu_scale"])
    assert fit is not None
    # Client overhead on a loaded machine slows the 1B tier's ~1 ms tokens most, which
    # flattens the slope; physics says -1.
    assert fit.exponent == pytest.approx(-1.0, abs=0.15)


def test_report_from_simulator_run(sim_run: tuple[Path, Path]) -> None:
    run_dir, _ = sim_run
    out = build_report([run_dir], formats=("svg",))
    assert out == run_dir
    page = (out / "report.html").read_text()
    assert "Model size vs speed" in page
    # The MoE point is labelled with its total next to its active size.
    svg = (out / "charts" / "size_vs_speed.svg").read_text()
    assert "sim-8x7b (12.9B active / 46.7B total)" in svg
    assert (out / "summary.md").read_text().count("| sim | sim-") >= 6
