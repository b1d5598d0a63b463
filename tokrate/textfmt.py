"""How numbers, load levels and untrusted text are written: one home for each rule.

Every table (terminal, markdown, HTML, comparison, history) formats through these, so
the same value reads the same everywhere. Unknown values print as :data:`DASH`, never
as 0. Milliseconds and tokens/s keep three significant digits.
"""

from __future__ import annotations

import html
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
]

DASH: Final = "—"

# Characters GitHub markdown gives meaning to inside a table cell (after HTML escaping,
# which takes care of < > & and quotes).
_MD_SPECIAL: Final = re.compile(r"([\\`*_\[\]|~])")
_NEWLINES: Final = re.compile(r"[\r\n\u2028\u2029]+")
_ENTITY: Final = re.compile(r"(&(?:amp|lt|gt|quot|#x27);)")


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


def level_label(concurrency: int | None, rate_rps: float | None, fallback: str = "") -> str:
    """A load level as scenario names spell it: "c=4" (closed loop, per target) or
    "rate=2/s" (open loop, per target); ``fallback`` when neither is known."""
    if concurrency is not None:
        return f"c={concurrency}"
    if rate_rps is not None:
        return f"rate={rate_rps:g}/s"
    return fallback


def md_escape(text: object) -> str:
    """``text`` safe inside a GFM table cell: HTML-escaped, markdown punctuation
    backslash-escaped, newlines folded to spaces."""
    s = _NEWLINES.sub(" ", str(text))
    s = html.escape(s, quote=True)
    # Escape markdown punctuation, but not inside the entities html.escape just made.
    parts = _ENTITY.split(s)
    return "".join(
        p if p.startswith("&") and p.endswith(";") else _MD_SPECIAL.sub(r"\\\1", p) for p in parts
    )
