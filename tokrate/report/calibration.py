"""The calibration as text: the report's "calibration" meta line (run.json's
``calibration`` object, written by tokrate.analysis.calibration.judge_run) and the
floor ``tokrate calibrate`` prints."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

from tokrate.runfolder.calibration import Calibration

__all__ = ["LAG_MARKS_MS", "describe_verdict", "render_calibration"]

#: Stamp-lag marks the calibration reports the passing concurrency of (ms, p99).
LAG_MARKS_MS: Final = (1.0, 5.0)


def describe_verdict(verdict: Mapping[str, Any]) -> str:
    """ "inside: ..." / "OUTSIDE: ..." / "not judged: ..." and the verdict's reason."""
    inside = verdict.get("inside")
    word = "inside" if inside else ("not judged" if inside is None else "OUTSIDE")
    return f"{word}: {verdict.get('reason', '')}"


def _streams(n: int) -> str:
    return f"{n} stream{'s' if n != 1 else ''}"


def _mark_line(c: Calibration, mark_ms: float) -> str:
    """Where the p99 stamp lag stays within ``mark_ms`` and where it is over it, with
    the figure there ("within" and "over": never a word that reads both ways)."""
    levels = sorted(c.levels, key=lambda lv: lv.concurrency)
    over = c.first_over(mark_ms)
    if over is None:
        top = _streams(levels[-1].concurrency)
        return f"stamp lag p99 within {mark_ms:g} ms at every level (up to {top})"
    figure = f"{over.lag_p99_ms:.1f} ms at {_streams(over.concurrency)}"
    below = [lv for lv in levels if lv.concurrency < over.concurrency]
    if not below:
        return f"stamp lag p99 over {mark_ms:g} ms from the first level: {figure}"
    within = _streams(below[-1].concurrency)
    return f"stamp lag p99 within {mark_ms:g} ms up to {within}; {figure}"


def render_calibration(calibration: Calibration, path: Path | None = None) -> list[str]:
    """The floor as lines of at most 80 columns."""
    c = calibration
    lines = [
        f"measurement floor of {c.host}, {c.created_at} (tokrate {c.tokrate_version})",
        f"machine load average (1 min): {c.load_before:g} before, {c.load_after:g} after",
        f"simulator in its own process: TTFT {c.ttft_ms:g} ms, ITL {c.itl_ms:g} ms,"
        f" {c.tokens_per_request} tokens, aligned streams",
        "",
        f"{'streams':>7}  {'stamps':<6}  {'lag mean ms':>11}  {'lag p99 ms':>10}"
        f"  {'CPU µs/tok':>10}  {'loop lag p99':>12}  {'errors':>6}",
    ]
    for lv in c.levels:
        lines.append(
            f"{lv.concurrency:>7}  {lv.stamp_source:<6}  {lv.lag_mean_ms:>11.3f}"
            f"  {lv.lag_p99_ms:>10.3f}  {lv.cpu_us_per_token:>10.1f}"
            f"  {lv.loop_lag_p99_ms:>12.1f}  {lv.errors:>6}"
        )
    if any(lv.workers > 1 for lv in c.levels):
        per_level = ", ".join(f"{lv.workers} at {lv.concurrency}" for lv in c.levels)
        lines.append(f"worker processes per level: {per_level}")
    lines.append("")
    lines += [_mark_line(c, mark) for mark in LAG_MARKS_MS]
    if path is not None:
        lines.append(f"saved: {path}")
    return lines
