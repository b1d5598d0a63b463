"""``tokrate history``'s pages: history.html, history.md, history.csv and one chart per
metric, from a :class:`tokrate.analysis.history.History` (renderers only; every verdict and band
was computed there).

history.html goes through the run report's renderer (:mod:`tokrate.report.html`): one
style, one escaping path, the same no-script CSP. Charts: a line per series over time,
the noise band shaded, ▼ where compare's verdict against the previous run is
"regressed", ▲ "improved".
"""

from __future__ import annotations

import io
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, Final

import polars as pl

from tokrate.analysis.history import DEFAULT_HISTORY_METRICS, NOISE_SIGMAS, History, load_history
from tokrate.analysis.ordering import model_key, natural_key
from tokrate.errors import OutputError
from tokrate.fileio import write_atomic
from tokrate.report.html import ChartImage, Page, render_html
from tokrate.report.tables import Table
from tokrate.spec.thresholds import DEFAULT_THRESHOLDS, Threshold
from tokrate.textfmt import DASH, fmt_ms, fmt_tps, md_escape

__all__ = ["build_history", "write_history"]

_MARKS: Final = (("regressed", "v", "#c0392b"), ("improved", "^", "#1e8449"))


def _unit(metric: str) -> tuple[str, float]:
    """Axis unit and the factor from stored values to it."""
    if metric == "error_rate":
        return "%", 100.0
    if metric.startswith("decode_tps"):
        return "tok/s", 1.0
    return "ms", 1000.0


def _fmt(value: float | None, metric: str) -> str:
    if value is None:
        return DASH
    if metric == "error_rate":
        return f"{value * 100:.2f}%"
    if metric.startswith("decode_tps"):
        return fmt_tps(value, " tok/s")
    return fmt_ms(value)


def _band_text(history: History) -> str:
    return (
        f"band: run-to-run noise, median of the previous {history.window} runs ± "
        f"{NOISE_SIGMAS:g}σ of them; ▼ regressed, ▲ improved (compare's verdict against "
        "the series' previous run)"
    )


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


def _chart(history: History, metric: str) -> bytes:
    from matplotlib.figure import Figure

    unit, factor = _unit(metric)
    data = history.points.filter(pl.col("metric") == metric)
    multi_ep = data["endpoint"].n_unique() > 1
    fig = Figure(figsize=(9, 4.6), dpi=100, layout="constrained")
    ax = fig.add_subplot()
    for (endpoint, model, scenario), g in _in_model_order(
        data.group_by(["endpoint", "model", "scenario"], maintain_order=True)
    ):
        g = g.sort("started_at")
        (line,) = ax.plot(
            g["started_at"].to_list(),
            (g["value"] * factor).to_list(),
            marker=".",
            markersize=3,
            linewidth=1.2,
            label=_series_label(str(endpoint), str(model), str(scenario), multi_ep),
        )
        band = g.filter(pl.col("band_low").is_not_null())
        if band.height:
            ax.fill_between(
                band["started_at"].to_list(),
                (band["band_low"] * factor).to_list(),
                (band["band_high"] * factor).to_list(),
                color=line.get_color(),
                alpha=0.15,
                linewidth=0,
                step="mid",
            )
        for change, marker, color in _MARKS:
            hit = g.filter(pl.col("change") == change)
            if hit.height:
                ax.scatter(
                    hit["started_at"].to_list(),
                    (hit["value"] * factor).to_list(),
                    marker=marker,
                    s=60,
                    color=color,
                    zorder=5,
                    edgecolors="black",
                    linewidths=0.5,
                )
    # Zero-based axis: a trend chart that starts at the data minimum makes noise look
    # like a cliff.
    ax.set_ylim(bottom=0)
    ax.set_title(f"{metric} over time", fontsize=10)
    ax.set_ylabel(f"{metric} ({unit})")
    ax.grid(True, alpha=0.3)
    if data.height:
        # Outside the data: a trend legend over the lines hides the newest nights.
        ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    for label in ax.get_xticklabels():
        label.set_rotation(30)
        label.set_horizontalalignment("right")
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return buf.getvalue()


def _table_rows(history: History) -> list[dict[str, str]]:
    """One row per series: runs, latest value, its noise band, verdict, markers."""
    rows: list[dict[str, str]] = []
    keys = ["endpoint", "model", "scenario", "metric"]
    multi_ep = history.points["endpoint"].n_unique() > 1
    for key, g in _in_model_order(history.points.group_by(keys, maintain_order=True)):
        endpoint, model, scenario, metric = (str(k) for k in key)
        g = g.sort("started_at")
        last = g.row(-1, named=True)
        flagged = g.filter(pl.col("change").is_not_null())
        band = DASH
        if last["band_low"] is not None:
            band = f"{_fmt(last['band_low'], metric)} – {_fmt(last['band_high'], metric)}"
        rows.append(
            {
                "target": _series_label(endpoint, model, scenario, multi_ep),
                "metric": metric,
                "runs": str(g.height),
                "latest": _fmt(last["value"], metric),
                "noise band": band,
                "latest vs previous": last["change"] or ("unchanged" if last["vs_run"] else DASH),
                "changes": ", ".join(
                    f"{r['run_name']} ({r['change']})" for r in flagged.iter_rows(named=True)
                )
                or DASH,
            }
        )
    return rows


def _markdown(history: History, rows: list[dict[str, str]]) -> str:
    out = [
        f"# tokrate history: {history.runs} runs under {md_escape(history.root)}",
        "",
        f"{history.changes.height} change(s) detected ({md_escape(_band_text(history))}).",
        "",
    ]
    if rows:
        cols = list(rows[0])
        out.append("| " + " | ".join(cols) + " |")
        out.append("|" + "---|" * len(cols))
        for r in rows:
            out.append("| " + " | ".join(md_escape(r[c]) for c in cols) + " |")
    for w in history.warnings:
        out.append(f"\n- warning: {md_escape(w)}")
    return "\n".join(out) + "\n"


def _html(history: History, rows: list[dict[str, str]], charts: dict[str, bytes]) -> str:
    header = tuple(rows[0]) if rows else ()
    band = _band_text(history)
    table = Table(
        title="Series",
        header=header,
        rows=tuple(tuple(r.values()) for r in rows),
        note=f"{history.changes.height} change(s) detected; {band}.",
        numeric=tuple(h in ("runs", "latest", "noise band") for h in header),
    )
    images = [
        ChartImage(name=m, title=f"{m} over time", caption=band, png=png)
        for m, png in charts.items()
    ]
    return render_html(
        Page(
            title=f"tokrate history: {history.runs} runs under {history.root}",
            meta=(
                ("folder", history.root),
                ("runs", str(history.runs)),
                ("changes detected", str(history.changes.height)),
                ("noise window", f"{history.window} runs"),
                ("thresholds", ", ".join(f"{t.metric} {t.describe()}" for t in history.thresholds)),
            ),
            warnings=history.warnings,
            tables=(table,),
            charts=images,
        )
    )


def write_history(history: History, out: Path, metrics: Sequence[str]) -> None:
    """Write history.html, history.md, history.csv and charts/<metric>.png into
    ``out``. Raises OutputError (one line)."""
    try:
        (out / "charts").mkdir(parents=True, exist_ok=True)
        rows = _table_rows(history)
        charts: dict[str, bytes] = {}
        for metric in metrics:
            charts[metric] = _chart(history, metric)
            write_atomic(out / "charts" / f"{metric}.png", charts[metric])
        write_atomic(out / "history.md", _markdown(history, rows).encode("utf-8"))
        write_atomic(out / "history.html", _html(history, rows, charts).encode("utf-8"))
        csv = io.BytesIO()
        history.points.with_columns(pl.col("started_at").dt.to_string("iso")).write_csv(csv)
        write_atomic(out / "history.csv", csv.getvalue())
    except OSError as err:
        raise OutputError(f"{out}: cannot write history ({err.strerror or err})") from None


def build_history(
    root: Path | str,
    out_dir: Path | str | None = None,
    *,
    models: Iterable[str] = (),
    metrics: Iterable[str] = (),
    window: int = 10,
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
