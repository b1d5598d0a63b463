"""``tokrate history``'s pages: history.html, history.md, history.csv and, per
benchmark, one chart per metric, from a :class:`tokrate.analysis.history.History`
(renderers only; every benchmark, band and verdict was computed there).

history.html goes through the run report's renderer (:mod:`tokrate.report.html`): one
style, one escaping path, the same no-script CSP. One panel set per benchmark with
more than one run, labelled with what it measures and its fingerprint: per metric a
line per series over time, the band the nightly gate judged each run by shaded around
it, and a mark on every point outside its band, by compare's verdict: ▼ regressed,
▲ improved, ◆ outside but not a verdict (not significant, inconclusive, not
confirmed). The runs left out (a benchmark of one run, a night whose client was
unhealthy) are listed with why. history.md is plain Markdown.
"""

from __future__ import annotations

import io
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Final

import polars as pl

from tokrate.analysis.history import (
    DEFAULT_HISTORY_METRICS,
    BenchmarkHistory,
    History,
    load_history,
)
from tokrate.analysis.noise import MIN_NOISE_RUNS, NOISE_WINDOW
from tokrate.analysis.ordering import model_key, natural_key
from tokrate.errors import OutputError
from tokrate.fileio import FileRefused, make_folder, write_atomic
from tokrate.report.drawn_colors import DrawnKey, read_drawn
from tokrate.report.html import ChartImage, Page, render_html
from tokrate.report.styles import model_colors
from tokrate.report.tables import Table
from tokrate.spec.metric_table import metric_label
from tokrate.spec.thresholds import DEFAULT_THRESHOLDS, Threshold, metric_unit
from tokrate.textfmt import DASH, fmt_ms, fmt_tps, md_escape

__all__ = ["build_history", "write_history"]

#: verdict -> (matplotlib marker, colour, symbol in tables); any other verdict of a
#: point outside its band gets the last entry.
#: Marker and line style per level (c=1, c=8, ...) in the trend charts; the colour
#: is the model's.
_LEVEL_MARKERS: Final = ("o", "s", "^", "D", "v", "P")
_LEVEL_LINES: Final = ("-", "--", ":", "-.")

_MARKS: Final = {
    "regressed": ("v", "#c0392b", "▼"),
    "improved": ("^", "#1e8449", "▲"),
    "other": ("D", "#9a6700", "◆"),
}


def _mark(verdict: str) -> tuple[str, str, str]:
    return _MARKS.get(verdict, _MARKS["other"])


def _unit(metric: str) -> tuple[str, float]:
    """Axis unit and the factor from stored values to it."""
    unit = metric_unit(metric)
    if unit == "rate":
        return "%", 100.0
    if unit == "tok/s":
        return "tok/s", 1.0
    return "ms", 1000.0


def _fmt(value: float | None, metric: str) -> str:
    if value is None:
        return DASH
    unit = metric_unit(metric)
    if unit == "rate":
        return f"{value * 100:.2f}%"
    if unit == "tok/s":
        return fmt_tps(value, " tok/s")
    return fmt_ms(value)


def _band_text(history: History) -> str:
    return (
        "band: what compare would not call a change against the reference each point was"
        " judged by (the median of its benchmark's newest good nights before it, since"
        " the last acceptance), with the threshold it judged by (the configured one,"
        " widened to the night-to-night noise of the benchmark's earlier healthy nights"
        f" once there are {MIN_NOISE_RUNS}, newest {history.window}); marks on exactly"
        " the points outside their band, by compare's verdict: ▼ regressed, ▲ improved,"
        " ◆ not a verdict (not significant, inconclusive, not confirmed)"
    )


def _benchmark_title(b: BenchmarkHistory) -> str:
    return f"benchmark {b.number + 1} ({b.fingerprint}, {b.runs} runs): {b.description}"


def _in_model_order(
    groups: Iterable[tuple[tuple[Any, ...], pl.DataFrame]],
) -> list[tuple[tuple[Any, ...], pl.DataFrame]]:
    """Groups keyed (endpoint, model, scenario, ...) in the order of every table
    (tokrate.analysis.ordering: models by name read naturally, sim-1b before sim-13b),
    then endpoint and scenario; otherwise in the order given."""
    return sorted(
        groups,
        key=lambda kg: (
            model_key(str(kg[0][1])),
            natural_key(str(kg[0][0])),
            natural_key(str(kg[0][2])),
        ),
    )


def _series_label(endpoint: str, model: str, scenario: str, multi_ep: bool) -> str:
    return f"{endpoint}/{model} {scenario}" if multi_ep else f"{model} {scenario}"


def _colors(history: History) -> dict[str, str]:
    """One colour per model of the whole page, models in the tables' order: a model
    has the same colour in every chart of every benchmark."""
    models = sorted({str(m) for m in history.points.get_column("model")}, key=model_key)
    return model_colors(models)


def _chart(
    history: History, metric: str, fingerprint: str, colors: Mapping[str, str]
) -> tuple[bytes, DrawnKey]:
    """The chart's PNG and what it shows per model, read back from the figure."""
    from matplotlib.figure import Figure

    from tokrate.report.figures import fit_figure_to_legends, freeze_layout, legend_columns

    unit, factor = _unit(metric)
    data = history.points.filter(
        (pl.col("metric") == metric) & (pl.col("benchmark") == fingerprint)
    )
    multi_ep = data["endpoint"].n_unique() > 1
    fig = Figure(figsize=(9, 4.6), dpi=100, layout="constrained")
    ax = fig.add_subplot()
    groups = _in_model_order(data.group_by(["endpoint", "model", "scenario"], maintain_order=True))
    # One colour per model (the page's, by the tables' order), one marker and line
    # style per level: sim-1b c=1 and sim-70b c=1 never share a colour.
    levels = list(dict.fromkeys(str(k[2]) for k, _ in groups))
    for (endpoint, model, scenario), g in groups:
        g = g.sort("started_at")
        color = colors[str(model)]
        level = levels.index(str(scenario))
        label = _series_label(str(endpoint), str(model), str(scenario), multi_ep)
        ax.plot(
            g["started_at"].to_list(),
            (g["value"] * factor).to_list(),
            marker=_LEVEL_MARKERS[level % len(_LEVEL_MARKERS)],
            markersize=4,
            linestyle=_LEVEL_LINES[level % len(_LEVEL_LINES)],
            linewidth=1.2,
            color=color,
            label=label,
        )
        # A band with no upper end (tokens/s with a threshold of -100%) is drawn to
        # four times the line's top, so it cannot flatten the chart.
        band = g.filter(pl.col("band_low").is_not_null()).with_columns(
            pl.min_horizontal("band_high", pl.col("value").max() * 4).alias("band_high")
        )
        if band.height:
            ax.fill_between(
                band["started_at"].to_list(),
                (band["band_low"] * factor).to_list(),
                (band["band_high"] * factor).to_list(),
                color=color,
                alpha=0.15,
                linewidth=0,
                step="mid",
            )
        outside = g.filter(pl.col("outside"))
        for row in outside.iter_rows(named=True):
            marker, mark_color, _ = _mark(str(row["verdict"]))
            ax.scatter(
                [row["started_at"]],
                [row["value"] * factor],
                marker=marker,
                s=60,
                color=mark_color,
                zorder=5,
                edgecolors="black",
                linewidths=0.5,
            )
    values = (data["value"] * factor).filter(data["value"] > 0)
    if values.len() and float(values.max()) > 10 * float(values.min()):  # type: ignore[arg-type]
        # Past a decade a linear axis flattens the small models into a line on the
        # floor; a log axis shows every series' own changes.
        ax.set_yscale("log")
    else:
        # Zero-based axis: a trend chart that starts at the data minimum makes noise
        # look like a cliff.
        ax.set_ylim(bottom=0)
    ax.set_title(_chart_title(metric), fontsize=10)
    ax.set_ylabel(f"{metric_label(metric)} ({unit})")
    ax.grid(True, alpha=0.3)
    if data.height:
        # Outside the data: a trend legend over the lines hides the newest nights.
        entries = len(ax.get_legend_handles_labels()[1])
        legend = ax.legend(
            fontsize=8,
            loc="upper left",
            bbox_to_anchor=(1.01, 1.0),
            borderaxespad=0,
            ncols=legend_columns(entries),
        )
        fit_figure_to_legends(fig, beside=[legend])
    for tick in ax.get_xticklabels():
        tick.set_rotation(30)
        tick.set_horizontalalignment("right")
    freeze_layout(fig)
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return buf.getvalue(), read_drawn(fig, colors)


def _chart_title(metric: str) -> str:
    return f"{metric_label(metric)} over time"


def _flat(history: History, metric: str, fingerprint: str) -> bool:
    """Whether ``metric`` has one value in every run of every series of a benchmark
    (an error rate of 0 every night): a chart of it shows nothing, a note says so."""
    values = history.points.filter(
        (pl.col("metric") == metric) & (pl.col("benchmark") == fingerprint)
    )["value"].drop_nulls()
    return bool(values.len()) and values.n_unique() == 1


def _table_rows(history: History, fingerprint: str) -> list[dict[str, str]]:
    """One row per series of a benchmark: runs, the latest value and band, its verdict,
    the marks."""
    rows: list[dict[str, str]] = []
    keys = ["endpoint", "model", "scenario", "metric"]
    points = history.points.filter(pl.col("benchmark") == fingerprint)
    multi_ep = points["endpoint"].n_unique() > 1
    for key, g in _in_model_order(points.group_by(keys, maintain_order=True)):
        endpoint, model, scenario, metric = (str(k) for k in key)
        g = g.sort("started_at")
        last = g.row(-1, named=True)
        band = DASH
        if last["band_low"] is not None:
            band = f"{_fmt(last['band_low'], metric)} – {_fmt(last['band_high'], metric)}"
        marked = [
            f"{_mark(str(r['verdict']))[2]} {r['run_name']} ({r['verdict']})"
            for r in g.filter(pl.col("outside")).iter_rows(named=True)
        ]
        rows.append(
            {
                "target": _series_label(endpoint, model, scenario, multi_ep),
                "metric": metric,
                "runs": str(g.height),
                "latest": _fmt(last["value"], metric),
                "band": band,
                "latest vs its reference": _latest_words(last),
                "outside the band": ", ".join(marked) or DASH,
            }
        )
    return rows


def _latest_words(last: dict[str, Any]) -> str:
    """The latest point's verdict against its baseline. A point outside its band is
    never "unchanged": it is outside, and compare did not call it a change (its
    interval still holds no change, or too few samples)."""
    verdict = last["verdict"]
    if not verdict:
        return DASH
    nights = last.get("reference_nights")
    against = f"vs {nights} night(s) to {last['vs_run']}" if nights else f"vs {last['vs_run']}"
    if last["outside"] and verdict not in ("regressed", "improved"):
        shown = "not significant" if verdict == "unchanged" else str(verdict).replace("_", " ")
        return f"outside its band, {shown} ({against})"
    return f"{verdict} ({against})"


def _verdict_lines(history: History) -> list[str]:
    """What the page opens with: the latest run's verdict per series (counts, then
    each series that changed or lies outside its band, quoted as the Series table
    shows it), and how many points of the whole history lie outside their band."""
    points = history.points
    if not points.height:
        return ["No run under this folder has a measured series."]
    latest = points.sort("started_at").row(-1, named=True)["run_name"]
    last = points.filter(pl.col("run_name") == latest)
    judged = last.filter(pl.col("verdict").is_not_null())
    counts = {v: judged.filter(pl.col("verdict") == v).height for v in _TOLD}
    told = ", ".join(f"{n} {v.replace('_', ' ')}" for v, n in counts.items() if n)
    outside = last.filter(pl.col("outside"))
    multi_ep = points["endpoint"].n_unique() > 1
    lines = [
        f"Latest run {latest}: {last.height} series, {judged.height} judged against their "
        f"baseline ({told or 'none judged'}); "
        + (
            f"{outside.height} outside their band."
            if outside.height
            else "every series inside its band."
        )
    ]
    rows = sorted(
        outside.iter_rows(named=True),
        key=lambda row: (
            model_key(str(row["model"])),
            natural_key(str(row["endpoint"])),
            natural_key(str(row["scenario"])),
        ),
    )
    for row in rows:
        target = _series_label(row["endpoint"], row["model"], row["scenario"], multi_ep)
        metric = str(row["metric"])
        band = f"{_fmt(row['band_low'], metric)} – {_fmt(row['band_high'], metric)}"
        lines.append(
            f"{target} {metric}: {_fmt(row['value'], metric)}, band {band}: {_latest_words(row)}."
        )
    lines.append(
        f"Across all {history.runs} runs, {history.changes.height} point(s) lie outside "
        "their band (marked in the charts; listed per series in the table)."
    )
    return lines


#: The verdicts the opening line counts, in the order it tells them.
_TOLD: Final = ("regressed", "improved", "unchanged", "inconclusive", "not_comparable")


def _benchmark_rows(history: History) -> list[dict[str, str]]:
    """The folder's benchmarks: what each measures, its runs, how it differs."""
    reasons = {
        int(r["segment"]): str(r["segment_reason"])
        for r in history.segment_starts.iter_rows(named=True)
    }
    return [
        {
            "benchmark": str(b.number + 1),
            "fingerprint": b.fingerprint,
            "measures": b.description,
            "runs": str(b.runs),
            "drawn": "yes" if b.drawn else "no (one run)",
            "differs from the one before": reasons.get(b.number, DASH),
        }
        for b in history.benchmarks
    ]


def _left_out_rows(history: History) -> list[dict[str, str]]:
    return [{"run": run, "why": why} for run, why in history.left_out]


def _md_table(rows: Sequence[dict[str, str]]) -> list[str]:
    if not rows:
        return []
    cols = list(rows[0])
    out = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    out += ["| " + " | ".join(md_escape(r[c]) for c in cols) + " |" for r in rows]
    return out


def _where(history: History, out: Path) -> str:
    """The history's folder as the pages name it: relative to the output folder (no
    machine's absolute path in a page that goes into a document)."""
    return os.path.relpath(Path(history.root).resolve(), Path(out).resolve())


def _title(history: History) -> str:
    return (
        f"tokrate history: {history.runs} runs of {len(history.benchmarks)} benchmark(s)"
        f" under {Path(history.root).resolve().name}/"
    )


def _markdown(
    history: History,
    rows: Mapping[str, list[dict[str, str]]],
    benchmarks: list[dict[str, str]],
    left_out: list[dict[str, str]],
    notes: Sequence[str] = (),
) -> str:
    """Plain Markdown: our own words as written, names and paths escaped."""
    out = [
        f"# {md_escape(_title(history))}",
        "",
        *(f"**{md_escape(line)}**\n" for line in _verdict_lines(history)),
        f"{history.changes.height} point(s) outside their band. {_band_text(history)}.",
        "",
        *_md_table(benchmarks),
    ]
    for b in history.benchmarks:
        if not b.drawn:
            continue
        out += ["", f"## {md_escape(_benchmark_title(b))}", "", *_md_table(rows[b.fingerprint])]
    if notes:
        out += ["", *(f"- left out: {md_escape(n)}" for n in notes)]
    if left_out:
        out += ["", "## Runs left out", "", *_md_table(left_out)]
    if history.warnings:
        out += ["", *(f"- warning: {md_escape(w)}" for w in history.warnings)]
    return "\n".join(out) + "\n"


def _html(
    history: History,
    rows: Mapping[str, list[dict[str, str]]],
    benchmarks: list[dict[str, str]],
    left_out: list[dict[str, str]],
    charts: Mapping[str, Mapping[str, tuple[bytes, DrawnKey]]],
    *,
    where: str,
    notes: Sequence[str] = (),
) -> str:
    band = _band_text(history)
    # The page opens with the latest run's verdicts (i44): the table they quote, the
    # series of that run's benchmark, comes first as "Series"; the other benchmarks'
    # tables and the Benchmarks table follow.
    latest = (
        history.points.sort("started_at").row(-1, named=True)["benchmark"]
        if history.points.height
        else None
    )
    lead: list[Table] = []
    tables: list[Table] = []
    images: list[ChartImage] = []
    several = sum(1 for b in history.benchmarks if b.drawn) > 1
    for b in history.benchmarks:
        if not b.drawn:
            continue
        table_rows = rows[b.fingerprint]
        first = b.fingerprint == latest and not lead
        (lead if first else tables).append(
            Table(
                title="Series" if first else _benchmark_title(b),
                header=tuple(table_rows[0]) if table_rows else (),
                rows=tuple(tuple(r.values()) for r in table_rows),
                note=(f"{_benchmark_title(b)}. " if first else "") + f"{band}.",
                numeric=tuple(
                    h in ("latest", "band") for h in (table_rows[0] if table_rows else ())
                ),
            )
        )
        images += [
            ChartImage(
                name=f"{b.fingerprint}-{m}",
                title=(f"benchmark {b.number + 1}: " if several else "") + _chart_title(m),
                caption=band,
                png=png,
                colors=drawn.colors,
                legend=drawn.legend,
            )
            for m, (png, drawn) in charts[b.fingerprint].items()
        ]
    tables.append(
        Table(
            title="Benchmarks",
            header=tuple(benchmarks[0]) if benchmarks else (),
            rows=tuple(tuple(r.values()) for r in benchmarks),
            note="Runs of one fingerprint (load settings, levels, prompts, targets, client"
            " settings) are one benchmark's history; each is drawn apart.",
        )
    )
    if left_out:
        tables.append(
            Table(
                title="Runs left out",
                header=tuple(left_out[0]),
                rows=tuple(tuple(r.values()) for r in left_out),
                note="Not a trend point, or not a reference and no noise-fit night for a level.",
            )
        )
    meta: list[tuple[str, Any]] = [
        ("folder", where),
        ("runs", str(history.runs)),
        ("benchmarks", str(len(history.benchmarks))),
        ("points outside their band", str(history.changes.height)),
        ("noise window", f"newest {history.window} earlier healthy nights of a benchmark"),
        ("thresholds", ", ".join(f"{t.metric} {t.describe()}" for t in history.thresholds)),
    ]
    return render_html(
        Page(
            title=_title(history),
            meta=meta,
            verdict=_verdict_lines(history),
            warnings=history.warnings,
            lead=lead,
            tables=tables,
            notes=notes,
            charts=images,
            colors=_colors(history),
        )
    )


def write_history(history: History, out: Path, metrics: Sequence[str]) -> None:
    """Write history.html, history.md, history.csv and
    charts/<fingerprint>/<metric>.png (one folder per drawn benchmark) into ``out``.
    Raises OutputError (one line)."""
    try:
        make_folder(out / "charts", inside=out)
        rows = {b.fingerprint: _table_rows(history, b.fingerprint) for b in history.benchmarks}
        benchmarks = _benchmark_rows(history)
        left_out = _left_out_rows(history)
        charts: dict[str, dict[str, tuple[bytes, DrawnKey]]] = {}
        colors = _colors(history)
        notes: list[str] = []
        for b in history.benchmarks:
            if not b.drawn:
                continue
            folder = out / "charts" / b.fingerprint
            make_folder(folder, inside=out)
            charts[b.fingerprint] = {}
            for metric in metrics:
                if _flat(history, metric, b.fingerprint):
                    data = history.points.filter(
                        (pl.col("metric") == metric) & (pl.col("benchmark") == b.fingerprint)
                    )
                    value = float(data["value"].drop_nulls()[0])
                    notes.append(
                        f"benchmark {b.number + 1}: {_chart_title(metric)}: left out,"
                        f" {_fmt(value, metric)} in every run of every series (nothing"
                        " changed to draw)"
                    )
                    continue
                png, drawn = _chart(history, metric, b.fingerprint, colors)
                charts[b.fingerprint][metric] = (png, drawn)
                write_atomic(folder / f"{metric}.png", png)
        md = _markdown(history, rows, benchmarks, left_out, notes)
        write_atomic(out / "history.md", md.encode("utf-8"))
        page = _html(
            history, rows, benchmarks, left_out, charts, where=_where(history, out), notes=notes
        )
        write_atomic(out / "history.html", page.encode("utf-8"))
        csv = io.BytesIO()
        history.points.with_columns(pl.col("started_at").dt.to_string("iso")).write_csv(csv)
        write_atomic(out / "history.csv", csv.getvalue())
    except OSError as err:
        raise OutputError(f"{out}: cannot write history ({err.strerror or err})") from None
    except FileRefused as err:
        raise OutputError(f"{out / 'charts'}: {err}") from None


def build_history(
    root: Path | str,
    out_dir: Path | str | None = None,
    *,
    models: Iterable[str] = (),
    metrics: Iterable[str] = (),
    window: int = NOISE_WINDOW,
    thresholds: Sequence[Threshold] = DEFAULT_THRESHOLDS,
) -> tuple[Path, History]:
    """Load the history under ``root`` and write it to ``out_dir`` (default
    ``root/history``): history.html, history.md, history.csv, charts/<metric>.png.
    Returns (out_dir, History). Raises UsageError / OutputError (one line)."""
    metric_list = tuple(metrics)
    history = load_history(
        root, models=models, metrics=metric_list, window=window, thresholds=thresholds
    )
    out = Path(out_dir) if out_dir is not None else Path(root) / "history"
    write_history(history, out, metric_list or DEFAULT_HISTORY_METRICS)
    return out, history
