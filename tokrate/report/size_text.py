"""The words around the size-vs-speed chart: its caption, what its bound assumes, and
the fitted power laws — one source for the chart, its caption and the metadata, so
the caption never describes a line the chart does not draw."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import polars as pl

from tokrate.analysis.ordering import model_key
from tokrate.analysis.stats import PowerLawFit
from tokrate.hardware import TENSOR_PARALLEL_EFFICIENCY, HardwareProfile
from tokrate.report.data import ASSUMED_BYTES_PER_PARAM

__all__ = ["bandwidth_text", "bound_assumptions", "describe_fit", "fit_notes", "size_caption"]


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
        "parameters, at each model's lowest load level, one series per model family "
        "([[model]] family; default: all targets of a run). Dashed: the memory-bandwidth "
        "bound. "
    )
    text += " ".join(bound_assumptions(points, hardware, hardware_assumed=hardware_assumed))
    if fits:
        text += " Solid: power law tok/s ∝ params^−k fitted per family, across endpoints."
    else:
        text += (
            " No power law fitted: a family needs two or more models of different sizes "
            "with a measured decode speed."
        )
    return text


def fit_notes(fits: Mapping[str, PowerLawFit]) -> list[tuple[str, str]]:
    """One meta line per fitted family: the exponent with its interval."""
    return [
        (
            f"power law {series}",
            f"tok/s per GPU-bandwidth ∝ params^−k, {describe_fit(fit)}, n = {fit.n}",
        )
        for series, fit in fits.items()
    ]
