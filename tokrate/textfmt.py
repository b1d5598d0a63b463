"""How numbers, load levels and untrusted text are written: one home for each rule.

Every table (terminal, markdown, HTML, comparison, history) formats through these, so
the same value reads the same everywhere. Unknown values print as :data:`DASH`, never
as 0. Milliseconds and tokens/s keep three significant digits.
"""

from __future__ import annotations

import math
import re
from typing import Final

__all__ = [
    "DASH",
    "fmt_ms",
    "fmt_num",
    "fmt_pct",
    "fmt_tps",
    "level_label",
    "md_escape",
    "nice_bin_width",
]

DASH: Final = "—"

# Characters Markdown gives meaning to inside a line or a table cell: emphasis, code,
# links, table pipes, strikethrough, and < > & (raw HTML, autolinks, entities). A
# backslash before ASCII punctuation makes it literal (CommonMark 2.4), so escaped text
# stays plain Markdown, readable as written: no HTML entities (`compare's`, not
# `compare&#x27;s`), and `<script>` is shown, never run.
_MD_SPECIAL: Final = re.compile(r"([\\`*_\[\]|~<>&])")
_NEWLINES: Final = re.compile(r"[\r\n\u2028\u2029]+")


def fmt_ms(seconds: float | None, *, unit: bool = True) -> str:
    """Seconds as milliseconds with 3 significant digits: "1,515 ms", "45.0 ms",
    "4.52 ms", "0.043 ms"; :data:`DASH` when unknown. ``unit=False`` drops " ms"."""
    if seconds is None:
        return DASH
    ms = seconds * 1000.0
    if abs(ms) >= 100:
        text = f"{ms:,.0f}"
    elif abs(ms) >= 10:
        text = f"{ms:.1f}"
    elif abs(ms) >= 1 or ms == 0:
        text = f"{ms:.2f}"
    else:
        text = f"{ms:.3f}"
    return f"{text} ms" if unit else text


def fmt_num(value: float | None, digits: int = 1, suffix: str = "") -> str:
    """A number with ``digits`` decimals and thousands separators (:data:`DASH` when
    unknown)."""
    if value is None:
        return DASH
    return f"{value:,.{digits}f}{suffix}"


def fmt_tps(value: float | None, suffix: str = "") -> str:
    """Tokens/s to about 3 significant digits (whole numbers from 100 up)."""
    if value is None:
        return DASH
    return fmt_num(value, 0 if abs(value) >= 100 else 1, suffix)


def fmt_pct(fraction: float | None, digits: int = 0) -> str:
    """A fraction (0..1) as a percentage."""
    return DASH if fraction is None else f"{fraction * 100:.{digits}f}%"


def fmt_pct_interval(low: float, high: float) -> str:
    """An interval of a fraction, the one way every output writes it: "89–100%"
    (whole percents, an en dash, the sign once). Callers name the confidence
    ("95% CI 89–100%") where the reader cannot see it nearby."""
    return f"{low * 100:.0f}–{high * 100:.0f}%"


def level_label(concurrency: int | None, rate_rps: float | None, fallback: str = "") -> str:
    """A load level as scenario names spell it: "c=4" (closed loop, per target) or
    "rate=2/s" (open loop, per target); ``fallback`` when neither is known."""
    if concurrency is not None:
        return f"c={concurrency}"
    if rate_rps is not None:
        return f"rate={rate_rps:g}/s"
    return fallback


def nice_bin_width(span_s: float, bins: int = 60) -> float:
    """A round bin width (1, 2 or 5 x 10^k seconds) giving about ``bins`` bins over
    ``span_s``: how the report's timeline cuts a run, and so the finest wall-clock
    step a run is drawn at (the run's node-clock check judges offsets against it)."""
    if not span_s > 0:
        return 1.0
    raw = span_s / bins
    exp = math.floor(math.log10(raw))
    for m in (1.0, 2.0, 5.0, 10.0):
        width = m * 10.0**exp
        if width >= raw:
            return width
    return float(10.0 ** (exp + 1))


def md_escape(text: object) -> str:
    """``text`` safe inside a line or a GFM table cell of plain Markdown: newlines
    folded to spaces, Markdown punctuation and ``< > &`` backslash-escaped (never HTML
    entities: summary.md, comparison.md and history.md are read as text too)."""
    return _MD_SPECIAL.sub(r"\\\1", _NEWLINES.sub(" ", str(text)))
