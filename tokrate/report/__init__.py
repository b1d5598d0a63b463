"""The report: charts, report.html and summary.md from one or more stored runs.

``build_report`` reads run folders only (never the network), recomputes every metric
from the records with :func:`tokrate.analysis.metrics.summarize`, and writes into the output
folder::

    report.html              self-contained (embedded PNGs, inline CSS, no scripts)
    summary.md               GitHub-flavoured markdown (CI step summaries, PR comments)
    charts/<name>.png|svg    every chart drawn, in the requested formats
    summary.json             only for a single run folder that has none yet

A chart whose data is missing (no sweep, no prices, no sizes) is left out with a
one-line note in both documents, never drawn empty.
"""

from __future__ import annotations

import dataclasses
import io
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, Final

import orjson
import polars as pl

from tokrate.analysis.compare import Comparison, compare_loaded
from tokrate.analysis.metrics import summarize
from tokrate.analysis.stats import PowerLawFit, fit_power_law, stability_warnings
from tokrate.errors import OutputError, UsageError
from tokrate.fileio import write_atomic
from tokrate.hardware import HardwareProfile, get_hardware
from tokrate.report import capacity_section as _capacity
from tokrate.report import charts as _charts
from tokrate.report import connect as _connect
from tokrate.report import data as _data
from tokrate.report import server_load as _server_load
from tokrate.report import size_text as _size_text
from tokrate.report import streams as _streams
from tokrate.report import workload_section as _workloads
from tokrate.report.calibration import describe_verdict
from tokrate.report.html import ChartImage, Page, render_html
from tokrate.report.tables import (
    Table,
    comparison_table,
    errors_table,
    summary_table,
    tier_table,
)
from tokrate.report.text import render_markdown, render_summary
from tokrate.report.timeline_data import timeline_bins
from tokrate.runfolder.run_info import RunInfo
from tokrate.runfolder.store import LoadedRun, load_run
from tokrate.runfolder.summary import Summary

__all__ = ["DEFAULT_HARDWARE", "FORMATS", "build_report", "render_summary"]

#: The chart file formats (every one matplotlib writes without extra packages).
FORMATS: Final = ("png", "svg", "pdf")
DEFAULT_HARDWARE: Final = "a100-80g"


def build_report(
    run_dirs: Sequence[Path],
    out_dir: Path | None = None,
    *,
    hardware: str | None = None,
    formats: Sequence[str] = FORMATS,
) -> Path:
    """Build report.html, summary.md and charts/ for ``run_dirs``; returns the folder.

    One run and ``out_dir`` None: the run folder itself. Several runs and ``out_dir``
    None: ``<parent of the first run>/compare-<id>-<id>...``. ``hardware`` names the
    profile of the bound line (default: the first run's run.json "hardware", else
    a100-80g). Raises UsageError (no runs, unknown format), ConfigError (unknown
    hardware), RunFolderError (unreadable run), OutputError (cannot write).
    """
    if not run_dirs:
        raise UsageError("report: give at least one run folder")
    bad = [f for f in formats if f not in FORMATS]
    if bad:
        raise UsageError(f"report: unknown format {bad[0]!r} (known: png, svg)")
    runs = _unique_keys([load_run(Path(p)) for p in run_dirs])
    profile = get_hardware(hardware or runs[0][1].info.hardware or DEFAULT_HARDWARE)
    if out_dir is None:
        first = runs[0][1].path
        out = (
            first if len(runs) == 1 else first.parent / ("compare-" + "-".join(k for k, _ in runs))
        )
    else:
        out = Path(out_dir)
    _prepare(out)
    summaries = [(key, _capacity.with_stored(summarize(run.records, run.info), run.summary))
                 for key, run in runs]  # fmt: skip
    if len(runs) == 1 and not (out / "summary.json").exists() and out == runs[0][1].path:
        _write(
            out / "summary.json",
            orjson.dumps(summaries[0][1].to_dict(), option=orjson.OPT_INDENT_2),
        )
    doc = _Document(
        runs,
        [(k, _by_size(s, r.info)) for (k, s), (_, r) in zip(summaries, runs, strict=True)],
        profile,
    )
    doc.draw(out, formats)
    _write(out / "report.html", doc.html().encode("utf-8"))
    _write(out / "summary.md", doc.markdown().encode("utf-8"))
    return out


def _by_size(summary: Summary, run: RunInfo) -> Summary:
    """``summary`` with groups ordered by endpoint, model size (active params, unknown
    last), model name, then the original (sweep) order — how readers scan."""
    size = {t.key: t.size_b for t in run.targets}
    indexed = list(enumerate(summary.groups))
    indexed.sort(
        key=lambda ig: (
            ig[1].endpoint,
            size.get((ig[1].endpoint, ig[1].model)) or float("inf"),
            ig[1].model,
            ig[0],
        )
    )
    return dataclasses.replace(summary, groups=tuple(g for _, g in indexed))


def _unique_keys(runs: list[LoadedRun]) -> list[tuple[str, LoadedRun]]:
    """Each run's name (label, else id), made unique with #2, #3 where two share one."""
    seen: dict[str, int] = {}
    out = []
    for run in runs:
        key = run.name
        if key in seen:
            seen[key] += 1
            key = f"{key}#{seen[key]}"
        else:
            seen[key] = 1
        out.append((key, run))
    return out


def _prepare(out: Path) -> None:
    try:
        (out / "charts").mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise OutputError(f"{out}: cannot create the report folder ({err.strerror})") from None


def _write(path: Path, payload: bytes) -> None:
    """Write atomically, so a crash never leaves half a file."""
    try:
        write_atomic(path, payload)
    except OSError as err:
        raise OutputError(f"{path}: cannot write ({err.strerror})") from None


class _Document:
    """Everything one report shows, computed once and rendered twice (HTML, markdown)."""

    def __init__(
        self,
        runs: Sequence[tuple[str, LoadedRun]],
        summaries: Sequence[tuple[str, Summary]],
        hardware: HardwareProfile,
    ) -> None:
        self.runs = runs
        self.summaries = summaries
        self.hardware = hardware
        self.multi = len(runs) > 1
        self.records = _data.combine_runs([(k, r.records) for k, r in runs])
        self.sizes = _data.targets_frame([(k, r.info) for k, r in runs])
        self.groups = _data.group_table(summaries)
        self.notes: list[str] = []
        self.images: list[ChartImage] = []
        self.fits: dict[str, PowerLawFit] = {}
        self.warnings = self._warnings()
        self._comparisons: dict[str, Comparison] | None = None
        self.capacity = _capacity.capacity_rows(
            [(k, r.info, s) for (k, r), (_, s) in zip(runs, summaries, strict=True)]
        )

    # --- text parts -------------------------------------------------------------

    def title(self) -> str:
        if self.multi:
            return "tokrate report: " + " vs ".join(k for k, _ in self.runs)
        return f"tokrate report: {self.runs[0][0]}"

    def banners(self) -> list[str]:
        out = []
        for key, run in self.runs:
            if run.interrupted:
                status = run.info.status
                n = run.records.height
                out.append(
                    f"Run {key} was interrupted (status {status!r}): this report shows the "
                    f"{n} requests recorded before it stopped."
                )
        return out

    def meta(self) -> list[tuple[str, str]]:
        out: list[tuple[str, str]] = []
        for key, run in self.runs:
            r = run.info
            prefix = f"{key}: " if self.multi else ""
            targets = ", ".join(t.label for t in r.targets)
            scenarios = ", ".join(s.name for s in r.scenarios)
            host = " · ".join(
                v for v in (r.host, r.platform, r.python and f"Python {r.python}") if v
            )
            fields = (
                ("run", f"{key} ({r.run_id})" if r.label else key),
                ("status", "interrupted" if run.interrupted else r.status),
                ("started", r.started_at or "—"),
                ("ended", r.ended_at or "—"),
                ("tokrate", r.tokrate_version or "—"),
                ("host", host or "—"),
                ("targets", targets or "—"),
                ("levels", scenarios or "—"),
                ("requests", str(run.records.height)),
            )
            out += [(f"{prefix}{k}", v) for k, v in fields]
        out += _connect.notes([(k, r.info, r.records) for k, r in self.runs])
        out += _server_load.server_load_meta([(k, r.info) for k, r in self.runs], self.multi)
        out += _workloads.prefix_notes([(k, r.records) for k, r in self.runs])
        out += [
            (
                f"{k}: calibration" if self.multi else "calibration",
                describe_verdict(r.info.calibration),
            )
            for k, r in self.runs
            if r.info.calibration is not None
        ]
        out.append(("bound hardware", f"{self.hardware.name} ({self.hardware.description})"))
        return out

    def _warnings(self) -> list[str]:
        out: list[str] = []
        for key, run in self.runs:
            prefix = f"{key}: " if self.multi else ""
            out += [f"{prefix}{w}" for w in run.info.warnings]
            out += [f"{prefix}{n}" for n in run.notes]
            scale = run.info.time_scale
            if scale is not None and scale != 1:
                out.append(
                    f"{prefix}the simulator ran with time_scale={scale:g}: every measured time "
                    f"is 1/{scale:g} of the modelled one, so speeds sit {scale:g}× above the "
                    "hardware bound; run with time_scale 1 for physical numbers"
                )
            lag = run.info.loop_lag
            if lag is not None and lag.exceeded:
                out.append(
                    f"{prefix}client event-loop lag reached {lag.max_ms} ms (threshold "
                    f"{lag.threshold_ms} ms): latencies may include client delay; "
                    "lower the concurrency or use --workers"
                )
        for key, summary in self.summaries:
            prefix = f"{key}: " if self.multi else ""
            out += [f"{prefix}{w}" for w in stability_warnings(summary.groups)]
        return out + _streams.buffered_warnings(self.summaries)

    def comparisons(self) -> dict[str, Comparison]:
        """Every later run against the first, with tokrate compare's functions."""
        if self._comparisons is None:
            first = self.runs[0][1]
            self._comparisons = {k: compare_loaded(first, r) for k, r in self.runs[1:]}
        return self._comparisons

    def tables(self) -> tuple[Table, list[Table], Table]:
        rows, slo_set = _data.tier_picks(self.summaries, self.sizes)
        slo = self.runs[0][1].info.slo
        tier = tier_table(rows, slo_set, slo, _data.SLO_ATTAINMENT)
        tables: list[Table] = []
        if self.capacity:
            tables += [_capacity.capacity_table(self.capacity, self.multi),
                       _capacity.cheapest_table(self.capacity)]  # fmt: skip
        if self.multi:
            tables.append(comparison_table(self.summaries, self.comparisons()))
        for key, summary in self.summaries:
            tables.append(summary_table(key, summary, title=f"Summary: {key}"))
        extra = (_streams.stream_table(self.summaries), _streams.server_table(self.summaries))
        tables += [t for t in extra if t is not None]
        errors = errors_table(_data.error_examples(self.records))
        return tier, tables, errors

    # --- charts -----------------------------------------------------------------

    def draw(self, out: Path, formats: Sequence[str]) -> None:
        """Draw every chart with data, save charts/<name>.<fmt>, keep PNGs for HTML.

        One chart that cannot be drawn (data no chart foresaw) is left out with a note
        naming it and why; the other charts, report.html and summary.md still come."""
        charts = self._figures()
        while True:
            try:
                name, title, caption, make = next(charts)
            except StopIteration:
                return
            except Exception as exc:  # the data step of a chart failed: the rest too
                self.notes.append(f"charts left out: {type(exc).__name__}: {exc}")
                return
            try:
                self._save(out, formats, name, title, caption, make())
            except Exception as exc:
                self.notes.append(f"{title}: left out, it could not be drawn ({exc})")

    def _save(
        self, out: Path, formats: Sequence[str], name: str, title: str, caption: str, fig: Any
    ) -> None:
        png = io.BytesIO()
        fig.savefig(png, format="png")
        # The constrained layout is solved by the first save; freeze it so the SVG
        # does not solve it again (a third of the drawing time).
        fig.set_layout_engine("none")
        files = {"png": png.getvalue()}
        if "svg" in formats:
            svg = io.BytesIO()
            fig.savefig(svg, format="svg", metadata={"Date": None})
            files["svg"] = svg.getvalue()
        if "pdf" in formats:
            pdf = io.BytesIO()
            fig.savefig(pdf, format="pdf", metadata={"CreationDate": None})
            files["pdf"] = pdf.getvalue()
        # Written only once every format was drawn: a chart is there whole or not at all.
        for fmt, data in files.items():
            if fmt in formats:
                _write(out / "charts" / f"{name}.{fmt}", data)
        self.images.append(ChartImage(name, title, caption, png.getvalue()))

    def _figures(self) -> Iterator[tuple[str, str, str, Callable[[], Any]]]:
        points, notes = _data.size_speed_points(self.records, self.sizes, self.hardware)
        self.notes += notes
        if points.height:
            for (series,), part in points.group_by(["series"], maintain_order=True):
                # Divide out multi-GPU bandwidth so the fit measures size alone
                # (docs/definitions.md: speed ~ bandwidth / active bytes); the line is for one GPU.
                per_gpu = part["tps_p50"] / part["gpu_scale"]
                fit = fit_power_law(part["x_params_b"].to_list(), per_gpu.to_list())
                if fit is not None:
                    self.fits[str(series)] = fit
            yield (
                "size_vs_speed",
                "Model size vs speed",
                self._size_caption(points),
                lambda: _charts.size_vs_speed(
                    points,
                    self.hardware,
                    self.fits,
                    per_gpu=bool((points["gpu_scale"] > 1).any()),
                ),
            )
        else:
            if not any("no measurable decode speed" in n for n in notes):
                self.notes.append(
                    "model size vs speed: no target has a known size (set params_b in [[model]])"
                )
        yield from _capacity.figures(self.capacity, self.notes)
        ecdf = _data.ecdf_points(self.records, "ttft_s", ["series", "model"])
        if ecdf.height:
            yield (
                "ttft_cdf",
                "TTFT distribution",
                "Empirical CDF of time to first token per model (ok requests, every load level).",
                lambda: _charts.ttft_cdf(ecdf),
            )
        else:
            self.notes.append("TTFT distribution: no ok request has a TTFT")
        tpot = _data.box_stats(self.records, "tpot_s", ["series", "model"])
        itl = _data.box_stats(self.records, "itl_s", ["series", "model"])
        if tpot.height or itl.height:
            yield (
                "latency_boxes",
                "TPOT and inter-token latency",
                "Box: p25–p75, line: median, diamond: mean, whiskers: p10–p90 (ms, log scale).",
                lambda: _charts.latency_boxes(tpot, itl),
            )
        elif any(g.stream and g.stream.buffered for _, s in self.summaries for g in s.groups):
            self.notes.append(f"TPOT / ITL distribution: {_streams.BUFFERED_WORDS}")
        else:
            self.notes.append("TPOT / ITL distribution: no ok request with 2 or more tokens")
        sweep = self.groups.filter(
            pl.col("aggregate_tps").is_not_null() & pl.col("decode_p50").is_not_null()
        )
        multi_level = sweep.group_by(["series", "model"]).len().filter(pl.col("len") >= 2)
        sweep = sweep.join(
            multi_level.select("series", "model"), on=["series", "model"], how="semi"
        )
        if sweep.height:
            yield (
                "throughput_vs_latency",
                "Throughput vs latency",
                "One curve per model over the load levels of the sweep (labels: concurrency or rate).",
                lambda: _charts.throughput_vs_latency(sweep),
            )
        else:
            self.notes.append(
                "throughput vs latency: no sweep (run with --concurrency 1,4,16 or several rates)"
            )
        bins, width = timeline_bins(self.records)
        if bins.height:
            yield (
                "timeline",
                "Timeline",
                "Output tokens/s by the time each chunk arrived (and failed requests per bin, "
                "when any failed), per target.",
                lambda: _charts.timeline(bins, width),
            )
        else:
            self.notes.append("timeline: no measured requests")
        load, note = _server_load.server_load_chart(
            [(k, r.info, r.records, r.server_metrics) for k, r in self.runs], self.records
        )
        yield from [load] if load is not None else []
        self.notes += [note] if note is not None else []
        cost = self.groups.filter(
            pl.col("usd_per_m").is_not_null() & pl.col("decode_p50").is_not_null()
        )
        if cost.height:
            yield (
                "cost_vs_speed",
                "Cost vs speed",
                "USD per million output tokens: list price, or GPU-hour price × GPUs ÷ measured "
                "aggregate tokens per hour.",
                lambda: _charts.cost_vs_speed(cost),
            )
        else:
            self.notes.append(
                "cost vs speed: no prices (set price_out_per_m, or gpu_hourly_usd and gpus)"
            )
        yield from _streams.figures(self.summaries, self.notes)
        connects = _connect.connect_points([(k, r.info, r.records) for k, r in self.runs])
        if connects.height:
            yield (
                "connect_time",
                "Connect time",
                "DNS + TCP (+ TLS) set-up of every connection: solid, opened before the "
                "measured window (preconnect); dashed, opened by a request (inside its TTFT).",
                lambda: _connect.connect_chart(connects),
            )
        else:
            self.notes.append("connect time: no connection set-up recorded in these runs")
        turns = _workloads.turn_table([(k, r.records) for k, r in self.runs])
        if turns.height:
            yield (
                "ttft_by_turn",
                "TTFT by turn",
                "Multi-turn sessions: TTFT of each turn, which sends the whole history with "
                "the model's real answers; it grows with the history unless a prefix cache "
                "serves it.",
                lambda: _workloads.turn_chart(turns),
            )

    def _size_caption(self, points: pl.DataFrame) -> str:
        return _size_text.size_caption(points, self.hardware.description, bool(self.fits))

    def fit_notes(self) -> list[tuple[str, str]]:
        return _size_text.fit_notes(self.fits)

    # --- documents --------------------------------------------------------------

    def html(self) -> str:
        tier, tables, errors = self.tables()
        return render_html(
            Page(
                title=self.title(),
                meta=self.meta() + self.fit_notes(),
                banners=self.banners(),
                warnings=self.warnings,
                tier=tier,
                tables=tables,
                charts=self.images,
                notes=self.notes,
                errors=errors,
                configs=[(k, r.info.config) for k, r in self.runs],
            )
        )

    def markdown(self) -> str:
        tier, tables, errors = self.tables()
        return render_markdown(
            title=self.title(),
            meta=[*self.banner_meta(), *self.meta(), *self.fit_notes()],
            tables=[tier, *tables, errors],
            notes=self.notes,
            warnings=self.warnings,
        )

    def banner_meta(self) -> list[tuple[str, str]]:
        return [("note", b) for b in self.banners()]
