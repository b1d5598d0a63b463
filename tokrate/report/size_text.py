"""The words around the size-vs-speed chart: its caption, what its bound assumes, and
the fitted power laws — one source for the chart, its caption and the metadata, so
the caption never describes a line the chart does not draw."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import polars as pl

from tokrate.analysis.ordering import model_key, natural_key
from tokrate.analysis.stats import PowerLawFit
from tokrate.hardware import TENSOR_PARALLEL_EFFICIENCY, HardwareProfile
from tokrate.report.data import ASSUMED_BYTES_PER_PARAM
from tokrate.runfolder.summary import Summary
from tokrate.textfmt import level_label

__all__ = [
    "above_bound_warnings",
    "bandwidth_text",
    "bound_assumptions",
    "describe_fit",
    "fit_notes",
    "mark_above_bound",
    "size_caption",
]


def describe_fit(fit: PowerLawFit) -> str:
    """ "k = 0.98, 95% CI 0.93–1.03"; "k = 1.00, 95% CI 0.996–1.004" (a third digit where
    two would print the same number twice); "k = 1.00 (exact: every point on the line)"
    where three digits still would (the simulator's exact physics); "k = 1.10 (two sizes:
    no interval)"."""
    k = f"k = {fit.k:.2f}"
    if fit.exponent_ci is None:
        return f"{k} ({fit.n} sizes: no interval)"
    lo, hi = -fit.exponent_ci[1], -fit.exponent_ci[0]
    for digits in (2, 3):
        low, high = f"{lo:.{digits}f}", f"{hi:.{digits}f}"
        if low != high:
            return f"{k}, 95% CI {low}–{high}"
    return f"{k} (exact: every point on the line)"


def bandwidth_text(bytes_per_s: float) -> str:
    """ "2.04 TB/s", or "89.6 GB/s" for the tens of GB/s a CPU has."""
    if bytes_per_s >= 1e12:
        return f"{bytes_per_s / 1e12:.2f} TB/s"
    return f"{bytes_per_s / 1e9:.1f} GB/s"


def _names(points: pl.DataFrame, mask: pl.Expr) -> list[str]:
    """The models ``mask`` selects, smallest first (then by name)."""
    chosen = points.filter(mask)
    if "x_params_b" not in chosen.columns:
        return sorted(set(chosen.get_column("model").to_list()), key=model_key)
    sizes = chosen.group_by("model").agg(pl.col("x_params_b").min()).iter_rows()
    return [m for m, _ in sorted(sizes, key=lambda r: (r[1], model_key(r[0])))]


def _listed(names: Sequence[str], most: int = 4) -> str:
    shown = ", ".join(names[:most])
    return shown + (f" and {len(names) - most} more" if len(names) > most else "")


def bound_assumptions(
    points: pl.DataFrame, hardware: HardwareProfile, *, hardware_assumed: bool
) -> list[str]:
    """What the bound line stands on, one sentence each: the hardware (and that it
    is tokrate's default where nobody named it for a real endpoint), the bytes per
    parameter assumed where a target gives none, the multi-GPU factor, the GPU count
    assumed where a real target gives none."""
    hw = f"{hardware.description}, {bandwidth_text(hardware.bandwidth_bytes_per_s)}"
    if hardware_assumed:
        hw += " (tokrate's default, not your hardware: set [output] hardware or --hardware)"
    out = [f"Bound: memory bandwidth ÷ bytes read per token (active params × bytes/param), {hw}."]
    assumed = _names(points, pl.col("bpp_assumed"))
    if assumed:
        bits = int(ASSUMED_BYTES_PER_PARAM * 8)
        out.append(
            f"{bits}-bit weights ({ASSUMED_BYTES_PER_PARAM:g} bytes/param) assumed for "
            f"{_listed(assumed)}: set bytes_per_param in [[model]]."
        )
    if bool((points["gpu_scale"] > 1).any()):
        out.append(
            f"Multi-GPU targets: bandwidth × GPUs × {TENSOR_PARALLEL_EFFICIENCY:g} "
            "(tensor-parallel efficiency); the fit divides that out (a 1-GPU curve)."
        )
    out += _size_sources(points)
    one_gpu = _names(points, pl.col("gpus").is_null() & ~pl.col("simulated").fill_null(False))
    if one_gpu:
        out.append(f"One GPU assumed for {_listed(one_gpu)}: set gpus in [[model]].")
    return out


def _size_sources(points: pl.DataFrame) -> list[str]:
    """Where a real target's size and bytes per parameter came from, when the user
    did not give them: what the server reported (its weight type), or the name."""
    if "size_source" not in points.columns:
        return []
    out = []
    server = points.filter(
        (pl.col("size_source") == "server") | (pl.col("bytes_source") == "server")
    )
    if server.height:
        seen: dict[str, str] = {}
        # Smallest first, as everywhere else (a served model's name rarely says its size).
        ordered = sorted(
            server.iter_rows(named=True), key=lambda r: (r["x_params_b"], model_key(r["model"]))
        )
        for row in ordered:
            weights = f"{row['weight_type']}, " if row["weight_type"] else ""
            seen.setdefault(row["model"], f"{weights}{row['bytes_per_param']:.2f} bytes/param")
        told = [f"{m} ({text})" for m, text in seen.items()]
        out.append(f"Size and weights as the server reports them: {_listed(told)}.")
    by_name = _names(points, pl.col("size_source") == "name")
    if by_name:
        out.append(f"Size read from the model's name for {_listed(by_name)}.")
    return out


def _levels_named(points: pl.DataFrame) -> str:
    """ " (c=1)": the load levels the points were taken at, so a reader can find the
    same figures in the summary table (another chart at c=8 shows other speeds)."""
    if not {"concurrency", "rate_rps"} <= set(points.columns):
        return ""
    labels = sorted(
        {
            level_label(c, r)
            for c, r in points.select("concurrency", "rate_rps").iter_rows()
            if c is not None or r is not None
        },
        key=natural_key,
    )
    return f" ({', '.join(labels)})" if labels else ""


def size_caption(
    points: pl.DataFrame,
    fits: Mapping[str, PowerLawFit],
    hardware: HardwareProfile,
    *,
    hardware_assumed: bool,
) -> str:
    """What the size chart shows: the points, the bound and what it assumes, and the
    fitted power law or why none was fitted."""
    text = (
        "Per-stream decode tokens/s (median, p10–p90 whiskers) and TTFT against active "
        f"parameters, at each model's lowest load level{_levels_named(points)}, one series "
        "per model family "
        "([[model]] family; default: all targets of a run). Dashed: the memory-bandwidth "
        "bound. "
    )
    text += " ".join(bound_assumptions(points, hardware, hardware_assumed=hardware_assumed))
    if fits:
        text += " Dark grey (solid for the first family): power law tok/s ∝ params^−k fitted per family, across endpoints; each point in its model's colour, one marker per family."
    else:
        text += (
            " No power law fitted: a family needs two or more models of different sizes "
            "with a measured decode speed."
        )
    if "above_bound" in points.columns and bool(points["above_bound"].any()):
        text += (
            " Ringed in red: a median decode speed above its memory-bandwidth bound, which "
            "plain decoding cannot reach: speculative decoding (several tokens per pass over "
            "the weights), a wrong size or bytes per param, or answers served from a cache "
            "(the warnings name each)."
        )
    return text


def mark_above_bound(points: pl.DataFrame, time_scale: float = 1.0) -> pl.DataFrame:
    """``points`` with ``above_bound``: the median decode speed is past the point's
    bandwidth bound (x ``time_scale``, a sped-up simulator's factor); False where the
    bound is unknown."""
    if not points.height:
        return points.with_columns(pl.lit(False).alias("above_bound"))
    bound = pl.col("bound_tps") * time_scale
    return points.with_columns(
        (bound.is_not_null() & (pl.col("tps_p50") > bound)).fill_null(False).alias("above_bound")
    )


def above_bound_warnings(
    points: pl.DataFrame, hardware: str, summaries: Sequence[tuple[str, Summary]]
) -> list[str]:
    """One warning per point above its bandwidth bound, naming the usual causes and the
    speculative acceptance the server reported for that model, if it did."""
    if "above_bound" not in points.columns:
        return []
    acceptance: dict[tuple[str, str], float] = {}
    for _key, summary in summaries:
        for g in summary.groups:
            if g.server is not None and g.server.spec_acceptance_p50 is not None:
                acceptance.setdefault((g.endpoint, g.model), g.server.spec_acceptance_p50)
    out = []
    for row in points.filter(pl.col("above_bound")).iter_rows(named=True):
        accepted = acceptance.get((row["endpoint"], row["model"]))
        cause = (
            f"the server reports speculative decoding ({accepted * 100:.0f}% of drafted "
            "tokens accepted), which explains it"
            if accepted is not None
            else "speculative decoding, a wrong params_b or bytes_per_param, or answers "
            "served from a cache"
        )
        out.append(
            f"{row['endpoint']}/{row['model']}: median decode {row['tps_p50']:,.0f} tok/s is "
            f"{row['tps_p50'] / row['bound_tps']:.1f}× its memory-bandwidth bound "
            f"({row['bound_tps']:,.0f} tok/s for {row['x_params_b']:g}B active at "
            f"{row['bytes_per_param']:g} bytes/param"
            f"{' (assumed)' if row.get('bpp_assumed') else ''} on {hardware}), past what plain "
            f"decoding allows: {cause}; ringed on the size chart"
        )
    return out


def fit_notes(fits: Mapping[str, PowerLawFit]) -> list[tuple[str, str]]:
    """One meta line per fitted family: the exponent with its interval."""
    return [
        (
            f"power law {series}",
            f"tok/s per GPU-bandwidth ∝ params^−k, {describe_fit(fit)}, n = {fit.n}",
        )
        for series, fit in fits.items()
    ]
