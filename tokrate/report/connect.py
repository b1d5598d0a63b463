"""Connection set-up in the report: the distribution of connect times, and whether TTFT
carries them.

Two sources per run: the connections opened *before* each measured window
(run.json ``connections``, written when ``[client] preconnect`` is on, the default)
and those opened *inside* it by a request (records with ``connect_s > 0``: with
preconnect off every stream's first request, or a reconnect after the server closed
a connection). A request's ``connect_s`` lies before its t0 (when the request left),
inside its ``send_queue_s`` and TTFT from due (in runs recorded before t0 was the
departure, no ``t0_source``: inside its TTFT), so a run with preconnect off measured
cold starts there, and the report says so (:func:`notes`).
Runs recorded before ``connect_s`` existed have neither source: the chart is then
left out with a note, never drawn empty.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, Final

import numpy as np
import polars as pl
from matplotlib.figure import Figure

from tokrate.analysis.ordering import natural_key
from tokrate.report.figures import house_style, new_figure, plain_log_axes
from tokrate.report.model import Chart, LeftOut, ReportInputs
from tokrate.report.styles import series_colors
from tokrate.runfolder.run_info import RunInfo

__all__ = ["BEFORE", "INSIDE", "connect_chart", "connect_entry", "connect_points", "notes"]

#: Phase labels of the two sources.
BEFORE: Final = "opened before the window"
INSIDE: Final = "opened by a request"

_SCHEMA: Final = {"series": pl.String, "phase": pl.String, "connect_ms": pl.Float64}


def connect_points(runs: Sequence[tuple[str, RunInfo, pl.DataFrame]]) -> pl.DataFrame:
    """Every connection set-up time in ms: columns ``series`` (the endpoint; "run
    key/endpoint" when several runs), ``phase`` (:data:`BEFORE` or :data:`INSIDE`)
    and ``connect_ms``. ``runs`` is (run key, run.json, records)."""
    multi = len(runs) > 1
    rows: list[dict[str, Any]] = []
    parts: list[pl.DataFrame] = []
    for key, run, records in runs:
        prefix = f"{key}/" if multi else ""
        for entry in run.connections:
            series = f"{prefix}{entry.endpoint}"
            for seconds in entry.connect_s:
                rows.append({"series": series, "phase": BEFORE, "connect_ms": seconds * 1e3})
        if "connect_s" in records.columns and records.height:
            parts.append(
                records.filter(pl.col("connect_s") > 0).select(
                    (pl.lit(prefix) + pl.col("endpoint")).alias("series"),
                    pl.lit(INSIDE).alias("phase"),
                    (pl.col("connect_s") * 1e3).alias("connect_ms"),
                )
            )
    frames = [pl.DataFrame(rows, schema=_SCHEMA), *(p.cast(_SCHEMA) for p in parts)]  # type: ignore[arg-type]
    return pl.concat(frames, how="vertical")


def notes(runs: Sequence[tuple[str, RunInfo, pl.DataFrame]]) -> list[tuple[str, str]]:
    """One (key, text) line per run for the report's metadata: how connections were
    made and which latency includes their set-up (cold starts)."""
    out: list[tuple[str, str]] = []
    multi = len(runs) > 1
    for key, run, records in runs:
        if run.preconnect is None:
            continue  # recorded before connections were tracked
        label = f"{key}: connections" if multi else "connections"
        known = records.filter(pl.col("connect_s").is_not_null()) if records.height else records
        opened = known.filter(pl.col("connect_s") > 0)
        n, total = opened.height, known.height
        inside = f"{n} of {total} requests opened a connection"
        if n:
            p50 = float(opened["connect_s"].median() or 0.0) * 1e3  # type: ignore[arg-type]
            inside += f" (set-up p50 {p50:.2f} ms)"
        if run.preconnect:
            before = sum(e.opened for e in run.connections)
            text = (
                f"preconnect on: {before} opened before the measured windows, so TTFT carries"
                f" no handshake; during the measurement {inside}"
            )
        elif records.height and records["t0_source"].is_not_null().any():
            text = (
                f"cold starts (preconnect off): {inside}; that TCP/TLS set-up is inside"
                " their TTFT from due (TTFT counts from when the request left)"
            )
        else:
            text = (
                f"cold starts (preconnect off): {inside}, and their TTFT includes that"
                " TCP/TLS set-up"
            )
        out.append((label, text))
    return out


def connect_entry(inputs: ReportInputs) -> Iterator[Chart[Any] | LeftOut]:
    """The connect-time chart, or a note when no run recorded connection set-ups."""
    points = connect_points([(k, r.info, r.records) for k, r in inputs.runs])
    if not points.height:
        yield LeftOut("connect time: no connection set-up recorded in these runs")
        return
    yield Chart(
        "connect_time",
        "Connect time",
        "DNS + TCP (+ TLS) set-up of every connection: solid, opened before the "
        "measured window (preconnect); dashed, opened by a request (before it left: inside "
        "its TTFT from due).",
        points,
        connect_chart,
    )


@house_style
def connect_chart(points: pl.DataFrame) -> Figure:
    """Connect time ECDF per (series, phase); x: milliseconds, log scale."""
    fig, (ax,) = new_figure(8, 4.2)
    groups = list(points.group_by(["series", "phase"], maintain_order=True))
    colors = series_colors([str(k[0]) for k, _ in groups])
    for (series, phase), part in sorted(
        groups, key=lambda kp: (natural_key(str(kp[0][0])), str(kp[0][1]))
    ):
        x = np.sort(part.get_column("connect_ms").to_numpy())
        p = np.arange(1, len(x) + 1) / len(x)
        style = "-" if phase == BEFORE else "--"
        ax.step(
            x,
            p,
            where="post",
            color=colors[str(series)],
            ls=style,
            lw=1.5,
            label=f"{series}, {phase} (n={len(x)}, p50 {np.median(x):.2f} ms)",
        )
    ax.set_xscale("log")
    plain_log_axes(ax, y=False)
    ax.set_ylim(0, 1.02)
    ax.set_xlabel("connection set-up: DNS + TCP + TLS (ms, log scale)")
    ax.set_ylabel("fraction of connections ≤ x")
    ax.set_title("Connect time (kept out of TTFT unless the run measured cold starts)")
    ax.legend(loc="lower right", frameon=False)
    return fig
