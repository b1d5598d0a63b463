"""The report: chart data, files written, multi-run, interrupted runs, escaping, CLI."""

from __future__ import annotations

import io
import re
from pathlib import Path

import orjson
import polars as pl
import pytest
from helpers.synthetic import SyntheticTier, default_synthetic_tiers, synthetic_run
from rich.console import Console

from tokrate.analysis.stats import fit_power_law
from tokrate.cli import main
from tokrate.hardware import get_hardware
from tokrate.redact import REDACTED, Redactor
from tokrate.report import data as rdata
from tokrate.report.build import build_report
from tokrate.report.terminal.run_tables import render_summary
from tokrate.runfolder.loaded_run import load_run
from tokrate.runfolder.records import RequestRecord
from tokrate.runfolder.records_frame import records_to_frame
from tokrate.textfmt import md_escape


@pytest.fixture(scope="module")
def sweep_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Default tiers, a 1/4/16 sweep, 5% errors and SLOs: every chart has data."""
    path = tmp_path_factory.mktemp("runs") / "sweep"
    return synthetic_run(
        path,
        run_id="sweep",
        concurrency=(1, 4, 16),
        requests_per_level=30,
        output_tokens=32,
        error_rate=0.05,
        slo={"ttft_s": 0.5, "tpot_s": 0.05},
    )


@pytest.fixture(scope="module")
def built(sweep_run: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_report([sweep_run], tmp_path_factory.mktemp("out"))


def _points(run: Path) -> pl.DataFrame:
    loaded = load_run(run)
    combined = rdata.combine_runs([("r", loaded.records)])
    sizes = rdata.targets_frame([("r", loaded.info)])
    points, _ = rdata.size_speed_points(combined, sizes, get_hardware("a100-80g"))
    return points


def test_size_chart_physics_on_default_tiers(sweep_run: Path) -> None:
    points = _points(sweep_run)
    tiers = {t.name: t for t in default_synthetic_tiers()}
    assert set(points["model"]) == set(tiers)
    # Every point at its lowest load level (c=1), under the bandwidth bound.
    assert set(points["concurrency"]) == {1}
    assert (points["tps_p90"] <= points["bound_tps"]).all()
    assert (points["tps_p50"] <= points["bound_tps"]).all()
    # MoE sits at its active parameters, total kept for the label.
    moe = points.filter(pl.col("model") == "sim-8x7b").row(0, named=True)
    assert moe["x_params_b"] == pytest.approx(tiers["sim-8x7b"].active_params_b)
    assert moe["total_params_b"] == pytest.approx(tiers["sim-8x7b"].params_b)
    assert moe["is_moe"]
    assert not points.filter(pl.col("model") == "sim-7b")["is_moe"].item()
    # Multi-GPU tiers: bound scaled by HardwareProfile.scaled(gpus).
    big = points.filter(pl.col("model") == "sim-70b").row(0, named=True)
    assert big["bound_tps"] == pytest.approx(
        get_hardware("a100-80g").scaled(2).bandwidth_bytes_per_s / (70e9 * 2)
    )
    # tokens/s ~ params^-k with k close to 1 once GPU bandwidth is divided out.
    fit = fit_power_law(points["x_params_b"], points["tps_p50"] / points["gpu_scale"])
    assert fit is not None
    assert fit.exponent == pytest.approx(-1.0, abs=0.05)
    assert fit.exponent_ci is not None and fit.exponent_ci[0] <= -0.95


def test_report_files_and_sections(built: Path) -> None:
    assert (built / "report.html").is_file() and (built / "summary.md").is_file()
    for name in ("size_vs_speed", "ttft_cdf", "latency_boxes", "throughput_vs_latency", "timeline"):
        assert (built / "charts" / f"{name}.png").read_bytes()[:4] == b"\x89PNG"
        assert b"<svg" in (built / "charts" / f"{name}.svg").read_bytes()[:500]
    # No prices: the cost chart is left out with a note, never drawn empty.
    assert not (built / "charts" / "cost_vs_speed.png").exists()
    page = (built / "report.html").read_text()
    assert "cost vs speed: no prices" in page
    assert "cost vs speed: no prices" in (built / "summary.md").read_text()
    # Tier pick table comes first, then summary, charts, errors, definitions.
    order = [
        page.index(s)
        for s in (
            'id="tier-pick"',
            'id="summary-0"',
            'id="charts"',
            'id="errors"',
            'id="definitions"',
        )
    ]
    assert order == sorted(order)
    # Self-contained: every image is a data URI and nothing points outside.
    assert page.count('src="data:image/png;base64,') == 5
    assert not re.search(r"""(src|href)=["'](?!data:)""", page)
    assert "<script" not in page
    assert "http_5xx" in page and "upstream error: overloaded" in page
    assert "k = 1.0" in page


def test_summary_md_is_gfm(built: Path) -> None:
    md = (built / "summary.md").read_text()
    assert md.startswith("## tokrate report: sweep\n")
    table = [line for line in md.splitlines() if line.startswith("| sim | sim-1b | c=")]
    assert len(table) == 3  # one row per level
    assert all(line.count(" | ") == 17 for line in table)  # 18 summary columns


def test_missing_sizes_and_single_level_are_noted(tmp_path: Path) -> None:
    run = synthetic_run(
        tmp_path / "nosize",
        run_id="nosize",
        tiers=[SyntheticTier("mystery", 7.0, 7.0, price_out_per_m=0.6)],
        requests_per_level=10,
        chunk_offsets=False,
    )
    run_json = orjson.loads((run / "run.json").read_bytes())
    for t in run_json["targets"]:
        t["params_b"] = t["active_params_b"] = None
    (run / "run.json").write_bytes(orjson.dumps(run_json))
    out = build_report([run], formats=("png",))
    assert out == run
    page = (out / "report.html").read_text()
    assert "model size vs speed: no target has a known size" in page
    assert "throughput vs latency: no sweep" in page
    assert (out / "charts" / "cost_vs_speed.png").exists()
    assert not (out / "charts" / "ttft_cdf.svg").exists()
    assert (out / "summary.json").exists()  # single run without one: written


def test_multi_run_has_one_series_per_run(tmp_path: Path) -> None:
    a = synthetic_run(tmp_path / "a", run_id="night-1", requests_per_level=10, seed=1)
    b = synthetic_run(
        tmp_path / "b", run_id="night-2", requests_per_level=10, seed=2, efficiency=0.6
    )
    # No out_dir: the report of several runs goes next to the first, named for them
    # (built once: an explicit out_dir is what every other report test passes).
    out = build_report([a, b], formats=("svg",))
    assert out == tmp_path / "compare-night-1-night-2"
    page = (out / "report.html").read_text()
    assert "Runs side by side" in page
    assert "decode tok/s p50 · night-1" in page and "decode tok/s p50 · night-2" in page
    assert "Summary: night-1" in page and "Summary: night-2" in page
    svg = (out / "charts" / "size_vs_speed.svg").read_text()
    assert "night-1 (median" in svg and "night-2 (median" in svg


def test_interrupted_run_builds_and_says_so(tmp_path: Path) -> None:
    run = synthetic_run(tmp_path / "cut", run_id="cut", requests_per_level=5, status="running")
    with (run / "records.jsonl").open("ab") as f:
        f.write(b'{"run_id": "cut", "endpoint": "sim", "mod')  # torn by SIGKILL
    out = build_report([run], tmp_path / "out", formats=("png",))
    page = (out / "report.html").read_text()
    assert "Run cut was interrupted (status &#x27;running&#x27;)" in page
    assert "30 requests recorded before it stopped" in page
    md = (out / "summary.md").read_text()
    assert "was interrupted (status 'running')" in md
    assert re.search(r"&#?\w+;", md) is None  # Markdown is Markdown: no HTML entities


HOSTILE_MODEL = 'evil<script>alert("x")</script>|col\nbreak'
HOSTILE_BODY = "<img src=x onerror=alert(1)> | [click](javascript:alert(1))\n`rm -rf`"


def _hostile_run(path: Path) -> Path:
    records = [
        RequestRecord(
            run_id="hostile",
            endpoint="ep'\"",
            model=HOSTILE_MODEL,
            scenario="c1",
            prompt_id=f"p{i}",
            task="<b>task</b>",
            request_index=i,
            started_at=1000.0 + i,
            t0_ns=i,
            status="ok",
            ttft_s=0.1,
            e2e_s=1.0,
            tpot_s=0.1,
            output_tokens=10,
            chunk_offsets_s=tuple(0.1 + 0.1 * k for k in range(10)),
            concurrency=1,
        )
        for i in range(3)
    ] + [
        RequestRecord(
            run_id="hostile",
            endpoint="ep'\"",
            model=HOSTILE_MODEL,
            scenario="c1",
            prompt_id="p9",
            task="<b>task</b>",
            request_index=9,
            started_at=1009.0,
            t0_ns=9,
            status="error",
            error_class="http_5xx",
            http_status=500,
            error_message=HOSTILE_BODY,
            concurrency=1,
        )
    ]
    path.mkdir()
    records_to_frame(records).write_parquet(path / "records.parquet")
    run = {
        "layout_version": 1,
        "kind": "tokrate-run",
        "run_id": "hostile",
        "status": "complete",
        "targets": [
            {
                "endpoint": "ep'\"",
                "model": HOSTILE_MODEL,
                "params_b": 7.0,
                "bytes_per_param": 2.0,
                "price_out_per_m": 1.0,
            }
        ],
        "scenarios": [{"name": "c1", "concurrency": 1}],
        "config": {
            "endpoints": [
                {
                    "name": "ep",
                    "api_key_env": "MY_KEY",
                    "headers": [["Authorization", "Bearer sk-canary-123"]],
                }
            ],
            "api_key": "sk-canary-456",
        },
        "warnings": ["</li><script>alert(2)</script>"],
    }
    (path / "run.json").write_bytes(orjson.dumps(run))
    return path


def test_hostile_strings_are_escaped_in_html_and_markdown(tmp_path: Path) -> None:
    out = build_report([_hostile_run(tmp_path / "h")], tmp_path / "out", formats=("png",))
    page = (out / "report.html").read_text()
    assert "<script" not in page and "<img src=x" not in page and "<b>task" not in page
    assert "evil&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;|col" in page
    assert "&lt;img src=x onerror=alert(1)&gt;" in page
    assert "sk-canary" not in page and "MY_KEY" in page and "&lt;redacted&gt;" in page
    md = (out / "summary.md").read_text()
    # Plain Markdown: every < is backslash-escaped (shown, never raw HTML), no entities.
    assert re.search(r"(?<!\\)<", md) is None and "&lt;" not in md and "sk-canary" not in md
    assert 'evil\\<script\\>alert("x")\\</script\\>\\|col break' in md
    assert "\\[click\\](javascript:alert(1))" in md
    # Every table row keeps its column count: no "|" or newline broke a cell.
    for block in md.split("\n\n"):
        rows = [line for line in block.splitlines() if line.startswith("| ")]
        widths = {len(re.findall(r"(?<!\\)\|", line)) for line in rows}
        assert len(widths) <= 1, block


def test_md_escape_and_redaction() -> None:
    assert md_escape("a|b\nc") == "a\\|b c"
    assert md_escape("<x> & *y*") == "\\<x\\> \\& \\*y\\*"
    assert md_escape('compare\'s "view"') == 'compare\'s "view"'
    cfg = {
        "api_key_env": "K",
        "api_key": "s",
        "max_tokens": 5,
        "headers": [["X-Api-Key", "v"], ["Accept", "a"]],
    }
    assert Redactor().value(cfg) == {
        "api_key_env": "K",
        "api_key": REDACTED,
        "max_tokens": 5,
        "headers": [["X-Api-Key", REDACTED], ["Accept", "a"]],
    }


def test_render_summary_terminal_table(sweep_run: Path) -> None:
    from tokrate.analysis.metrics import summarize
    from tokrate.runfolder.summary import Summary

    loaded = load_run(sweep_run)
    summary = summarize(loaded.records, loaded.info)
    buf = io.StringIO()
    render_summary(summary, Console(file=buf, width=200, color_system=None))
    text = buf.getvalue()
    assert "tokrate run sweep" in text
    assert len([line for line in text.splitlines() if "sim-70b" in line]) == 3
    buf = io.StringIO()
    render_summary(Summary(run_id="x", groups=()), Console(file=buf, width=80))
    assert buf.getvalue() == "no requests recorded\n"


def test_cli_report(sweep_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "cli"
    code = main(
        ["report", str(sweep_run), "-o", str(out), "--hardware", "h100-sxm", "--format", "png"]
    )
    assert code == 0
    assert capsys.readouterr().out.strip() == str(out / "report.html")
    assert "NVIDIA H100 SXM5 80GB" in (out / "report.html").read_text()
    assert not list((out / "charts").glob("*.svg"))
    cases: list[tuple[list[str], str]] = [
        (["report", str(tmp_path / "missing")], "not a run folder"),
        (
            ["report", str(sweep_run), "-o", str(out), "--hardware", "tpu"],
            "unknown hardware profile 'tpu'",
        ),
        (
            ["report", str(sweep_run), "-o", str(out), "--format", "gif"],
            "unknown format 'gif' (known: png, svg, pdf)",
        ),
    ]
    for argv, message in cases:
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert message in err and err.count("\n") == 1 and "Traceback" not in err


def test_ecdf_downsampled_and_exact_at_ends() -> None:
    n = 5000
    frame = records_to_frame(
        [
            RequestRecord(
                run_id="r",
                endpoint="e",
                model="m",
                scenario="c1",
                prompt_id="p",
                task="t",
                request_index=i,
                started_at=float(i),
                t0_ns=i,
                status="ok",
                ttft_s=float(i + 1),
            )
            for i in range(n)
        ]
    )
    lf = rdata.combine_runs([("r", frame)])
    ecdf = rdata.ecdf_points(lf, "ttft_s", ["series", "model"])
    assert ecdf.height <= rdata.ECDF_MAX_POINTS + 1
    assert ecdf["x"].min() == 1.0 and ecdf["x"].max() == float(n)
    assert ecdf["p"].max() == 1.0
    assert ecdf["p"].is_sorted()


def test_size_chart_labels_never_overlap() -> None:
    from helpers.figures import layout_problems

    from tokrate.report.charts import size_vs_speed

    # Crowded: five models within 10% in size and speed.
    n = 5
    points = pl.DataFrame(
        {
            "series": ["ep"] * n,
            "endpoint": ["ep"] * n,
            "model": [f"crowded-model-{i}" for i in range(n)],
            "x_params_b": [7.0 + 0.1 * i for i in range(n)],
            "total_params_b": [7.0 + 0.1 * i for i in range(n)],
            "is_moe": [False] * n,
            "tps_p10": [100.0] * n,
            "tps_p50": [110.0 + i for i in range(n)],
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
    for ax in fig.axes:
        assert sorted(t.get_text() for t in ax.texts) == sorted(points["model"].to_list())


def test_runs_side_by_side_say_what_compare_says(tmp_path: Path) -> None:
    """The report's multi-run table uses compare's functions: each later run's change,
    interval and verdict against the first are exactly `tokrate compare first later`'s."""
    from tokrate.analysis.compare import compare_runs
    from tokrate.report.terminal.comparison_text import describe_change

    tiers = [SyntheticTier("m-7b", 7.0, 7.0)]
    a = synthetic_run(tmp_path / "a", run_id="fast", tiers=tiers, requests_per_level=40, seed=1)
    b = synthetic_run(
        tmp_path / "b", run_id="slow", tiers=tiers, requests_per_level=40, seed=2, efficiency=0.5
    )
    out = build_report([a, b], tmp_path / "ab", formats=("png",))
    md = (out / "summary.md").read_text()
    block = md.split("### Runs side by side")[1].split("### ")[0]
    (row,) = [line for line in block.splitlines() if line.startswith("| sim | m-7b | c=1 |")]
    cells = [c.strip() for c in row.strip("|").split("|")]
    result = compare_runs(a, b).result("sim", "m-7b", "c1", "decode_tps_p50")
    assert result is not None and result.verdict == "regressed"
    assert md_escape(f"{describe_change(result)}, regressed") in cells[4]
    assert "block-bootstrap 95% interval" in md


#: One model, for tests of what the report says about the run, not about its models
#: (each chart has one series to draw, not six).
_ONE_TIER = default_synthetic_tiers()[:1]


def test_time_scaled_simulator_run_is_flagged(tmp_path: Path) -> None:
    run = synthetic_run(tmp_path / "fast", run_id="fast", tiers=_ONE_TIER, requests_per_level=5)
    run_json = orjson.loads((run / "run.json").read_bytes())
    run_json["config"]["simulator"] = {"time_scale": 20.0}
    (run / "run.json").write_bytes(orjson.dumps(run_json))
    out = build_report([run], tmp_path / "out", formats=("png",))
    assert "simulator ran with time_scale=20" in (out / "report.html").read_text()
    assert "simulator ran with time\\_scale=20" in (out / "summary.md").read_text()


LAG = {
    "threshold_ms": 5.0,
    "max_threshold_ms": 50.0,
    "max_ms": 53.419,
    "p99_ms": 5.4,
    "samples": 900,
    "exceeded": True,
}


@pytest.mark.parametrize("worker_said_it", [True, False])
def test_a_loop_lag_event_is_listed_once_with_one_threshold_story(
    tmp_path: Path, worker_said_it: bool
) -> None:
    """The run's own warning (both thresholds) is the one line; a run recorded before
    workers warned gets the same words from run.json's loop_lag."""
    run = synthetic_run(tmp_path / "lag", run_id="lag", tiers=_ONE_TIER, requests_per_level=5)
    run_json = orjson.loads((run / "run.json").read_bytes())
    run_json["loop_lag"] = LAG
    if worker_said_it:
        run_json["warnings"] = [
            "scenario c1: event-loop lag p99 5.4 ms, max 53.4 ms (threshold p99 5 ms / max 50 "
            "ms): timestamps may be late by that much; lower the concurrency per process or "
            "use --workers N"
        ]
    (run / "run.json").write_bytes(orjson.dumps(run_json))
    out = build_report([run], tmp_path / "out", formats=("png",))
    md = (out / "summary.md").read_text()
    lag_lines = [line for line in md.splitlines() if "event-loop lag" in line]
    assert len(lag_lines) == 1, lag_lines
    assert "p99 5.4 ms, max 53.4 ms (threshold p99 5 ms / max 50 ms)" in lag_lines[0]


def test_a_report_of_two_runs_of_the_same_models_picks_no_run_over_another(
    tmp_path: Path,
) -> None:
    """issue 38: `tokrate report A B` of the same models (before and after) compares the
    runs; its opening says so and gives each run's own pick, never one run's model
    picked over the other's."""
    from tokrate.report.contents import build_model, load_inputs

    slo = {"ttft_s": 5.0}
    a = synthetic_run(tmp_path / "a", run_id="night-a", concurrency=(1,), slo=slo)
    b = synthetic_run(tmp_path / "b", run_id="night-b", concurrency=(1,), slo=slo, seed=7)
    model = build_model(load_inputs([a, b]))
    opening = [line for line in model.verdict if "measured the same model" in line]
    assert len(opening) == 1 and "does not pick one run's model over another's" in opening[0]
    picks = [line for line in model.verdict if " pick " in line and line not in opening]
    assert picks and all(line.startswith(("In night-a: ", "In night-b: ")) for line in picks)
    # The tables those sentences quote are each run's own, named for it (issue 44).
    assert [t.title for t in model.tier] == [
        "Tier pick: night-a",
        "Tier evidence: night-a",
        "Tier pick: night-b",
        "Tier evidence: night-b",
    ]
