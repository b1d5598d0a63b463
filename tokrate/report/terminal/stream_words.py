"""What the terminal, summary.md and the report say of bunched streams: who held them.

One place for the words, so the terminal's line, the summary table's note, the
warnings and the left-out TPOT chart agree (docs/report.md "Buffered streams"). Kept
apart from :mod:`tokrate.report.streams`, which draws charts, so the terminal does not
load matplotlib to print a line.
"""

from __future__ import annotations

from typing import Final

from tokrate.analysis.buffering_rules import MIN_HELD_S

__all__ = [
    "BUFFERED_WORDS",
    "SHORT_HOLD_WHO",
    "SHORT_HOLD_WORDS",
    "client_held_words",
    "who_held",
]

#: What a report says instead of a fake ITL (also the summary-table cell text).
BUFFERED_WORDS: Final = "stream held back (proxy or server): ITL/TPOT not meaningful"
#: How soon after the send a first read came to be a short hold, in words.
_SHORT: Final = f"within {MIN_HELD_S * 1000:.0f} ms of the send"
#: Who held streams whose first read came that soon, and what a report says of them.
SHORT_HOLD_WHO: Final = f"bunched {_SHORT}, too short a hold to blame a proxy or the server"
SHORT_HOLD_WORDS: Final = f"{SHORT_HOLD_WHO}: ITL/TPOT not meaningful"


def client_held_words(lag_ms: float | None) -> str:
    """What a report says of streams the client itself bunched (its loop lagged at
    their first read), instead of blaming a proxy."""
    lag = "" if lag_ms is None else f" (loop lag {lag_ms:.0f} ms)"
    return f"the client held it{lag}, not a proxy or the server: ITL/TPOT not meaningful"


def who_held(buffered: int, client_held: int, short_hold: int, lag_ms: float | None) -> str:
    """Who held ``buffered`` bunched requests back, in words (to be followed by ": ITL/TPOT
    not meaningful"), for one line that covers several groups: the terminal's line under
    its table and the summary table's note."""
    lag = "" if lag_ms is None else f" (loop lag {lag_ms:.0f} ms)"
    if buffered - client_held - short_hold > 0:
        asides = []
        if client_held:
            asides.append(f"{client_held} of them by the client{lag}")
        if short_hold:
            asides.append(f"{short_hold} {_SHORT}")
        if not asides:
            return "stream held back (proxy or server)"
        return f"held back (proxy or server; {'; '.join(asides)})"
    if not short_hold:
        return f"the client held it{lag}, not a proxy or the server"
    if not client_held:
        return SHORT_HOLD_WHO
    return (
        f"the client held {client_held}{lag} and {short_hold} came {_SHORT}, "
        "not a proxy or the server"
    )
