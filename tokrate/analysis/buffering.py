"""Buffered streams: per-request reads, reads per token, burst share and the verdict.

A gateway or proxy that holds a stream back and delivers it in one or a few reads
(TTFT ~ E2E) makes every per-token figure of that request meaningless: its TPOT is the
proxy's flush interval divided by the tokens, its "decode speed" whatever the flushes
add up to. These expressions, over a records frame with ``chunk_offsets_s`` (seconds
since t0, one per content chunk) and ``output_tokens``, say which requests that was.
:func:`tokrate.analysis.metrics.derive` adds them to every analysed frame and leaves buffered
requests out of the TPOT, ITL and decode-speed columns, so the summary, the report,
compare and history agree (docs/report.md "Buffered streams").

Definitions (one request):

- A **read** is the set of content chunks that arrived together. The fast client
  stamps every chunk of one socket read with that read's stamp, so equal offsets are
  one read and any gap starts a new one (exact). The httpx client stamps each HTTP
  chunk (chunked transfer encoding) as httpx yields it, ~13 us apart within one read
  (p99 110 us), and the SDK path (``client == "openai"``) each chunk after the SDK
  parsed it, 70-250 us apart (measured on a 2-core machine, quiet to load 10); so on
  those two a gap up to :data:`PER_CHUNK_STAMP_GAP_S` stays in the read.
  ``stream_reads`` = number of reads (0 without content). Consequence: through httpx
  or the SDK, a stream faster than ~2,000 chunks/s cannot be told from a buffered one
  (its chunks look like one read), and a rare 1-15 ms scheduling hiccup on a loaded
  machine can split a held read, so a buffered request may be missed there (best
  effort; exact on the fast client).
- ``reads_per_token`` = ``stream_reads`` / ``output_tokens`` (1.0: one read per token;
  None without tokens).
- ``burst_share`` = share of the content chunks that arrived in a read together with
  another content chunk (0.0: every chunk came alone; 1.0: none did; None without
  content).
- ``first_read_share`` = content chunks of the first read (the one that carried the
  first token) / content chunks (1.0: the whole answer in one read; None without
  content).
- ``held_s`` = how long the first read's chunks took to produce at the pace of the
  rest of the stream: first-read chunks x (last offset - first offset) / (chunks
  after the first read); None when nothing came after it.
- **buffered** when ``output_tokens`` >= :data:`MIN_TOKENS`, ``first_read_share`` >=
  :data:`MIN_FIRST_READ_SHARE` (a quarter of the answer or more came with the first
  token: its first tokens were held back and arrived together, so TTFT is late and
  TPOT spans only what came after) and either that first read holds two chunks or
  more (held back, not one big chunk) that took :data:`MIN_HELD_S` or longer to
  produce (not a scheduling hiccup on a fast, short stream), or the answer came
  (nearly) all at once: ``stream_reads`` <= :data:`FEW_READS` (at most one gap,
  whatever the chunking, unless the first read was the first token alone: one chunk,
  and no chunk carried more than one token) or ``first_read_share`` >=
  :data:`NEARLY_ALL_SHARE`.

Why these: a server that packs 2-3 tokens into each chunk and sends every chunk on
its own has a one-chunk first read and more than two reads, and is never buffered,
however short the answer. A fast stream that the client reads a few tokens at a time
(llama.cpp's 3 M model at ~5,000 tokens/s arrived ~8 tokens per read on a busy 2-core
machine: burst share 0.95, reads per token 0.12) has a small first read (6% of 128
tokens) and a TPOT within a few % of the server's: not buffered. Neither is a 20 ms
hiccup of a busy machine that lands the first 19 tokens of a 1,000 tok/s simulator
stream in one read (held 27 ms: under MIN_HELD_S), nor a stall that
lands a run of tokens in one read later in the stream (TTFT on time, the span still
ends at the last token: TPOT stays right, measured on llama.cpp), however short the
answer: a 4-token answer of a 900 tok/s simulator stream on a busy 2-core machine came
as its first token alone and the other three in one read 3.3 ms later (two reads; its
TPOT 1.1 ms, the simulator's own pace), which is that same late run, not a held
stream. A first read of one chunk carrying several tokens (``output_tokens`` above the
chunks) may still hide a hold, and is judged as before. What is flagged is
the case where TTFT and TPOT describe the deliveries, not decoding: the issue's
transformers request (32 tokens in 4 reads, 20 of them in the first), a gateway that
sends the whole answer at once, llama-server's starved HTTP thread writing 128
computed tokens in one burst (1/TPOT 250,000 tok/s against the server's 5,000). A
proxy that passes the first token on and buffers the rest in three or more flushes
is not flagged: TTFT and TPOT are then right (first and last token on time), and the
ITL shows the flushes the client really saw. ``burst_share`` and ``reads_per_token``
describe the stream in the summary; they do not decide.
Who held it: a stream is bunched just the same when the *client* reads late. While the
measuring event loop is busy (too many streams for one core, a machine whose other
work takes the CPU), the chunks that arrive wait in the socket, and the next read takes
them all. Each record carries ``loop_lag_ms``: how far behind the worker's loop was
when the first content was read (tokrate.load.worker.looplag ``lag_at``). **client_held**
when buffered and that lag is at least :data:`CLIENT_LAG_MIN_MS` and at least
:data:`CLIENT_LAG_SHARE` of ``held_s`` (the hold it has to explain; when nothing came
after the first read there is no ``held_s``, and the floor alone decides). Such a
request stays out of TPOT, ITL and decode speed (its stamps are bunched all the same),
but the report and the warnings say the client held it, with the lag, instead of
blaming a proxy or the server that a simulator run does not even have.
Too short to blame: a hold cannot be longer than the time from the send to the first
read (the first token was not ready before the request went out), so a buffered
request whose first read came within :data:`MIN_HELD_S` of its send was held less than
the floor that keeps a busy machine's hiccups out of the held-back rule above. It is
**short_hold** (when not client-held): still out of TPOT, ITL and decode speed (its
stamps are bunched: a one-read answer's TPOT is 0), counted apart, and nobody is
blamed, since a scheduling hiccup of either process explains it. Seen on a busy 2-core
machine: a 4-token answer of the 900 tok/s simulator came whole in one read 6.3 ms
after the send (its TTFT otherwise ~2.7 ms, loop lag 0): the server's writes or the
client's read waited ~4 ms for a CPU. A gateway that holds a whole answer of a real
model back takes longer than that to deliver it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final, TypeVar

import polars as pl

from tokrate.analysis.buffering_rules import (
    CLIENT_LAG_MIN_MS,
    CLIENT_LAG_SHARE,
    FEW_READS,
    MIN_FIRST_READ_SHARE,
    MIN_HELD_S,
    MIN_TOKENS,
    NEARLY_ALL_SHARE,
    PER_CHUNK_STAMP_GAP_S,
)
from tokrate.analysis.stats import dist_exprs, row_to_distribution
from tokrate.runfolder.summary import Distribution, StreamShape

__all__ = [
    "BUFFERING_COLUMNS",
    "client_held_expr",
    "short_hold_expr",
    "stream_aggs",
    "stream_entry",
    "with_buffering",
]

#: A records frame, eager or lazy: :func:`with_buffering` gives back the same kind.
FrameT = TypeVar("FrameT", pl.DataFrame, pl.LazyFrame)

#: The columns :func:`with_buffering` adds, in order.
BUFFERING_COLUMNS: Final = (
    "stream_reads",
    "reads_per_token",
    "burst_share",
    "first_read_share",
    "held_s",
    "buffered",
)


def _reads_and_bursts(same_read_s: float) -> tuple[pl.Expr, pl.Expr, pl.Expr]:
    """(reads, chunks in a read with another chunk, chunks of the first read) per
    request, a gap up to ``same_read_s`` staying inside a read."""
    offsets = pl.col("chunk_offsets_s")
    # Inside list.eval the element is the request's offsets as a series: the gap before
    # a chunk is diff(), the gap after it -diff(-1); a missing neighbour is "far".
    before = pl.element().diff().fill_null(float("inf"))
    after = (-pl.element().diff(-1)).fill_null(float("inf"))
    starts_read = before > same_read_s
    alone = starts_read & (after > same_read_s)
    reads = offsets.list.eval(starts_read.sum()).list.first()
    bursting = offsets.list.eval((~alone).sum()).list.first()
    read_id = starts_read.cast(pl.Int32).cum_sum()
    first = offsets.list.eval((read_id == 1).sum()).list.first()
    return (
        reads.fill_null(0).cast(pl.Int64),
        bursting.fill_null(0).cast(pl.Int64),
        first.fill_null(0).cast(pl.Int64),
    )


#: The per-request counts :func:`with_buffering` computes once and derives the rest
#: from: chunks in a read with another one, chunks of the first read (dropped after).
_BURSTING: Final = "_buffering_bursting"
_FIRST_READ: Final = "_buffering_first_read"


def with_buffering(frame: FrameT) -> FrameT:
    """``frame`` with :data:`BUFFERING_COLUMNS` added: ``stream_reads`` (Int64),
    ``reads_per_token``, ``burst_share`` and ``first_read_share``, ``held_s`` (Float64,
    None when unknowable) and ``buffered`` (Boolean, never null) of every request.

    In two steps: the reads, bursting and first-read counts (a ``list.eval`` per
    request and clock rule) become columns first, and the shares and the verdict are
    read from those columns. As one step, every use of a count in the verdict's
    expression evaluated its ``list.eval`` again (2-3x slower, most of what
    :func:`tokrate.analysis.metrics.derive` cost)."""
    per_chunk = pl.col("client").is_in(["httpx", "openai"])
    exact, tolerant = _reads_and_bursts(0.0), _reads_and_bursts(PER_CHUNK_STAMP_GAP_S)
    reads_now, bursting_now, first_now = (
        pl.when(per_chunk).then(t).otherwise(e) for e, t in zip(exact, tolerant, strict=True)
    )
    counted = frame.with_columns(
        reads_now.alias("stream_reads"), bursting_now.alias(_BURSTING), first_now.alias(_FIRST_READ)
    )
    reads, bursting, first = pl.col("stream_reads"), pl.col(_BURSTING), pl.col(_FIRST_READ)
    chunks = pl.col("chunk_offsets_s").list.len().fill_null(0)
    tokens = pl.col("output_tokens").fill_null(0)
    per_token = pl.when(tokens > 0).then(reads / tokens).otherwise(None)
    burst = pl.when(chunks > 0).then(bursting / chunks).otherwise(None)
    first_share = pl.when(chunks > 0).then(first / chunks).otherwise(None)
    offsets = pl.col("chunk_offsets_s")
    span_s = offsets.list.last() - offsets.list.first()
    held_s = pl.when(chunks > first).then(first * span_s / (chunks - first))
    held_back = (first >= 2) & (held_s >= MIN_HELD_S)
    # One chunk of one token cannot hold tokens back: that first token came on its own.
    first_token_alone = (first == 1) & (tokens <= chunks)
    few_reads = (reads <= FEW_READS) & ~first_token_alone
    nearly_all = few_reads | (first_share >= NEARLY_ALL_SHARE)
    buffered = (
        (tokens >= MIN_TOKENS)
        & (first_share >= MIN_FIRST_READ_SHARE)
        & (held_back.fill_null(False) | nearly_all)
    ).fill_null(False)
    return counted.with_columns(
        per_token.alias("reads_per_token"),
        burst.alias("burst_share"),
        first_share.alias("first_read_share"),
        held_s.alias("held_s"),
        buffered.alias("buffered"),
    ).drop(_BURSTING, _FIRST_READ)


def client_held_expr() -> pl.Expr:
    """``client_held`` (Boolean, never null): a buffered request whose first read came
    while the client's own loop lagged enough to explain its hold (module doc). Over a
    frame with :func:`with_buffering`'s columns and the records' ``loop_lag_ms``."""
    lag_ms = pl.col("loop_lag_ms")
    explains = lag_ms >= pl.max_horizontal(
        pl.lit(CLIENT_LAG_MIN_MS), CLIENT_LAG_SHARE * 1000.0 * pl.col("held_s").fill_null(0.0)
    )
    return (pl.col("buffered") & explains).fill_null(False).alias("client_held")


def short_hold_expr() -> pl.Expr:
    """``short_hold`` (Boolean, never null): a buffered request, not client-held, whose
    first read came within :data:`MIN_HELD_S` of its send, so whatever held it held it
    for less than that (module doc). Over a frame with ``buffered`` and ``client_held``."""
    first_read_s = pl.col("chunk_offsets_s").list.first()
    short = pl.col("buffered") & ~pl.col("client_held") & (first_read_s < MIN_HELD_S)
    return short.fill_null(False).alias("short_hold")


def stream_aggs(ok: pl.Expr) -> list[pl.Expr]:
    """Group aggregations behind :class:`~tokrate.runfolder.summary.StreamShape` over the
    requests ``ok`` selects, on a :func:`tokrate.analysis.metrics.derive`-d frame."""
    buffered = ok & pl.col("buffered")
    client_held = buffered & pl.col("client_held")
    measured_tps = pl.when(pl.col("tpot_measured_s") > 0).then(1.0 / pl.col("tpot_measured_s"))
    return [
        ok.sum().alias("stream__judged"),
        buffered.sum().alias("stream__buffered"),
        client_held.sum().alias("stream__client_held"),
        (buffered & pl.col("short_hold")).sum().alias("stream__short_hold"),
        pl.col("loop_lag_ms").filter(client_held).max().alias("stream__client_lag_max_ms"),
        pl.col("reads_per_token").filter(ok).median().alias("stream__reads_per_token_p50"),
        pl.col("burst_share").filter(ok).median().alias("stream__burst_share_p50"),
        pl.col("reads_per_token").filter(buffered).median().alias("stream__b_reads_p50"),
        pl.col("burst_share").filter(buffered).median().alias("stream__b_burst_p50"),
        pl.col("first_read_share").filter(buffered).median().alias("stream__b_first_p50"),
        *dist_exprs(measured_tps.filter(buffered), "stream__buffered_decode_tps"),
    ]


def stream_entry(row: Mapping[str, Any]) -> StreamShape:
    """The :class:`~tokrate.runfolder.summary.StreamShape` of one aggregated row."""
    return StreamShape(
        judged=int(row["stream__judged"] or 0),
        buffered=int(row["stream__buffered"] or 0),
        client_held=int(row["stream__client_held"] or 0),
        client_held_lag_max_ms=row["stream__client_lag_max_ms"],
        short_hold=int(row["stream__short_hold"] or 0),
        reads_per_token_p50=row["stream__reads_per_token_p50"],
        burst_share_p50=row["stream__burst_share_p50"],
        buffered_reads_per_token_p50=row["stream__b_reads_p50"],
        buffered_burst_share_p50=row["stream__b_burst_p50"],
        buffered_first_read_share_p50=row["stream__b_first_p50"],
        buffered_decode_tps=Distribution(**row_to_distribution(row, "stream__buffered_decode_tps")),
    )
