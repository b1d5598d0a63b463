"""The declarations of the report's core charts (drawn by tokrate.report.charts).

Each function takes the report's inputs and yields its chart — data, draw function,
caption — or a :class:`~tokrate.report.model.LeftOut` note saying why there is none.
tokrate.report.contents lists them in report order with the charts of the other
sections (capacity, server load, streams, connections, workloads).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import polars as pl
from matplotlib.figure import Figure

from tokrate.hardware import HardwareProfile
from tokrate.report import charts
from tokrate.report import data as _data
from tokrate.report.model import Chart, LeftOut, ReportInputs, SizeSpeed
from tokrate.report.size_text import bound_assumptions, size_caption
from tokrate.report.terminal.stream_words import who_held
from tokrate.report.timeline_data import timeline_bins

__all__ = [
    "cost_vs_speed",
    "latency_boxes",
    "size_vs_speed",
    "throughput_vs_latency",
    "timeline",
    "ttft_cdf",
]

Entry = Iterator["Chart[Any] | LeftOut"]


@dataclass(frozen=True, slots=True)
class SizeChart:
    """What the size chart is drawn from: its points and fits, the hardware of the
    bound, and the sentences saying what the bound assumes."""

    size: SizeSpeed
    hardware: HardwareProfile
    assumptions: tuple[str, ...]


def _draw_size(data: SizeChart) -> Figure:
    size = data.size
    return charts.size_vs_speed(
        size.points,
        data.hardware,
        size.fits,
        per_gpu=size.per_gpu,
        assumptions=data.assumptions,
    )


def size_vs_speed(inputs: ReportInputs) -> Entry:
    """The headline: decode speed and TTFT against model size, with the bound and
    what it assumes written on the chart and in its caption alike."""
    size = inputs.size_speed
    yield from (LeftOut(note) for note in size.notes)
    if size.points.height:
        # The bound's hardware is an assumption where nobody named it and a target
        # is a real server (a simulated one runs on the profile it was given).
        real = not bool(size.points["simulated"].fill_null(False).all())
        assumed = real and not inputs.hardware_named
        assumptions = bound_assumptions(size.points, inputs.hardware, hardware_assumed=assumed)
        assumptions += _time_scale_notes(inputs)
        yield Chart(
            "size_vs_speed",
            "Model size vs speed",
            size_caption(size.points, size.fits, inputs.hardware, hardware_assumed=assumed),
            SizeChart(size, inputs.hardware, tuple(assumptions)),
            _draw_size,
        )
    elif not any("no measurable decode speed" in n for n in size.notes):
        yield LeftOut("model size vs speed: no target has a known size (set params_b in [[model]])")


def _time_scale_notes(inputs: ReportInputs) -> list[str]:
    """On the chart itself, why a sped-up simulator's points sit above the bound: its
    durations are divided by its time scale, so its speeds are that many times the
    physical ones (the report's warning says the same, but a chart travels alone)."""
    out = []
    for key, run in inputs.runs:
        scale = run.info.time_scale
        if scale is not None and scale != 1:
            who = f"Run {key}: the" if inputs.multi else "The"
            out.append(
                f"{who} simulator ran {scale:g}x faster than real time (time_scale={scale:g}),"
                f" so its speeds sit {scale:g}x above the bound drawn."
            )
    return out


def ttft_cdf(inputs: ReportInputs) -> Entry:
    ecdf = _data.size_order(
        _data.ecdf_points(inputs.records, "ttft_s", ["series", "model"]), inputs.sizes
    )
    if not ecdf.height:
        yield LeftOut("TTFT distribution: no ok request has a TTFT")
        return
    yield Chart(
        "ttft_cdf",
        "TTFT distribution",
        "Empirical CDF of time to first token per model (ok requests, every load level).",
        ecdf,
        charts.ttft_cdf,
    )


def _draw_boxes(data: tuple[pl.DataFrame, pl.DataFrame]) -> Figure:
    return charts.latency_boxes(*data)


def latency_boxes(inputs: ReportInputs) -> Entry:
    by = ["series", "model"]
    tpot = _data.size_order(_data.box_stats(inputs.records, "tpot_s", by), inputs.sizes)
    itl = _data.size_order(_data.box_stats(inputs.records, "itl_s", by), inputs.sizes)
    if tpot.height or itl.height:
        yield Chart(
            "latency_boxes",
            "TPOT and inter-token latency",
            "Box: p25–p75, line: median, diamond: mean, whiskers: p10–p90 (ms, log scale).",
            (tpot, itl),
            _draw_boxes,
        )
    elif any(g.stream and g.stream.buffered for _, s in inputs.summaries for g in s.groups):
        streams = [g.stream for _, s in inputs.summaries for g in s.groups if g.stream]
        lags = [st.client_held_lag_max_ms or 0.0 for st in streams if st.client_held]
        who = who_held(
            sum(st.buffered for st in streams),
            sum(st.client_held for st in streams),
            sum(st.short_hold for st in streams),
            max(lags) if lags else None,
        )
        words = f"{who}: ITL/TPOT not meaningful"
        yield LeftOut(f"TPOT / ITL distribution: {words}")
    else:
        yield LeftOut("TPOT / ITL distribution: no ok request with 2 or more tokens")


def throughput_vs_latency(inputs: ReportInputs) -> Entry:
    sweep = inputs.groups.filter(
        pl.col("aggregate_tps").is_not_null() & pl.col("decode_p50").is_not_null()
    )
    multi_level = sweep.group_by(["series", "model"]).len().filter(pl.col("len") >= 2)
    sweep = sweep.join(multi_level.select("series", "model"), on=["series", "model"], how="semi")
    if not sweep.height:
        yield LeftOut(
            "throughput vs latency: no sweep (run with --concurrency 1,4,16 or several rates)"
        )
        return
    yield Chart(
        "throughput_vs_latency",
        "Throughput vs latency",
        "One curve per model over the load levels of the sweep (labels: concurrency or rate).",
        sweep,
        charts.throughput_vs_latency,
    )


def _draw_timeline(data: tuple[pl.DataFrame, float]) -> Figure:
    return charts.timeline(*data)


def timeline(inputs: ReportInputs) -> Entry:
    bins, width = timeline_bins(inputs.records)
    bins = _data.size_order(bins, inputs.sizes)
    if not bins.height:
        yield LeftOut("timeline: no measured requests")
        return
    yield Chart(
        "timeline",
        "Timeline",
        "Output tokens/s by the time each chunk arrived (and failed requests per bin, "
        "when any failed), per target.",
        (bins, width),
        _draw_timeline,
    )


def cost_vs_speed(inputs: ReportInputs) -> Entry:
    cost = inputs.groups.filter(
        pl.col("usd_per_1k").is_not_null() & pl.col("decode_p50").is_not_null()
    )
    if not cost.height:
        yield LeftOut(
            "cost vs speed: no prices (set price_in_per_m and price_out_per_m, or "
            "gpu_hourly_usd and gpus, in [[model]])"
        )
        return
    yield Chart(
        "cost_vs_speed",
        "Cost vs speed",
        "USD per 1,000 requests, the figure the tier pick ranks by: the requests' own "
        "input and output tokens at the model's token prices (●), or GPU-hour price × "
        "GPUs over the measured throughput (▲).",
        cost,
        charts.cost_vs_speed,
    )
