"""The report from a real run against the embedded simulator (127.0.0.1, port 0).

The simulator times tokens from the bandwidth model at time_scale 1 (a time-scaled run
would measure 1/time_scale of the modelled time and sit above the physical bound), so
the measured size-vs-speed points must follow tokens/s ~ params^-1 and stay under
the bound line.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest
from helpers.specs import sim_spec

from tokrate.analysis.stats import fit_power_law
from tokrate.hardware import get_hardware
from tokrate.load.run import run_benchmark
from tokrate.report import build_report
from tokrate.report import data as rdata
from tokrate.runfolder.store import load_run
from tokrate.sim.model import default_tiers
from tokrate.spec import PromptsSpec, SimulatorSpec, SyntheticSpec


@pytest.fixture(scope="module")
def sim_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("simruns")
    spec = sim_spec(
        None,
        out,
        run_id="simrun",
        # 64 tokens: TPOT averages 63 gaps, so a few ms of scheduling delay on a busy
        # machine (sim-1b decodes a token per ~1.2 ms) cannot push a point past the bound.
        prompts=PromptsSpec(synthetic=SyntheticSpec(count=6, input_tokens=64, output_tokens=64)),
        simulator=SimulatorSpec(time_scale=1.0),
        concurrency=(6,),
        requests=8,
    )
    result = run_benchmark(spec)
    assert result.exit_code == 0
    return result.run_dir


def test_simulator_run_follows_the_physics(sim_run: Path) -> None:
    loaded = load_run(sim_run)
    combined = rdata.combine_runs([("simrun", loaded.records)])
    sizes = rdata.targets_frame([("simrun", loaded.info)])
    hardware = get_hardware(loaded.info.hardware or "a100-80g")
    points, notes = rdata.size_speed_points(combined, sizes, hardware)
    assert notes == []
    tiers = {t.name: t for t in default_tiers()}
    assert set(points["model"]) == set(tiers)
    # The bound line sits above every measured point (and its p90 whisker).
    assert (points["tps_p50"] < points["bound_tps"]).all()
    assert (points["tps_p90"] < points["bound_tps"]).all()
    # MoE at its active parameters.
    moe = points.filter(pl.col("model") == "sim-8x7b").row(0, named=True)
    assert moe["x_params_b"] == tiers["sim-8x7b"].active_params_b
    assert moe["total_params_b"] == tiers["sim-8x7b"].params_b
    fit = fit_power_law(points["x_params_b"], points["tps_p50"] / points["gpu_scale"])
    assert fit is not None
    # Client overhead on a loaded machine slows the 1B tier's ~1 ms tokens most, which
    # flattens the slope; physics says -1.
    assert fit.exponent == pytest.approx(-1.0, abs=0.15)


def test_report_from_simulator_run(sim_run: Path) -> None:
    out = build_report([sim_run], formats=("svg",))
    assert out == sim_run
    page = (out / "report.html").read_text()
    assert "Model size vs speed" in page
    # The MoE point is labelled with its total next to its active size.
    svg = (out / "charts" / "size_vs_speed.svg").read_text()
    assert "sim-8x7b (12.9B active / 46.7B total)" in svg
    assert (out / "summary.md").read_text().count("| sim | sim-") >= 6
