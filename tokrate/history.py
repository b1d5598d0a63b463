"""Run history: trends of every stored run under a folder, with change markers.

``load_history`` reads every run folder under a directory (any depth): ``run.json`` for
the time and layout version, ``summary.json`` for the numbers (one small JSON file per
run, so hundreds of runs load in well under a second), and only when a run has no
readable summary its ``records.parquet`` through a lazy polars scan of the few columns
needed. Folders it cannot read are skipped with a one-line warning naming the folder;
it never measures.

Change detection, per series (endpoint, model, scenario, metric) in time order: the
*rolling baseline* is the median of the previous ``window`` runs (at least 3), the band
is that baseline ± the larger of the metric's compare threshold (relative; absolute for
error_rate) and 3 standard deviations of those previous runs (so a series noisier than
its threshold is not marked on every wobble), and a run outside the band is marked
``regressed`` or ``improved``. A lasting change is
marked on the first runs after it until the rolling median has moved to the new level.

``build_history`` writes ``history.html`` (through the run report's renderer,
``tokrate.report.html.render_html``: self-contained, PNG charts as data URIs, every
string escaped, no script), ``charts/<metric>.png``, ``history.md`` (the table) and
``history.csv`` (every point, the chart data).
"""

from __future__ import annotations

import io
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

import orjson
import polars as pl

from tokrate.compare import DEFAULT_THRESHOLDS, METRICS, Threshold, metric_direction
from tokrate.errors import OutputError, UsageError

__all__ = [
    "DEFAULT_HISTORY_METRICS",
    "History",
    "build_history",
    "load_history",
]

#: Layout versions of run.json and schema versions of summary.json this module reads.
READABLE_LAYOUTS: Final = (1,)
READABLE_SUMMARIES: Final = (1,)

#: Width of the noise part of the band, in standard deviations of the previous runs.
NOISE_SIGMAS: Final = 3.0

DEFAULT_HISTORY_METRICS: Final[tuple[str, ...]] = tuple(t.metric for t in DEFAULT_THRESHOLDS)

#: Series -> summary.json statistic block (schema version 1).
_SUMMARY_BLOCK: Final = {
    "ttft": "ttft_s",
    "first_answer": "first_answer_s",
    "tpot": "tpot_s",
    "e2e": "e2e_s",
    "decode_tps": "decode_tps",
}

_POINT_SCHEMA: Final[dict[str, Any]] = {
    "run_id": pl.String,
    "folder": pl.String,
    "started_at": pl.Datetime("us", "UTC"),
    "endpoint": pl.String,
    "model": pl.String,
    "scenario": pl.String,
    "metric": pl.String,
    "value": pl.Float64,
}


@dataclass(frozen=True, slots=True)
class History:
    """Every point of every series, with its rolling baseline and band.

    ``points`` columns: run_id, folder, started_at (UTC datetime), endpoint, model,
    scenario, metric, value, baseline, band_low, band_high (null until ``window``
    allows a baseline), change ("regressed" | "improved" | null).
    Values are in the metric's unit: seconds for latencies, tok/s, rate (0..1).
    """

    root: str
    points: pl.DataFrame
    runs: int
    warnings: tuple[str, ...]
    window: int
    thresholds: tuple[Threshold, ...]

    @property
    def changes(self) -> pl.DataFrame:
        return self.points.filter(pl.col("change").is_not_null())


# --- reading -------------------------------------------------------------------------


def _parse_time(value: Any) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def _summary_value(group: dict[str, Any], metric: str) -> float | None:
    if metric == "error_rate":
        counts = group.get("counts") or {}
        ok, err = counts.get("ok") or 0, counts.get("error") or 0
        return err / (ok + err) if ok + err else None
    series, stat = metric.rsplit("_", 1)
    block = group.get(_SUMMARY_BLOCK[series]) or {}
    value = block.get(stat)
    return float(value) if isinstance(value, int | float) else None


def _from_summary(summary: dict[str, Any], metrics: Sequence[str]) -> list[tuple[Any, ...]]:
    rows: list[tuple[Any, ...]] = []
    for group in summary.get("groups") or ():
        if group.get("task") is not None:
            continue  # per-task rows are not the scenario's numbers
        for metric in metrics:
            rows.append(
                (
                    str(group.get("endpoint")),
                    str(group.get("model")),
                    str(group.get("scenario")),
                    metric,
                    _summary_value(group, metric),
                )
            )
    return rows


def _from_records(folder: Path, metrics: Sequence[str]) -> list[tuple[Any, ...]]:
    """Scenario-level statistics straight from the records (lazy scan of the needed
    columns). Percentiles use linear interpolation, like ``compare``."""
    parquet = folder / "records.parquet"
    if parquet.is_file():
        lf = pl.scan_parquet(parquet)
    else:
        from tokrate.store import read_records_jsonl

        lf = read_records_jsonl(folder / "records.jsonl").lazy()
    lf = lf.filter(~pl.col("warmup").fill_null(False)).with_columns(
        pl.when(pl.col("tpot_s") > 0).then(1.0 / pl.col("tpot_s")).alias("decode_tps")
    )
    aggs: list[pl.Expr] = []
    for metric in metrics:
        if metric == "error_rate":
            err = (pl.col("status") == "error").sum()
            tot = pl.col("status").is_in(["ok", "error"]).sum()
            aggs.append(pl.when(tot > 0).then(err / tot).alias(metric))
            continue
        series, stat = metric.rsplit("_", 1)
        column = pl.col(_SUMMARY_BLOCK[series]).filter(pl.col("status") == "ok")
        if stat == "mean":
            aggs.append(column.mean().alias(metric))
        else:
            aggs.append(column.quantile(int(stat[1:]) / 100, "linear").alias(metric))
    frame = lf.group_by("endpoint", "model", "scenario").agg(aggs).collect()
    rows: list[tuple[Any, ...]] = []
    for row in frame.iter_rows(named=True):
        for metric in metrics:
            rows.append((row["endpoint"], row["model"], row["scenario"], metric, row[metric]))
    return rows


def _read_folder(
    folder: Path, metrics: Sequence[str], warnings: list[str]
) -> tuple[str, datetime, list[tuple[Any, ...]]] | None:
    """(run_id, started_at, rows) of one run folder, or None (with a warning)."""
    try:
        run = orjson.loads((folder / "run.json").read_bytes())
    except (OSError, orjson.JSONDecodeError) as err:
        warnings.append(f"skipping {folder}: run.json unreadable ({err})")
        return None
    if not isinstance(run, dict):
        warnings.append(f"skipping {folder}: run.json is not an object")
        return None
    layout = run.get("layout_version")
    if layout not in READABLE_LAYOUTS:
        warnings.append(
            f"skipping {folder}: run folder layout_version {layout!r} is not one this "
            f"tokrate reads ({', '.join(map(str, READABLE_LAYOUTS))}); upgrade tokrate"
        )
        return None
    status = run.get("status")
    if status != "complete":
        # A partial run's percentiles are not those of the benchmark; as a trend point
        # it would only draw false markers.
        warnings.append(f"skipping {folder}: run status is {status!r}, not 'complete'")
        return None
    started = _parse_time(run.get("started_at"))
    if started is None:
        warnings.append(f"skipping {folder}: run.json has no valid started_at")
        return None
    run_id = str(run.get("run_id") or folder.name)
    summary_path = folder / "summary.json"
    rows: list[tuple[Any, ...]] | None = None
    if summary_path.is_file():
        try:
            summary = orjson.loads(summary_path.read_bytes())
            version = summary.get("schema_version")
            if version in READABLE_SUMMARIES:
                rows = _from_summary(summary, metrics)
            else:
                warnings.append(
                    f"{folder}: summary.json schema_version {version!r} is not readable "
                    "here; using records instead"
                )
        except (OSError, orjson.JSONDecodeError, AttributeError, KeyError, ValueError) as err:
            warnings.append(f"{folder}: summary.json unreadable ({err}); using records instead")
    if rows is None:
        if not (folder / "records.parquet").is_file() and not (folder / "records.jsonl").is_file():
            warnings.append(f"skipping {folder}: no readable summary.json and no records")
            return None
        try:
            rows = _from_records(folder, metrics)
        except (OSError, pl.exceptions.PolarsError) as err:
            warnings.append(f"skipping {folder}: records unreadable ({err})")
            return None
    return run_id, started, rows


def _run_folders(root: Path) -> list[Path]:
    return sorted(p.parent for p in root.rglob("run.json"))


# --- change detection ----------------------------------------------------------------


def _with_bands(points: pl.DataFrame, thresholds: Sequence[Threshold], window: int) -> pl.DataFrame:
    """Add baseline (rolling median of the previous ``window`` runs, >= 3 of them),
    band_low/band_high and change, per series."""
    limits = {t.metric: t for t in thresholds}
    keys = ["endpoint", "model", "scenario", "metric"]
    min_periods = min(3, window)
    previous = pl.col("value").shift(1)
    out = points.sort([*keys, "started_at", "run_id"]).with_columns(
        previous.rolling_median(window_size=window, min_samples=min_periods)
        .over(keys)
        .alias("baseline"),
        previous.rolling_std(window_size=window, min_samples=min_periods)
        .over(keys)
        .fill_null(0.0)
        .alias("_spread"),
    )
    limit_of = pl.col("metric").replace_strict(
        {m: limits[m].limit for m in limits}, default=None, return_dtype=pl.Float64
    )
    floor_of = pl.col("metric").replace_strict(
        {m: limits[m].floor for m in limits}, default=0.0, return_dtype=pl.Float64
    )
    absolute = pl.col("metric") == "error_rate"
    half = pl.when(absolute).then(limit_of).otherwise(pl.col("baseline").abs() * limit_of)
    # The band is the threshold, widened to NOISE_SIGMAS run-to-run standard deviations
    # of the previous runs where the series is noisier than its threshold: a marker
    # then means a change, not a p95 of 30 requests wobbling.
    half = pl.max_horizontal(half, floor_of, NOISE_SIGMAS * pl.col("_spread"))
    higher_better = pl.col("metric").is_in(
        [m for m in METRICS if metric_direction(m) == "higher_is_better"]
    )
    out = out.with_columns(
        (pl.col("baseline") - half).alias("band_low"),
        (pl.col("baseline") + half).alias("band_high"),
    )
    above = pl.col("value") > pl.col("band_high")
    below = pl.col("value") < pl.col("band_low")
    out = out.with_columns(
        pl.when(above & ~higher_better)
        .then(pl.lit("regressed"))
        .when(below & higher_better)
        .then(pl.lit("regressed"))
        .when(above | below)
        .then(pl.lit("improved"))
        .otherwise(None)
        .alias("change")
    )
    return out.drop("_spread").sort(["started_at", "run_id", *keys])


def load_history(
    root: Path | str,
    *,
    models: Iterable[str] = (),
    metrics: Iterable[str] = (),
    window: int = 10,
    thresholds: Sequence[Threshold] = DEFAULT_THRESHOLDS,
) -> History:
    """Read every run folder under ``root`` and compute bands and change markers.

    ``models`` keeps only those model names (all when empty); ``metrics`` defaults to
    DEFAULT_HISTORY_METRICS. A metric without a threshold gets a line but no band.
    Raises UsageError for a missing root, an unknown metric or ``window < 1``.
    """
    root = Path(root)
    if not root.is_dir():
        raise UsageError(f"{root}: no such directory")
    metric_list = tuple(metrics) or DEFAULT_HISTORY_METRICS
    for m in metric_list:
        if m not in METRICS:
            raise UsageError(f"--metric {m!r}: unknown metric (known: {', '.join(METRICS)})")
    if window < 1:
        raise UsageError(f"--window must be >= 1, got {window}")
    warnings: list[str] = []
    rows: list[tuple[Any, ...]] = []
    runs = 0
    for folder in _run_folders(root):
        got = _read_folder(folder, metric_list, warnings)
        if got is None:
            continue
        runs += 1
        run_id, started, run_rows = got
        rows.extend((run_id, str(folder), started, *r) for r in run_rows)
    points = pl.DataFrame(rows, schema=_POINT_SCHEMA, orient="row")
    model_set = set(models)
    if model_set:
        points = points.filter(pl.col("model").is_in(sorted(model_set)))
    points = _with_bands(points.drop_nulls("value"), thresholds, window)
    return History(
        root=str(root),
        points=points,
        runs=runs,
        warnings=tuple(warnings),
        window=window,
        thresholds=tuple(thresholds),
    )


# --- rendering -----------------------------------------------------------------------


def _unit(metric: str) -> tuple[str, float]:
    """Axis unit and the factor from stored values to it."""
    if metric == "error_rate":
        return "%", 100.0
    if metric.startswith("decode_tps"):
        return "tok/s", 1.0
    return "ms", 1000.0


def _series_label(endpoint: str, model: str, scenario: str, multi_ep: bool) -> str:
    return f"{endpoint}/{model} {scenario}" if multi_ep else f"{model} {scenario}"


def _chart(history: History, metric: str) -> bytes:
    """One PNG: a line per series over time, the band, and change markers."""
    from matplotlib.figure import Figure

    unit, factor = _unit(metric)
    data = history.points.filter(pl.col("metric") == metric)
    multi_ep = data["endpoint"].n_unique() > 1
    fig = Figure(figsize=(9, 4.2), dpi=100)
    ax = fig.add_subplot()
    threshold = next((t for t in history.thresholds if t.metric == metric), None)
    for (endpoint, model, scenario), g in data.group_by(
        ["endpoint", "model", "scenario"], maintain_order=True
    ):
        g = g.sort("started_at")
        x = g["started_at"].to_list()
        (line,) = ax.plot(
            x,
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
        for change, marker, color in (("regressed", "v", "#c0392b"), ("improved", "^", "#1e8449")):
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
    band_text = (
        f"band: median of previous {history.window} runs "
        f"± max({threshold.describe().lstrip('+-')}, {NOISE_SIGMAS:g}σ)"
        if threshold
        else "no threshold, no band"
    )
    ax.set_title(f"{metric} over time ({band_text}; ▼ regressed, ▲ improved)", fontsize=10)
    ax.set_ylabel(f"{metric} ({unit})")
    ax.grid(True, alpha=0.3)
    if data.height:
        ax.legend(fontsize=8, loc="best")
    fig.autofmt_xdate()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", bbox_inches="tight")
    return buf.getvalue()


def _fmt(value: float | None, metric: str) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    unit, factor = _unit(metric)
    return f"{value * factor:.1f} {unit}" if unit != "%" else f"{value * factor:.2f}%"


def _table_rows(history: History) -> list[dict[str, str]]:
    """One row per series: runs, latest value, rolling baseline, change, markers."""
    rows: list[dict[str, str]] = []
    keys = ["endpoint", "model", "scenario", "metric"]
    multi_ep = history.points["endpoint"].n_unique() > 1
    for key, g in history.points.group_by(keys, maintain_order=True):
        endpoint, model, scenario, metric = (str(k) for k in key)
        g = g.sort("started_at")
        last = g.row(-1, named=True)
        flagged = g.filter(pl.col("change").is_not_null())
        base = last["baseline"]
        rel = ""
        if base:
            rel = (
                f"{(last['value'] - base) * 100:+.2f}pp"
                if metric == "error_rate"
                else f"{(last['value'] / base - 1) * 100:+.1f}%"
            )
        rows.append(
            {
                "target": _series_label(endpoint, model, scenario, multi_ep),
                "metric": metric,
                "runs": str(g.height),
                "latest": _fmt(last["value"], metric),
                "baseline": _fmt(base, metric),
                "latest vs baseline": rel or "–",
                "latest change": last["change"] or "–",
                "changes": ", ".join(
                    f"{r['run_id']} ({r['change']})" for r in flagged.iter_rows(named=True)
                )
                or "–",
            }
        )
    return rows


def _markdown(history: History, rows: list[dict[str, str]]) -> str:
    out = [
        f"# tokrate history: {history.runs} runs under {history.root}",
        "",
        f"{history.changes.height} change(s) detected "
        f"(band: median of the previous {history.window} runs ± max(threshold, "
        f"{NOISE_SIGMAS:g}σ)).",
        "",
    ]
    if rows:
        cols = list(rows[0])
        out.append("| " + " | ".join(cols) + " |")
        out.append("|" + "---|" * len(cols))
        for r in rows:
            out.append("| " + " | ".join(r[c].replace("|", "\\|") for c in cols) + " |")
    for w in history.warnings:
        out.append(f"\n- warning: {w}")
    return "\n".join(out) + "\n"


def _html(history: History, rows: list[dict[str, str]], charts: dict[str, bytes]) -> str:
    """history.html through the run report's renderer (tokrate.report.html), so both
    pages share one style, one escaping path and the same no-script CSP."""
    from tokrate.report.html import ChartImage, render_html
    from tokrate.report.tables import Table

    band = (
        f"band: median of the previous {history.window} runs ± the larger of the metric's "
        f"compare threshold and {NOISE_SIGMAS:g} standard deviations of those runs; "
        "▼ regressed, ▲ improved"
    )
    header = tuple(rows[0]) if rows else ()
    table = Table(
        title="Series",
        header=header,
        rows=tuple(tuple(r.values()) for r in rows),
        note=f"{history.changes.height} change(s) detected; {band}.",
        numeric=tuple(h in ("runs", "latest", "baseline", "latest vs baseline") for h in header),
    )
    images = [
        ChartImage(name=m, title=f"{m} over time", caption=band, png=png)
        for m, png in charts.items()
    ]
    return render_html(
        title=f"tokrate history: {history.runs} runs under {history.root}",
        meta=(
            ("folder", history.root),
            ("runs", str(history.runs)),
            ("changes detected", str(history.changes.height)),
            ("rolling window", f"{history.window} runs"),
            ("thresholds", ", ".join(f"{t.metric} {t.describe()}" for t in history.thresholds)),
        ),
        banners=(),
        warnings=history.warnings,
        tier=None,
        tables=(table,),
        charts=images,
        notes=(),
        errors=None,
        configs=(),
    )


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
    history = load_history(
        root, models=models, metrics=metrics, window=window, thresholds=thresholds
    )
    out = Path(out_dir) if out_dir is not None else Path(root) / "history"
    try:
        (out / "charts").mkdir(parents=True, exist_ok=True)
        rows = _table_rows(history)
        charts: dict[str, bytes] = {}
        for metric in tuple(metrics) or DEFAULT_HISTORY_METRICS:
            charts[metric] = _chart(history, metric)
            (out / "charts" / f"{metric}.png").write_bytes(charts[metric])
        (out / "history.md").write_text(_markdown(history, rows), encoding="utf-8")
        (out / "history.html").write_text(_html(history, rows, charts), encoding="utf-8")
        history.points.with_columns(pl.col("started_at").dt.to_string("iso")).write_csv(
            out / "history.csv"
        )
    except OSError as err:
        raise OutputError(f"{out}: cannot write history ({err.strerror})") from None
    return out, history
