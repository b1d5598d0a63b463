"""The report builds for any records frame the schema allows: all errors, one request,
no request, zero gaps, single-read streams (TPOT 0), one target, a hundred targets,
interrupted runs; summary.md and report.html come whatever the charts can draw."""

from __future__ import annotations

from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pytest
from helpers.synthetic import SyntheticTier, synthetic_run
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tokrate.report.build import build_report
from tokrate.runfolder.records_frame import RECORD_POLARS_SCHEMA

_VOID = {"meta", "img", "br", "hr", "link", "input", "col", "wbr", "source"}


class _Balance(HTMLParser):
    """Checks that every element opened is closed, in order."""

    def __init__(self) -> None:
        super().__init__()
        self.stack: list[str] = []
        self.errors: list[str] = []

    def handle_starttag(self, tag: str, attrs: object) -> None:
        if tag not in _VOID:
            self.stack.append(tag)

    def handle_endtag(self, tag: str) -> None:
        if not self.stack or self.stack[-1] != tag:
            self.errors.append(f"</{tag}> closes {self.stack[-1:] or 'nothing'}")
            return
        self.stack.pop()


def _assert_parses(html: str) -> None:
    parser = _Balance()
    parser.feed(html)
    parser.close()
    assert parser.errors == [] and parser.stack == [], (parser.errors[:5], parser.stack)
    assert html.startswith("<!DOCTYPE html>") and html.rstrip().endswith("</html>")


def _run(path: Path, frame: pl.DataFrame, tiers: list[SyntheticTier], status: str) -> Path:
    run = synthetic_run(path, tiers=tiers, concurrency=(1, 4), status=status)
    frame.write_parquet(run / "records.parquet")
    if status != "complete":
        (run / "records.parquet").unlink()
        lines = [pl.DataFrame([row]).write_ndjson().strip() for row in frame.to_dicts()]
        (run / "records.jsonl").write_text("".join(f"{ln}\n" for ln in lines), encoding="utf-8")
    (run / "summary.json").unlink(missing_ok=True)
    return run


def _degrade(
    frame: pl.DataFrame, rng: np.random.Generator, shape: dict[str, object]
) -> pl.DataFrame:
    n = frame.height
    keep = min(n, int(shape["keep"]))  # type: ignore[call-overload]
    frame = frame.sample(n=keep, seed=int(rng.integers(1 << 30))) if keep < n else frame
    n = frame.height
    if shape["errors"] == "all":
        failed = np.ones(n, dtype=bool)
    else:
        failed = rng.random(n) < float(shape["error_rate"])  # type: ignore[arg-type]
    tpot = frame["tpot_s"].to_numpy().copy()
    if shape["tpot"] == "zero":
        tpot[:] = 0.0
    elif shape["tpot"] == "none":
        tpot[:] = np.nan
    offsets = frame["chunk_offsets_s"].to_list()
    ttft = frame["ttft_s"].to_list()
    if shape["offsets"] == "empty":
        offsets = [[] for _ in offsets]
    elif shape["offsets"] == "one_read":
        offsets = [
            [t] * len(o) if t is not None else [] for o, t in zip(offsets, ttft, strict=True)
        ]
    out = frame.with_columns(
        pl.Series("tpot_s", tpot).fill_nan(None),
        pl.Series("chunk_offsets_s", offsets, dtype=pl.List(pl.Float64)),
        pl.Series("_failed", failed),
    )
    out = out.with_columns(
        pl.when(pl.col("_failed"))
        .then(pl.lit("error"))
        .otherwise(pl.col("status"))
        .alias("status"),
        pl.when(pl.col("_failed"))
        .then(pl.lit("http_5xx"))
        .otherwise(pl.col("error_class"))
        .alias("error_class"),
        pl.when(pl.col("_failed")).then(None).otherwise(pl.col("ttft_s")).alias("ttft_s"),
        pl.when(pl.col("_failed")).then(None).otherwise(pl.col("tpot_s")).alias("tpot_s"),
    )
    return out.drop("_failed").select([pl.col(c).cast(t) for c, t in RECORD_POLARS_SCHEMA.items()])


def _tiers(count: int) -> list[SyntheticTier]:
    sizes = np.geomspace(0.5, 400.0, count)
    return [SyntheticTier(f"m{i}-{s:.3g}b", float(s), float(s)) for i, s in enumerate(sizes)]


def _build(tmp: Path, shape: dict[str, object], seed: int) -> Path:
    tiers = _tiers(int(shape["targets"]))  # type: ignore[call-overload]
    base = synthetic_run(tmp / "base", tiers=tiers, concurrency=(1, 4), requests_per_level=6)
    frame = pl.read_parquet(base / "records.parquet")
    degraded = _degrade(frame, np.random.default_rng(seed), shape)
    run = _run(tmp / "run", degraded, tiers, str(shape["status"]))
    out = build_report([run], formats=("png",))
    html = (out / "report.html").read_text(encoding="utf-8")
    _assert_parses(html)
    md = (out / "summary.md").read_text(encoding="utf-8")
    assert md.startswith("## tokrate report")
    if shape["status"] != "complete":
        assert "interrupted" in html
    return out


SHAPES = st.fixed_dictionaries(
    {
        "targets": st.integers(1, 4),
        "keep": st.sampled_from([0, 1, 2, 5, 1000]),
        "errors": st.sampled_from(["some", "all"]),
        "error_rate": st.floats(0.0, 1.0),
        "tpot": st.sampled_from(["real", "zero", "none"]),
        "offsets": st.sampled_from(["real", "empty", "one_read"]),
        "status": st.sampled_from(["complete", "interrupted"]),
    }
)


@settings(
    max_examples=8,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(shape=SHAPES, seed=st.integers(0, 2**16))
def test_report_builds_for_any_frame(
    tmp_path_factory: pytest.TempPathFactory, shape: dict[str, object], seed: int
) -> None:
    _build(tmp_path_factory.mktemp("robust"), shape, seed)


@pytest.mark.parametrize(
    "shape",
    [
        # Single-read streams (some gateways): TPOT 0 for every ok request, zero gaps.
        {"targets": 3, "keep": 1000, "errors": "some", "error_rate": 0.0, "tpot": "zero", "offsets": "one_read", "status": "complete"},
        {"targets": 2, "keep": 1000, "errors": "all", "error_rate": 1.0, "tpot": "real", "offsets": "real", "status": "complete"},
        {"targets": 1, "keep": 1, "errors": "some", "error_rate": 0.0, "tpot": "real", "offsets": "real", "status": "interrupted"},
        {"targets": 100, "keep": 1000, "errors": "some", "error_rate": 0.05, "tpot": "real", "offsets": "real", "status": "complete"},
    ],
    ids=["single-read", "all-errors", "one-request-interrupted", "100-targets"],
)  # fmt: skip
def test_report_builds_for_named_degenerate_runs(tmp_path: Path, shape: dict[str, object]) -> None:
    out = _build(tmp_path, shape, seed=1)
    html = (out / "report.html").read_text(encoding="utf-8")
    if shape["targets"] == 100:
        # A hundred models: every chart drawn (a legend or a title of a hundred names
        # once crushed the plots and the chart was left out).
        drawn = {p.stem for p in (out / "charts").glob("*.png")}
        assert drawn == {
            "size_vs_speed",
            "ttft_cdf",
            "latency_boxes",
            "throughput_vs_latency",
            "timeline",
        }
        assert "tokrate failed to draw it" not in html
    if shape["tpot"] == "zero":
        assert "no measurable decode speed" in html  # said why, not "no known size"
        # Whole answers in one read are buffered streams: no fake zero-gap ITL box.
        assert "stream held back (proxy or server): ITL/TPOT not meaningful" in html
        assert not (out / "charts" / "latency_boxes.png").exists()


def test_pdf_charts(tmp_path: Path) -> None:
    run = synthetic_run(tmp_path / "r", concurrency=(1, 4), requests_per_level=6)
    out = build_report([run], formats=("pdf",))
    pdfs = sorted((out / "charts").glob("*.pdf"))
    assert pdfs and all(p.read_bytes().startswith(b"%PDF") for p in pdfs)
    assert not list((out / "charts").glob("*.svg"))


def test_timeline_counts_tokens_when_they_arrived() -> None:
    """A 100-token answer streamed over 10 s is 10 tok/s in every bin it was streamed
    in, not a 100-token spike in the bin it ended in: from its chunk arrival times, or
    spread from first token to end when a record has none."""
    from tokrate.report.timeline_data import timeline_bins

    offsets = [0.1 * (i + 0.5) for i in range(100)]  # 0.05 .. 9.95 s
    for chunks in (offsets, []):
        bins, width = _one_timeline(timeline_bins, chunks)
        tps = bins.filter(pl.col("output_tps") > 0)
        assert tps.height == round(10.0 / width)  # every bin of the 10 s it streamed in
        assert tps["output_tps"].max() <= 10.0 + 1e-6  # never above the real rate
        assert abs(tps["output_tps"].sum() * width - 100.0) < 1e-6  # every token once
        assert bins["errors"].sum() == 1


def _one_timeline(timeline_bins: Any, chunks: list[float]) -> tuple[pl.DataFrame, float]:

    frame = pl.DataFrame(
        {
            "series": ["sim", "sim"],
            "model": ["m", "m"],
            "is_measured": [True, True],
            "status": ["ok", "error"],
            "output_tokens": [100, 0],
            "e2e_s": [10.0, 0.5],
            "ttft_s": [0.0, None],
            "t_rel_s": [10.0, 3.0],  # end of stream since the run's first send
            "chunk_offsets_s": [chunks, []],
        },
        schema_overrides={"chunk_offsets_s": pl.List(pl.Float64)},
    )
    return timeline_bins(frame.lazy())  # type: ignore[no-any-return]


def test_one_model_size_chart_has_numbers_and_a_dense_model_is_not_moe(tmp_path: Path) -> None:
    from tokrate.inputs.sizes import fill_sizes

    # A dense model named like a 7B one, given a tiny size: active = total, exactly.
    assert fill_sizes("tiny-7b", 0.0053, None, None)[:2] == (0.0053, 0.0053)
    assert fill_sizes("mixtral-8x7b", 46.7, None, None)[1] < 46.7  # MoE keeps its ratio
    run = synthetic_run(
        tmp_path / "one", tiers=[SyntheticTier("tiny-7b", 0.0053, 0.0053)], requests_per_level=6
    )
    out = build_report([run], formats=("svg",))
    svg = (out / "charts" / "size_vs_speed.svg").read_text(encoding="utf-8")
    assert "active /" not in svg  # no "0.005B active / 0.0053B total" label
    from matplotlib.figure import Figure

    from tokrate.hardware import get_hardware
    from tokrate.report import charts
    from tokrate.report.data import combine_runs, size_speed_points, targets_frame
    from tokrate.runfolder.loaded_run import load_run

    loaded = load_run(run)
    records = combine_runs([("one", loaded.records)])
    points, _ = size_speed_points(
        records, targets_frame([("one", loaded.info)]), get_hardware("a100-80g")
    )
    fig: Figure = charts.size_vs_speed(points, get_hardware("a100-80g"), {}, per_gpu=False)
    fig.canvas.draw()
    ax = fig.axes[0]
    shown = [t.get_text() for t in ax.yaxis.get_ticklabels(which="both") if t.get_text()]
    assert shown, "the y axis of a one-model chart has no numbers"


def _one_server_per_model(path: Path, families: dict[str, str] | None = None) -> Path:
    """A run where each model has its own endpoint (the self-hosted set-up)."""
    import orjson

    run = synthetic_run(path, requests_per_level=6)
    info = orjson.loads((run / "run.json").read_bytes())
    for t in info["targets"]:
        t["endpoint"] = f"srv-{t['model']}"
        if families:
            t["family"] = families.get(t["model"])
    (run / "run.json").write_bytes(orjson.dumps(info))
    frame = pl.read_parquet(run / "records.parquet")
    frame.with_columns((pl.lit("srv-") + pl.col("model")).alias("endpoint")).write_parquet(
        run / "records.parquet"
    )
    (run / "summary.json").unlink(missing_ok=True)
    return run


def test_size_series_are_families_fitted_across_endpoints(tmp_path: Path) -> None:
    # The page says it (PNG only: no chart file is read).
    out = build_report([_one_server_per_model(tmp_path / "a")], formats=("png",))
    html = (out / "report.html").read_text(encoding="utf-8")
    assert "fitted per family, across endpoints" in html
    assert "No power law fitted" not in html
    # Two families, each of one size only: no fit, and the caption says so.
    fam = {
        "sim-1b": "small",
        "sim-7b": "big",
        "sim-13b": "big2",
        "sim-34b": "big3",
        "sim-70b": "big4",
        "sim-8x7b": "big5",
    }
    out = build_report([_one_server_per_model(tmp_path / "b", fam)], formats=("png",))
    html = (out / "report.html").read_text(encoding="utf-8")
    assert "No power law fitted" in html


def test_multi_run_styles_colour_by_model_and_mark_by_run(tmp_path: Path) -> None:
    from tokrate.report.styles import series_styles

    frame = pl.DataFrame(
        {"series": ["a", "a", "a", "b", "b", "b"], "model": ["m1", "m2", "m3"] * 2}
    )
    styles = series_styles(frame)
    assert len({s.color for s in styles.values()}) == 3  # one colour per model
    assert styles[("a", "m1")].color == styles[("b", "m1")].color
    assert styles[("a", "m1")].marker != styles[("b", "m1")].marker  # runs told apart
    many = series_styles(
        pl.DataFrame({"series": ["a"] * 25, "model": [f"m{i}" for i in range(25)]})
    )
    assert len({s.color for s in many.values()}) == 25  # never two models in one colour
    # Two runs of the same models: the report builds, legends sit outside the axes.
    a = synthetic_run(tmp_path / "a", run_id="a", concurrency=(1, 4), requests_per_level=6)
    b = synthetic_run(tmp_path / "b", run_id="b", concurrency=(1, 4), requests_per_level=6, seed=3)
    out = build_report([a, b], out_dir=tmp_path / "ab", formats=("svg",))
    svg = (out / "charts" / "throughput_vs_latency.svg").read_text(encoding="utf-8")
    # Level labels once per model, not once per run ("c=1c=1").
    assert svg.count("c=1") == 2 * 6  # 6 models x 2 panels; two runs would print 24


def test_a_charts_symlink_out_of_the_folder_is_not_written_through(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`tokrate report DIR` where DIR/charts links elsewhere: one line, exit 2, nothing
    written there (it wrote every chart file outside the run folder); a link that stays
    inside the folder is followed."""
    from tokrate.cli import main

    run = synthetic_run(tmp_path / "r", concurrency=(1, 4), requests_per_level=6)
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (run / "charts").symlink_to(outside)
    assert main(["report", str(run)]) == 2
    err = capsys.readouterr().err
    assert "is a symlink to" in err and "outside" in err and "Traceback" not in err
    assert list(outside.iterdir()) == []
    (run / "charts").unlink()
    (run / "drawn").mkdir()
    (run / "charts").symlink_to(run / "drawn")
    assert main(["report", str(run)]) == 0
    # Every chart, in the command's default formats, written through the link.
    drawn = sorted((run / "drawn").iterdir())
    assert {p.suffix for p in drawn} == {".png", ".svg"}
    assert {p.stem for p in drawn if p.suffix == ".svg"} == {p.stem for p in drawn}


def test_a_model_has_one_colour_in_every_chart_of_a_report(tmp_path: Path) -> None:
    """Colours are assigned once in the report model, models by size: a second run
    that measured only two of the six models draws them in the colours the first run's
    charts give them, and every legend entry naming a model is in that model's colour."""
    import matplotlib.colors as mcolors
    from helpers.synthetic import default_synthetic_tiers

    from tokrate.report.contents import build_model, load_inputs

    tiers = default_synthetic_tiers()
    a = synthetic_run(tmp_path / "a", run_id="a", concurrency=(1, 4), requests_per_level=6)
    b = synthetic_run(
        tmp_path / "b",
        run_id="b",
        tiers=[t for t in tiers if t.name in ("sim-13b", "sim-70b")],
        concurrency=(1, 4),
        requests_per_level=6,
    )
    by_size = [t.name for t in sorted(tiers, key=lambda t: t.active_params_b)]
    for runs in ([a, b], [b]):
        model = build_model(load_inputs(runs))
        assert list(model.colors) == [m for m in by_size if m in model.colors]
        assert len(set(model.colors.values())) == len(model.colors)
        checked = 0
        for chart in model.charts:
            fig = chart.figure()
            for ax in fig.axes:
                legend = ax.get_legend()
                if legend is None:
                    continue
                for text, handle in zip(legend.get_texts(), legend.legend_handles, strict=True):
                    named = [m for m in model.colors if m in text.get_text().split()]
                    if len(named) != 1 or handle is None or not hasattr(handle, "get_color"):
                        continue
                    color = mcolors.to_hex(handle.get_color())
                    assert color == model.colors[named[0]], (chart.name, text.get_text())
                    checked += 1
        assert checked >= 4
    # The two-model run alone keeps sim-13b's and sim-70b's colours of the two-run report.
    both = build_model(load_inputs([a, b])).colors
    alone = build_model(load_inputs([b])).colors
    assert set(alone) == {"sim-13b", "sim-70b"} and both["sim-13b"] != both["sim-70b"]
