"""The words around the size-vs-speed chart: its caption and the fitted power laws."""

from __future__ import annotations

from collections.abc import Mapping

import polars as pl

from tokrate.analysis.stats import PowerLawFit

__all__ = ["fit_notes", "size_caption"]


def size_caption(points: pl.DataFrame, hardware: str, fitted: bool) -> str:
    """What the size chart shows, saying when no power law could be fitted and how
    multi-GPU targets enter the fit."""
    text = (
        "Per-stream decode tokens/s (median, p10–p90 whiskers) and TTFT against active "
        "parameters, at each model's lowest load level, one series per model family "
        "([[model]] family; default: all targets of a run). Dashed: the memory-bandwidth "
        f"bound for {hardware}. "
    )
    if fitted:
        text += "Solid: power law tok/s ∝ params^−k fitted per family, across endpoints."
    else:
        text += (
            "No power law fitted: a family needs two or more models of different sizes "
            "with a measured decode speed."
        )
    if bool((points["gpu_scale"] > 1).any()):
        text += (
            " Multi-GPU targets are plotted as measured; the fit divides each speed by "
            "its bandwidth scale (GPUs × tensor-parallel efficiency), so the fitted line "
            "is for one GPU."
        )
    return text


def fit_notes(fits: Mapping[str, PowerLawFit]) -> list[tuple[str, str]]:
    """One meta line per fitted family: the exponent with its interval."""
    out = []
    for series, fit in fits.items():
        ci = ""
        if fit.exponent_ci is not None:
            ci = f" (95% CI {-fit.exponent_ci[1]:.2f} to {-fit.exponent_ci[0]:.2f})"
        out.append(
            (
                f"power law {series}",
                f"tok/s per GPU-bandwidth ∝ params^−k, k = {fit.k:.2f}{ci}, n = {fit.n}",
            )
        )
    return out
