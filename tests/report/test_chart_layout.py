"""Every chart as a reader sees it (issue 24), checked on the rendered figure: no two
texts overlap, no point label crosses a data line, nothing is cut off, every log axis
has values to read, the headline panel has most of the width, and what the size
chart assumes is written on it."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Any

import orjson
import pytest
from helpers.figures import drawn_tick_labels, layout_problems, text_boxes
from helpers.synthetic import SyntheticTier, default_synthetic_tiers, synthetic_run
from matplotlib.figure import Figure

from tokrate.analysis.stats import PowerLawFit
from tokrate.report.contents import build_model, load_inputs
from tokrate.report.model import ReportModel
from tokrate.report.size_text import describe_fit


def _priced_tiers() -> list[SyntheticTier]:
    return [
        SyntheticTier(
            t.name,
            t.params_b,
            t.active_params_b,
            t.bytes_per_param,
            t.gpus,
            price_out_per_m=None if t.name == "sim-1b" else 0.1 * t.params_b,
        )
        for t in default_synthetic_tiers()
    ]


@pytest.fixture(scope="module")
def sweep(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The default tiers (an MoE, a two-GPU 70B), a 1/4/16 sweep, prices, errors."""
    return synthetic_run(
        tmp_path_factory.mktemp("runs") / "sweep",
        run_id="sweep",
        tiers=_priced_tiers(),
        concurrency=(1, 4, 16),
        requests_per_level=24,
        output_tokens=16,
        error_rate=0.05,
        server_timings=True,
        slo={"ttft_s": 0.5, "tpot_s": 0.03},
    )


@pytest.fixture(scope="module")
def sweep_model(sweep: Path) -> ReportModel:
    """The sweep's report model, built once: each test draws the charts it reads."""
    return _model(sweep)


def _model(*runs: Path, hardware: str | None = None) -> ReportModel:
    return build_model(load_inputs(list(runs), hardware=hardware))


def _figures(model: ReportModel) -> dict[str, Figure]:
    return {chart.name: chart.figure() for chart in model.charts}


def _figure(model: ReportModel, name: str) -> Figure:
    """One chart of ``model``, drawn anew (the others are not drawn)."""
    (chart,) = (c for c in model.charts if c.name == name)
    return chart.figure()


def test_every_chart_of_a_sweep_reads_cleanly(sweep_model: ReportModel) -> None:
    figures = _figures(sweep_model)
    assert {
        "size_vs_speed",
        "ttft_cdf",
        "latency_boxes",
        "throughput_vs_latency",
        "timeline",
        "cost_vs_speed",
        "client_vs_server",
    } <= set(figures)
    problems = {name: layout_problems(fig) for name, fig in figures.items()}
    assert {k: v for k, v in problems.items() if v} == {}


def test_two_runs_side_by_side_read_cleanly(sweep: Path, tmp_path: Path) -> None:
    other = synthetic_run(
        tmp_path / "other",
        run_id="other",
        tiers=_priced_tiers(),
        concurrency=(1, 4, 16),
        requests_per_level=24,
        output_tokens=16,
        efficiency=0.6,
        seed=4,
    )
    figures = _figures(_model(sweep, other))
    problems = {name: layout_problems(fig) for name, fig in figures.items()}
    assert {k: v for k, v in problems.items() if v} == {}
    # Each model is named once on the size chart, not once per run.
    size = figures["size_vs_speed"]
    names = [t.get_text() for t in size.axes[0].texts]
    assert len(names) == len(set(names)) == 6


def test_the_headline_panel_has_most_of_the_width_and_the_legend_is_below(
    sweep_model: ReportModel,
) -> None:
    fig = _figure(sweep_model, "size_vs_speed")
    fig.canvas.draw()
    speed, ttft = fig.axes[:2]
    assert speed.bbox.width / fig.bbox.width >= 0.55
    assert speed.bbox.width >= 2 * ttft.bbox.width
    (legend,) = fig.legends
    assert legend.get_window_extent().y1 <= min(speed.bbox.y0, ttft.bbox.y0)


def test_what_the_bound_assumes_is_on_the_simulated_chart(sweep_model: ReportModel) -> None:
    fig = _figure(sweep_model, "size_vs_speed")
    said = " ".join(t.get_text() for t, _ in text_boxes(fig)).replace("\n", " ")
    assert "Bound: memory bandwidth ÷ bytes read per token" in said
    assert "NVIDIA A100 80GB SXM, 2.04 TB/s" in said
    assert "bandwidth × GPUs × 0.9 (tensor-parallel efficiency)" in said
    assert "assumed" not in said  # every target gave its bytes per param
    # The fit is said once per family, never as a zero-width interval.
    assert not re.search(r"95% CI (\d+\.\d\d)–\1", said)


def _as_real_endpoint(run: Path, *, gpus: bool = False) -> Path:
    """A run whose targets are a real server's: no bytes per param, not simulated."""
    info: dict[str, Any] = orjson.loads((run / "run.json").read_bytes())
    for target in info["targets"]:
        target["simulated"] = False
        target["bytes_per_param"] = None
        if not gpus:
            target["gpus"] = None
    info.pop("hardware", None)
    (run / "run.json").write_bytes(orjson.dumps(info))
    (run / "summary.json").unlink(missing_ok=True)
    return run


def test_a_real_endpoint_gets_a_bound_under_stated_assumptions(tmp_path: Path) -> None:
    """The hosted-tier case: no bytes per param, no hardware named. The bound is drawn
    for 16-bit weights on tokrate's default hardware, and the chart says both; the
    caption describes the line that is drawn."""
    tiers = [SyntheticTier("llama-8b", 8.0, 8.0), SyntheticTier("llama-70b", 70.0, 70.0)]
    run = _as_real_endpoint(synthetic_run(tmp_path / "real", tiers=tiers, requests_per_level=8))
    model = _model(run)
    chart = model.chart("size_vs_speed")
    assert chart is not None
    fig = chart.figure()
    assert layout_problems(fig) == []
    said = " ".join(t.get_text() for t, _ in text_boxes(fig)).replace("\n", " ")
    assert "16-bit weights (2 bytes/param) assumed for llama-8b, llama-70b" in said
    assert "tokrate's default, not your hardware" in said
    assert "One GPU assumed for llama-8b, llama-70b" in said
    bounds = [line for line in fig.axes[0].lines if str(line.get_label()).startswith("bound:")]
    assert len(bounds) == 1 and len(bounds[0].get_xdata()) > 1
    assert "16-bit weights (2 bytes/param) assumed" in chart.caption
    # Named hardware is not an assumption.
    named = _model(run, hardware="h100-sxm").chart("size_vs_speed")
    assert named is not None and "tokrate's default" not in named.caption


def test_a_llama_server_sized_target_says_what_the_server_reported(tmp_path: Path) -> None:
    """A llama-server the user did not size: run.json says its size and weights came
    from the server (F16 for one, Q4_K_M for the other); the chart says so, names the
    weight type and bytes per parameter, and assumes nothing for them."""
    tiers = [
        SyntheticTier("tiny", 0.0235, 0.0235, 2.0),
        SyntheticTier("small", 0.135, 0.135, 0.6),
    ]
    run = synthetic_run(tmp_path / "llama", tiers=tiers, requests_per_level=8)
    info: dict[str, Any] = orjson.loads((run / "run.json").read_bytes())
    types = {"tiny": ("F16", 2.0), "small": ("Q4_K_M", 0.6)}
    for target in info["targets"]:
        weight_type, bpp = types[target["model"]]
        params = int(target["params_b"] * 1e9)
        target.update(
            simulated=False,
            gpus=None,
            size_source="server",
            bytes_source="server",
            served={
                "context_tokens": 2048,
                "params": params,
                "weight_bytes": int(params * bpp),
                "weight_type": weight_type,
                "source": "GET /models",
            },
        )
    (run / "run.json").write_bytes(orjson.dumps(info))
    chart = _model(run, hardware="l4").chart("size_vs_speed")
    assert chart is not None
    fig = chart.figure()
    assert layout_problems(fig) == []
    said = " ".join(t.get_text() for t, _ in text_boxes(fig)).replace("\n", " ")
    expected = (
        "Size and weights as the server reports them: tiny (F16, 2.00 bytes/param), "
        "small (Q4_K_M, 0.60 bytes/param)."
    )
    assert expected in said and expected in chart.caption
    assert "-bit weights" not in said and "One GPU assumed for tiny, small" in said


def test_a_narrow_log_axis_still_has_values_to_read(tmp_path: Path) -> None:
    """One model: its speed spans a fraction of a decade; the axis is never left
    with a single number."""
    run = synthetic_run(
        tmp_path / "one", tiers=[SyntheticTier("tiny-7b", 0.0053, 0.0053)], requests_per_level=6
    )
    for name, fig in _figures(_model(run)).items():
        assert layout_problems(fig) == [], name
        for ax in fig.axes:
            for axis in (ax.xaxis, ax.yaxis):
                if axis.get_scale() == "log":
                    assert len(drawn_tick_labels(axis)) >= 3, (name, ax.get_title())


def test_a_fit_without_spread_says_so_instead_of_a_zero_interval() -> None:
    """Never "95% CI 1.00–1.00": a third digit where two print one number twice
    (what a default simulator run gave), words where three still would."""
    exact = PowerLawFit(exponent=-1.0, coef=1000.0, exponent_ci=(-1.0001, -0.9999), r2=1.0, n=6)
    assert describe_fit(exact) == "k = 1.00 (exact: every point on the line)"
    tight = PowerLawFit(exponent=-1.0, coef=1000.0, exponent_ci=(-1.004, -0.996), r2=1.0, n=6)
    assert describe_fit(tight) == "k = 1.00, 95% CI 0.996–1.004"
    two = PowerLawFit(exponent=-1.1, coef=1000.0, exponent_ci=None, r2=1.0, n=2)
    assert describe_fit(two) == "k = 1.10 (2 sizes: no interval)"
    spread = PowerLawFit(exponent=-0.98, coef=1000.0, exponent_ci=(-1.03, -0.93), r2=0.99, n=6)
    assert describe_fit(spread) == "k = 0.98, 95% CI 0.93–1.03"


def test_the_check_sees_what_a_reader_sees() -> None:
    """The checker itself: an overprinted label, a label across a curve and a log
    axis with one number are each reported."""
    from matplotlib.ticker import NullFormatter

    from tokrate.report.figures import new_figure

    fig, (ax,) = new_figure(6, 4)
    ax.plot([1, 100], [1, 100], "-")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(60, 820)
    ax.xaxis.set_minor_formatter(NullFormatter())  # what the issue saw: "100" alone
    ax.annotate("sim-7b", (70, 70), xytext=(0, 0), textcoords="offset points")
    ax.annotate("sim-8x7b", (70, 70), xytext=(2, 0), textcoords="offset points")
    problems = " | ".join(layout_problems(fig))
    assert "text 'sim-7b' overlaps 'sim-8x7b'" in problems or "'sim-8x7b' overlaps" in problems
    assert "label 'sim-7b' crosses a data line" in problems
    assert "log x axis" in problems


def test_the_capacity_chart_reads_cleanly() -> None:
    """Six tiers' capacities (two close together, one hollow, one a lower bound) with
    and without prices: names never overprint."""
    from tokrate.report.capacity_section import CapacityRow, capacity_chart
    from tokrate.runfolder.capacity_result import TargetCapacity

    capacities = {"sim-1b": 64, "sim-7b": 24, "sim-8x7b": 22, "sim-13b": 12, "sim-34b": 4}
    verdicts = {"sim-8x7b": "unverified", "sim-1b": "at_max"}
    rows = [
        CapacityRow(
            "r",
            TargetCapacity("sim", m, c, verdicts.get(m, "found"), "ttft_s", None),
            size_b=float(m.removeprefix("sim-").removesuffix("b").replace("8x7", "12.9")),
            usd_per_hour=None if m == "sim-34b" else 2.0 * i + 1.0,
            cost_source="GPU-hour",
            condition="ttft ≤ 500 ms for 90% of requests",
        )
        for i, (m, c) in enumerate(capacities.items())
    ]
    for chosen in (rows, [dataclasses.replace(r, usd_per_hour=None) for r in rows]):
        fig = capacity_chart(chosen)
        assert layout_problems(fig) == []
        assert {t.get_text() for t in fig.axes[0].texts} == set(capacities)


def test_labels_with_no_room_are_named_not_overprinted() -> None:
    """Forty models measured at one point: what fits is labelled, the rest are named
    in the panel's title, and still nothing overlaps."""
    import polars as pl

    from tokrate.hardware import get_hardware
    from tokrate.report.charts import size_vs_speed

    n = 40
    points = pl.DataFrame(
        {
            "series": ["ep"] * n,
            "endpoint": ["ep"] * n,
            "model": [f"model-{i:02d}" for i in range(n)],
            "x_params_b": [7.0] * n,
            "total_params_b": [7.0] * n,
            "is_moe": [False] * n,
            "tps_p10": [100.0] * n,
            "tps_p50": [110.0] * n,
            "tps_p90": [120.0] * n,
            "ttft_p10": [0.1] * n,
            "ttft_p50": [0.12] * n,
            "ttft_p90": [0.15] * n,
            "bytes_per_param": [2.0] * n,
            "gpus": [1] * n,
            "gpu_scale": [1.0] * n,
            "bpp_assumed": [False] * n,
            "simulated": [True] * n,
        }
    )
    fig = size_vs_speed(points, get_hardware("a100-80g"), {})
    assert layout_problems(fig) == []
    for ax in fig.axes[:2]:
        labelled = {t.get_text() for t in ax.texts}
        title = ax.get_title().replace("\n", " ")
        assert 0 < len(labelled) < n and "not labelled, no room: " in title
        missing = sorted(set(points["model"]) - labelled)
        # The first eight are named, the rest counted: a title of thirty names would
        # push the plot off its figure (the tables name every model).
        named = [name for name in missing if name in title]
        assert len(named) == min(8, len(missing))
        if len(missing) > 8:
            assert title.endswith(f"and {len(missing) - 8} more)")


def test_a_legend_of_sixty_models_grows_the_chart_instead_of_crushing_it(
    sweep_model: ReportModel,
) -> None:
    """Sixty models on the TTFT CDF: the legend takes columns and the figure grows
    so the plot keeps its planned size (constrained layout would otherwise collapse
    it, warn, and the report would leave the chart out); a chart whose legend fits
    keeps its planned size."""
    import polars as pl

    from tokrate.report.charts import ttft_cdf

    n = 60
    ecdf = pl.DataFrame(
        {
            "series": ["ep"] * (2 * n),
            "model": [f"model-{i:02d}" for i in range(n) for _ in range(2)],
            "x": [0.01 * (i + 1) * f for i in range(n) for f in (1.0, 1.5)],
            "p": [0.5, 1.0] * n,
            "n": [2] * (2 * n),
        }
    )
    fig = ttft_cdf(ecdf)
    assert layout_problems(fig) == []
    (ax,) = fig.axes
    legend = ax.get_legend()
    assert legend is not None and len(legend.get_texts()) == n
    width, height = fig.get_size_inches()
    assert width > 8.0 and height >= 4.8
    fig.canvas.draw()
    assert ax.bbox.width / fig.dpi >= 0.8 * 8.0 - 1.0  # the plot, not the legend, is the chart
    planned = _figure(sweep_model, "ttft_cdf")
    assert tuple(planned.get_size_inches()) == (8.0, 4.8)
