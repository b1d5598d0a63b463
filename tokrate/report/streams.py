"""How streams arrived and what servers said about them, in the report.

Two parts, both read from the summaries (:class:`~tokrate.runfolder.summary.StreamShape` and
:class:`~tokrate.runfolder.summary.ServerTimings`, so the report says what summary.json says):

- **Buffered streams** (docs/report.md): a group with requests that came in a few
  reads gets a warning line ("stream held back (proxy or server): ITL/TPOT not meaningful";
  for those whose first read came while the client's own loop lagged: "the client held
  it (loop lag X ms)"; none for those whose first read came within 50 ms of the send,
  too short a hold to blame anyone) and a row in the "Buffered streams" table; those
  requests are already out of every TPOT/ITL/decode figure, shown apart with their count.
- **Client vs server**: where records carry server timings (llama.cpp ``timings``),
  a table and a chart of client decode tok/s against the server's, with the paired
  difference in % (what network + client cost), and client TTFT against the server's
  prompt time. Left out, with a note, when no request carried timings.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, Final

import numpy as np
from matplotlib.figure import Figure

from tokrate.report.figures import house_style, new_figure
from tokrate.report.model import Chart, LeftOut, ReportInputs
from tokrate.report.tables import Table
from tokrate.report.terminal.stream_words import BUFFERED_WORDS, client_held_words
from tokrate.runfolder.summary import Group, Summary
from tokrate.textfmt import DASH, fmt_ms, fmt_pct, fmt_tps

__all__ = [
    "buffered_warnings",
    "client_vs_server",
    "client_vs_server_chart",
    "server_rows",
    "server_table",
    "stream_table",
    "stream_tables",
]

Summaries = Sequence[tuple[str, Summary]]


def _name(key: str, g: Group, multi: bool) -> str:
    prefix = f"{key}: " if multi else ""
    return f"{prefix}{g.endpoint}/{g.model} {g.level}"


def buffered_warnings(summaries: Summaries) -> list[str]:
    """One line per group with buffered requests a proxy or the server held, one per
    group with client-held ones; none for short holds (a hiccup is nothing to act on:
    the "Buffered streams" table counts them)."""
    out: list[str] = []
    multi = len(summaries) > 1
    for key, summary in summaries:
        for g in summary.groups:
            s = g.stream
            if s is None or not s.buffered:
                continue
            fake = s.buffered_decode_tps.p50
            shown = f"; their 1/TPOT would read {fmt_tps(fake)} tok/s" if fake else ""
            held_elsewhere = s.held_elsewhere
            if held_elsewhere:
                out.append(
                    f"{_name(key, g, multi)}: {BUFFERED_WORDS} for {held_elsewhere} of "
                    f"{s.judged} requests (their first tokens held back: first read p50 "
                    f"{fmt_pct(s.buffered_first_read_share_p50)} of the answer, burst share "
                    f"p50 {fmt_pct(s.buffered_burst_share_p50)}); left out of TPOT, ITL and "
                    f"decode tok/s{shown}"
                )
            if s.client_held:
                out.append(
                    f"{_name(key, g, multi)}: {s.client_held} of {s.judged} requests came "
                    f"bunched because this client's event loop lagged at their first read: "
                    f"{client_held_words(s.client_held_lag_max_ms)}; left out of TPOT, ITL "
                    "and decode tok/s; lower the concurrency per process or use --workers N"
                )
    return out


def _ratio(value: float | None) -> str:
    return DASH if value is None else f"{value:.2f}"


def stream_table(summaries: Summaries) -> Table | None:
    """Per group with any buffered request: how its requests arrived."""
    header = (
        "run",
        "endpoint",
        "model",
        "level",
        "judged",
        "buffered",
        "held by the client (loop lag max)",
        "held under 50 ms",
        "share",
        "reads/token p50 all · buffered",
        "burst share p50 all · buffered",
        "first read p50 (buffered)",
        "buffered 1/TPOT p50",
    )
    rows = []
    for key, summary in summaries:
        for g in summary.groups:
            s = g.stream
            if s is None or not s.buffered:
                continue
            rows.append(
                (
                    key,
                    g.endpoint,
                    g.model,
                    g.level,
                    str(s.judged),
                    str(s.buffered),
                    _client_held_cell(s.client_held, s.client_held_lag_max_ms),
                    str(s.short_hold),
                    fmt_pct(s.buffered_share),
                    f"{_ratio(s.reads_per_token_p50)} · {_ratio(s.buffered_reads_per_token_p50)}",
                    f"{fmt_pct(s.burst_share_p50)} · {fmt_pct(s.buffered_burst_share_p50)}",
                    fmt_pct(s.buffered_first_read_share_p50),
                    fmt_tps(s.buffered_decode_tps.p50),
                )
            )
    if not rows:
        return None
    note = (
        "Buffered streams: ITL/TPOT not meaningful. A request is buffered when it has 4+ "
        "tokens and a quarter of "
        "its chunks or more arrived together with the first one (held back), or the whole "
        "answer came in 1-2 reads (docs/report.md); the client held it when its own event "
        "loop lagged at the first read (then no proxy or server is to blame); a hold "
        "under 50 ms (the first read came that soon after the send) blames nobody. Buffered "
        "requests are left out "
        "of TPOT, ITL and decode tok/s; TTFT and E2E keep them. The last column is what "
        "1/TPOT would have read: not a decode speed."
    )
    numeric = (False,) * 4 + (True,) * 9
    return Table("Buffered streams", header, tuple(rows), note=note, numeric=numeric)


def _client_held_cell(n: int, lag_ms: float | None) -> str:
    if not n:
        return "0"
    return str(n) if lag_ms is None else f"{n} ({fmt_ms(lag_ms / 1000)})"


def server_rows(summaries: Summaries) -> list[tuple[str, Group]]:
    """(run key, group) of every group whose requests carried server timings."""
    return [(k, g) for k, s in summaries for g in s.groups if g.server is not None]


def server_table(summaries: Summaries) -> Table | None:
    """Client vs server decode speed and TTFT vs server prompt time, per group."""
    header = (
        "run",
        "endpoint",
        "model",
        "level",
        "with timings",
        "source",
        "client decode tok/s p50",
        "server decode tok/s p50",
        "client vs server",
        "TTFT p50",
        "server prompt p50",
        "TTFT − prompt p50",
        "TTFT − prompt min",
        "server queue p50",
        "server TTFT p50",
        "TTFT − server p50",
        "decode − server p50",
        "spec. acceptance p50",
    )
    rows = []
    for key, g in server_rows(summaries):
        t = g.server
        assert t is not None
        rows.append(
            (
                key,
                g.endpoint,
                g.model,
                g.level,
                f"{t.n}/{g.counts.ok}",
                ", ".join(_SOURCE_WORDS.get(s, s) for s in t.sources),
                fmt_tps(g.decode_tps.p50),
                fmt_tps(t.decode_tps.p50),
                _signed_pct(t.decode_vs_server_p50),
                fmt_ms(g.ttft_s.p50),
                fmt_ms(t.prompt_s.p50),
                fmt_ms(t.ttft_minus_prompt_p50_s),
                fmt_ms(t.ttft_minus_prompt_min_s),
                fmt_ms(t.queue_s.p50),
                fmt_ms(t.ttft_s.p50),
                fmt_ms(t.ttft_minus_server_s.p50),
                fmt_ms(t.decode_minus_server_s.p50),
                fmt_pct(t.spec_acceptance_p50, 1),
            )
        )
    if not rows:
        return None
    note = (
        "Server-reported per-request timings (llama.cpp timings, vLLM metrics, NIM stats; "
        "docs/report.md): decode = (output tokens − 1) ÷ the server's decode time, the "
        "same n − 1 gaps as TPOT; prompt = its prefill time. Client vs server: median "
        "over requests of client decode tok/s ÷ server's − 1 (negative: network + client "
        "slowed it). TTFT − prompt ≥ 0 on an honest pair. TTFT − server and decode − "
        "server: per request, the client's TTFT and decode time (E2E − TTFT) minus the "
        "server's (llama.cpp reports no queue: its TTFT is its prompt time), i.e. what the "
        "network and the client added. Spec. acceptance: accepted share of drafted "
        "tokens (speculative decoding), where reported."
    )
    numeric = (False,) * 4 + (True, False) + (True,) * 12
    return Table("Client vs server", header, tuple(rows), note=note, numeric=numeric)


#: How each response key of a timing object reads in the table.
_SOURCE_WORDS: Final = {
    "timings": "llama.cpp timings",
    "metrics": "vLLM metrics",
    "stats": "NIM stats",
}


def _signed_pct(fraction: float | None) -> str:
    return DASH if fraction is None else f"{fraction * 100:+.2f}%"


def stream_tables(inputs: ReportInputs) -> Iterator[Table]:
    """The "Buffered streams" and "Client vs server" tables, each where it has rows."""
    for table in (stream_table(inputs.summaries), server_table(inputs.summaries)):
        if table is not None:
            yield table


def client_vs_server_chart(inputs: ReportInputs) -> Iterator[Chart[Any] | LeftOut]:
    """The client-vs-server chart, or a note when no request carried server timings."""
    rows = server_rows(inputs.summaries)
    if not rows:
        yield LeftOut("client vs server: no request carried server timings (llama.cpp timings)")
        return
    yield Chart(
        "client_vs_server",
        "Client vs server",
        "Per model and load level: decode tok/s as tokrate measured it (median, buffered "
        "streams left out) and as the server reported it, labelled with the paired "
        "difference; right: TTFT against the server's prompt (prefill) time.",
        [(_name(k, g, inputs.multi), g) for k, g in rows],
        client_vs_server,
    )


@house_style
def client_vs_server(rows: Sequence[tuple[str, Group]]) -> Figure:
    """Two panels of paired horizontal bars, one pair per row: decode tok/s (client,
    server) and TTFT vs server prompt time (ms)."""
    height = 1.6 + 0.45 * len(rows)
    fig, (left, right) = new_figure(11, height, ncols=2)
    y = np.arange(len(rows))
    names = [n for n, _ in rows]
    client = [g.decode_tps.p50 or 0.0 for _, g in rows]
    server = [(g.server.decode_tps.p50 if g.server else None) or 0.0 for _, g in rows]
    left.barh(y - 0.2, client, 0.4, label="client (tokrate)", color="#1f77b4")
    left.barh(y + 0.2, server, 0.4, label="server-reported", color="#ff7f0e")
    for i, (_, g) in enumerate(rows):
        diff = g.server.decode_vs_server_p50 if g.server else None
        if diff is not None:
            left.annotate(
                _signed_pct(diff),
                (max(client[i], server[i]), i),
                xytext=(4, 0),
                textcoords="offset points",
                va="center",
                fontsize=8,
            )
    left.set_yticks(y, names)
    left.invert_yaxis()
    left.set_xlabel("decode tokens/s per stream (median)")
    left.set_title("Decode speed: client vs server")
    left.margins(x=0.18)
    left.legend(loc="lower right", frameon=False)
    ttft = [(g.ttft_s.p50 or 0.0) * 1e3 for _, g in rows]
    prompt = [((g.server.prompt_s.p50 if g.server else None) or 0.0) * 1e3 for _, g in rows]
    right.barh(y - 0.2, ttft, 0.4, label="client TTFT", color="#1f77b4")
    right.barh(y + 0.2, prompt, 0.4, label="server prompt_ms", color="#ff7f0e")
    right.set_yticks(y, [""] * len(rows))
    right.invert_yaxis()
    right.set_xlabel("milliseconds (median)")
    right.set_title("TTFT vs server prompt time")
    right.legend(loc="lower right", frameon=False)
    return fig
