"""The numbers of the buffered-stream rule (tokrate.analysis.buffering applies them).

Kept apart from the polars expressions so that a module of the measuring process (the
terminal's words, tokrate.report.terminal.stream_words) can name a threshold without loading
polars (tests/processes/test_lean_process.py).
"""

from __future__ import annotations

from typing import Final

__all__ = [
    "CLIENT_LAG_MIN_MS",
    "CLIENT_LAG_SHARE",
    "FEW_READS",
    "MIN_FIRST_READ_SHARE",
    "MIN_HELD_S",
    "MIN_TOKENS",
    "NEARLY_ALL_SHARE",
    "PER_CHUNK_STAMP_GAP_S",
]

#: Through httpx or the SDK, chunks at most this many seconds apart arrived in one read
#: (see tokrate.analysis.buffering's docstring; the fast client shares one stamp per read
#: exactly).
PER_CHUNK_STAMP_GAP_S: Final = 0.0005
#: Fewer output tokens than this: too short to tell, never buffered.
MIN_TOKENS: Final = 4
#: The first read holds at least this share of the content chunks.
MIN_FIRST_READ_SHARE: Final = 0.25
#: The first read's chunks must have taken this long to produce (seconds); a buffered
#: request whose first read came sooner than this after its send is ``short_hold``.
MIN_HELD_S: Final = 0.05
#: The whole answer in at most this many reads is buffered whatever the chunking.
FEW_READS: Final = 2
#: So is an answer whose first read holds this share of it, however short the hold.
NEARLY_ALL_SHARE: Final = 0.9

#: A buffered stream is the client's doing when its loop was at least this late (ms) at
#: the first read (the event-loop lag's p99 threshold: below it the loop was on time)...
CLIENT_LAG_MIN_MS: Final = 5.0
#: ... and the lateness covers at least this share of the hold the read shows (a proxy
#: that held 300 ms while the loop was 6 ms late is still the proxy).
CLIENT_LAG_SHARE: Final = 0.5
