"""report.html: one self-contained, offline file.

Images are embedded as base64 ``data:`` URIs, CSS is inline, there is no script at all,
and a Content-Security-Policy forbids loading anything but data: images — so the file
opens anywhere, and even a string that escaped escaping could not run. Every string
from a user, a prompt file or a server goes through ``html.escape``.
"""

from __future__ import annotations

import base64
import html
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import orjson

from tokrate.redact import Redactor
from tokrate.report.tables import Table

__all__ = ["DEFINITIONS", "ChartImage", "Page", "render_html"]

#: What every number means (docs/definitions.md), shown at the end of the report.
DEFINITIONS: Final = (
    ("t0", "when the request left the client: the kernel's transmit stamp of its last byte (Linux, the fast client), else a monotonic clock reading right after the write returned; every record says which (t0_source)."),
    ("TTFT", "t0 → arrival of the first chunk that carries non-empty content (answer text, reasoning text or a tool-call delta). Role-only, empty and usage-only chunks do not count."),
    ("ITL", "gaps between successive content-bearing chunks of one stream."),
    ("E2E", "t0 → end of stream ([DONE] or connection end)."),
    ("output tokens", "the server's usage when it reports one; otherwise the count of content-bearing chunks. Every record says which source it used."),
    ("TPOT", "(E2E − TTFT) / (output tokens − 1), for a request of at least 2 output tokens; decode speed per stream = 1 / TPOT."),
    ("aggregate throughput", "output tokens of all ok requests that finished inside the measured window (first send, when it left, to last end, per target and level) / window length. Warm-up requests are recorded but excluded."),
    ("connect time", "DNS + TCP (+ TLS) set-up of the connection a request opened (0 when it reused one). Connections are opened before the measured window unless the run measured cold starts; then a request's set-up comes before it leaves (t0): inside its TTFT from due, not its TTFT."),
    ("goodput", "requests per second that met every SLO the user set."),
    ("SLO met", "ok, delivered content, and every limit set holds. A request too short for a limit set (a TPOT limit on a one-token answer) is not judged: neither met nor missed, left out of the met share and counted apart; a verdict whose TPOT judgement rests on answers of 2–4 tokens says so."),
    ("cost", "USD per 1,000 of the requests the run sent (measured, ok), with the Student-t 95% interval of the mean: each request's uncached input tokens at price_in_per_m, cached input tokens at price_cached_in_per_m (else the input price), output tokens (reasoning included) at price_out_per_m; self-hosted (gpu_hourly_usd), each request's share of the GPU-hours at the measured throughput. A tier is cheaper only by this figure; one without a price is never ranked."),
    ("TTFT from scheduled", "open loop only: send delay + TTFT, the latency a user would see if the client fell behind its schedule (coordinated omission)."),
    ("send queue", "the client's own queueing before t0: from the moment a request was due (its schedule in open loop, its stream's slot freeing in closed loop) to when it left."),
    ("TTFT from due", "send queue + TTFT: the wait of a user who was due an answer when the request was due, so a client that falls behind cannot hide it (coordinated omission); TTFT itself measures the server and the network."),
    ("percentiles", "p50, p90, p95, p99 by linear interpolation over ok, non-warm-up requests; mean, min, max alongside; “—” means no data, never 0."),
    ("bound", "memory-bandwidth ceiling of single-stream decode: bandwidth / (active params × bytes per param)."),
    ("buffered stream", "a request with 4+ output tokens where a quarter of its chunks or more arrived together with the first one (held back), or the whole answer came in 1–2 reads: a proxy or a stalled server held it back, so its ITL/TPOT are not meaningful. Chunks stamped together count as one read (httpx and openai SDK clients: chunks ≤ 0.5 ms apart). Left out of TPOT, ITL and decode speed; kept in TTFT and E2E."),
    ("client held", "a buffered stream whose first read came while this client's own event loop lagged (by at least 5 ms and half the hold): the client bunched it, not a proxy or the server; still left out of TPOT, ITL and decode speed."),
    ("short hold", "a buffered stream, not client-held, whose first read came within 50 ms of the send: whatever held it held it for less than that, which a scheduling hiccup of the server or the client explains, so no proxy or server is blamed; still left out of TPOT, ITL and decode speed."),
    ("client vs server", "where the server reports its own timings (llama.cpp timings): its decode speed = (predicted_n − 1) / predicted_ms, the same n − 1 gaps as TPOT; the difference is the median over requests of client ÷ server − 1 (network and client)."),
)  # fmt: skip

_SHOWN_WARNINGS: Final = 5


@dataclass(frozen=True, slots=True)
class ChartImage:
    """One embedded chart: file stem, heading, caption, and PNG bytes. ``colors`` is
    what the drawn figure shows per model (model -> the colours it carries in it, read
    back from the figure the PNG was saved from: tokrate.report.drawn_colors) and
    ``legend`` its legends' entries; the page carries both on the chart's <figure>
    (``data-colors``, ``data-legend``) so they can be checked against the page's
    colour key."""

    name: str
    title: str
    caption: str
    png: bytes
    colors: Mapping[str, Sequence[str]] = field(default_factory=dict)
    legend: Sequence[str] = ()


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)


#: Screen: long text cells wrap, numbers never do; below 820 px wide every table
#: reflows to stacked rows (one card per row, each cell under its column's name from
#: ``data-label``) so no column is hidden behind a sideways scroll, and a chart keeps
#: its drawn size (its text legible) and scrolls sideways in its own box. Print (A4 or Letter,
#: portrait): the same stacked rows for a table too wide for the page (``table.wide``),
#: every other table at the page's width with its cells wrapping, body text at 10 pt,
#: tables at 9 pt, and a heading kept with what follows it.
_CSS: Final = """
:root { color-scheme: light; --fg:#1b1f24; --muted:#57606a; --line:#d0d7de; --bg2:#f6f8fa; --warn:#9a6700; }
* { box-sizing: border-box; }
body { font: 15px/1.5 system-ui, -apple-system, "Segoe UI", Roboto, "DejaVu Sans", sans-serif;
       color: var(--fg); margin: 0 auto; padding: 16px; max-width: 1180px; }
h1 { font-size: 1.6em; margin: .2em 0 .4em; overflow-wrap: anywhere; }
h2 { font-size: 1.25em; border-bottom: 1px solid var(--line); padding-bottom: .2em; margin-top: 1.8em; }
.meta { display: grid; grid-template-columns: max-content 1fr; gap: 2px 14px; margin: 0; }
.meta dt { color: var(--muted); } .meta dd { margin: 0; overflow-wrap: anywhere; }
.verdict p { font-size: 1.05em; margin: .4em 0; padding: 6px 10px; border-left: 4px solid #1f6feb; background: var(--bg2); }
.banner { border: 1px solid var(--warn); background: #fff8c5; padding: 8px 12px; border-radius: 6px; margin: 10px 0; }
.scroll { overflow-x: auto; -webkit-overflow-scrolling: touch; max-width: 100%; }
table { border-collapse: collapse; font-size: 13px; margin: 6px 0 4px; }
th, td { border: 1px solid var(--line); padding: 4px 8px; vertical-align: top; white-space: normal; overflow-wrap: break-word; }
td.wrap { min-width: 12em; max-width: 32em; overflow-wrap: anywhere; }
th { background: var(--bg2); text-align: left; min-width: 4.5em; }
td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
td.msg { min-width: 16em; max-width: 42em; overflow-wrap: anywhere; font-family: ui-monospace, monospace; font-size: 12px; }
figure { margin: 12px 0 20px; } figure img { max-width: 100%; height: auto; border: 1px solid var(--line); }
figcaption, .note { color: var(--muted); font-size: 13px; }
pre { background: var(--bg2); padding: 10px; overflow-x: auto; font-size: 12px; white-space: pre-wrap; overflow-wrap: anywhere; }
dl.defs dt { font-weight: 600; } dl.defs dd { margin: 0 0 6px 1.2em; }
ul.notes li { color: var(--muted); }
ul.colour-key { list-style: none; padding: 0; margin: 4px 0 8px; display: flex; flex-wrap: wrap; gap: 2px 16px; font-size: 13px; }
ul.colour-key .swatch { font-size: 1.2em; }
@media (max-width: 640px) { body { padding: 10px; font-size: 14px; } .meta { gap: 2px 8px; font-size: 13px; } }
@media screen and (max-width: 820px) {
  table, thead, tbody, tr, th, td { display: block; }
  table { border: 0; width: 100%; }
  thead tr { position: absolute; width: 1px; height: 1px; overflow: hidden; clip-path: inset(50%); }
  tbody tr { border: 1px solid var(--line); border-radius: 4px; margin: 0 0 8px; padding: 2px 0; }
  td, td.num, td.wrap, td.msg { border: 0; border-bottom: 1px solid var(--bg2); display: grid;
       grid-template-columns: minmax(7em, 38%) 1fr; gap: 8px; text-align: left;
       white-space: normal; min-width: 0; max-width: none; overflow-wrap: anywhere; }
  td::before { content: attr(data-label); color: var(--muted); font-family: system-ui, sans-serif; font-size: 12px; }
  .chart { overflow-x: auto; -webkit-overflow-scrolling: touch; }
  .chart img { max-width: none; width: auto; }
}
@page { size: auto; margin: 12mm; }
@media print {
  body { max-width: none; padding: 0; font-size: 10pt; }
  .verdict p { font-size: 10.5pt; }
  .scroll { overflow: visible; } pre { white-space: pre-wrap; overflow-wrap: anywhere; font-size: 9pt; }
  table { font-size: 9pt; width: 100%; }
  th, td, td.num, td.wrap, td.msg { white-space: normal; min-width: 0; max-width: none; padding: 2px 4px; }
  td.wrap, td.msg { overflow-wrap: anywhere; }
  th { min-width: 0; overflow-wrap: normal; }
  table.wide, table.wide thead, table.wide tbody, table.wide tr, table.wide td { display: block; }
  table.wide { border: 0; }
  table.wide thead tr { position: absolute; width: 1px; height: 1px; overflow: hidden; clip-path: inset(50%); }
  table.wide tbody tr { border: 1px solid var(--line); margin: 0 0 4pt; break-inside: avoid;
       display: grid; grid-template-columns: repeat(3, minmax(0, 1fr)); }
  table.wide td { border: 0; text-align: left; }
  table.wide td::before { content: attr(data-label) ": "; color: var(--muted); }
  tr, figure, .verdict p { break-inside: avoid; }
  h1, h2, h3, thead, .note { break-after: avoid; }
  h2 + .note, figcaption { break-before: avoid; }
  figure img { max-height: 230mm; }
  details { display: block; } details > summary { display: none; }
  a { color: inherit; text-decoration: none; }
}
"""


#: The characters of table text (9 pt) a printed portrait page holds on one line, A4 or
#: Letter with 12 mm margins (about 180 mm), less the cells' padding: a table whose
#: columns need more prints as stacked rows instead of losing its right-hand columns.
_PRINT_LINE_CHARS: Final = 110
#: How far a wrapping cell is allowed to shrink when the table is measured for print
#: (the longest word it holds, at least this many characters).
_WRAPPED_CELL_CHARS: Final = 14


def _print_class(table: Table) -> str:
    """' class="wide"' for a table whose narrowest printable layout (numbers and
    headers' longest words whole, long text wrapped) is wider than a portrait page."""
    need = 0
    for i, name in enumerate(table.header):
        texts = [name, *(row[i] for row in table.rows)]
        longest_word = max((len(w) for t in texts for w in t.split()), default=0)
        numeric = bool(table.numeric) and table.numeric[i]
        longest = max(len(t) for t in texts[1:]) if numeric else 0
        need += max(longest_word, longest, min(_WRAPPED_CELL_CHARS, max(map(len, texts))))
        need += 2
    return ' class="wide"' if need > _PRINT_LINE_CHARS else ""


def _table_html(table: Table, *, html_id: str) -> str:
    if not table.rows:
        return ""
    head = "".join(f'<th scope="col">{_e(h)}</th>' for h in table.header)
    body = []
    for row in table.rows:
        cells = []
        for i, cell in enumerate(row):
            numeric = bool(table.numeric) and table.numeric[i]
            wrap = bool(table.wrap) and table.wrap[i]
            if numeric:
                klass = ' class="num"'
            elif table.header[i] == "example message":
                klass = ' class="msg"'
            else:
                klass = ' class="wrap"' if wrap else ""
            cells.append(f'<td{klass} data-label="{_e(table.header[i])}">{_e(cell)}</td>')
        body.append("<tr>" + "".join(cells) + "</tr>")
    note = f'<p class="note">{_e(table.note)}</p>' if table.note else ""
    return (
        f'<section id="{_e(html_id)}"><h2>{_e(table.title)}</h2>{note}'
        f'<div class="scroll"><table{_print_class(table)}><thead><tr>{head}</tr></thead>'
        f"<tbody>{''.join(body)}</tbody></table></div></section>"
    )


@dataclass(frozen=True, slots=True)
class Page:
    """What one HTML page shows, in the order it shows it."""

    title: str
    meta: Sequence[tuple[str, str]]
    banners: Sequence[str] = ()
    #: The verdict sentences the page opens with (the tier pick in words).
    verdict: Sequence[str] = ()
    warnings: Sequence[str] = ()
    #: The tables that answer the page's question (a multi-run report's "What
    #: changed"), right after the verdict.
    lead: Sequence[Table] = ()
    #: The decision tables (tier pick, its evidence), after the lead tables.
    tier: Sequence[Table] = ()
    #: The heading of the metadata list.
    meta_title: str = "Details"
    tables: Sequence[Table] = ()
    charts: Sequence[ChartImage] = ()
    #: The page's one colour per model (the report model's assignment), in its order:
    #: shown as the charts' colour key.
    colors: Mapping[str, str] = field(default_factory=dict)
    notes: Sequence[str] = ()
    errors: Table | None = None
    configs: Sequence[tuple[str, Any]] = ()


def _colour_key(colors: Mapping[str, str]) -> str:
    """The charts' colour key: each model in its colour, in the report's order (by
    size where sizes are known); every chart draws a model in this colour. Each entry
    carries its model and colour (``data-model``, ``data-color``) for checking."""
    if not colors:
        return ""
    items = "".join(
        f'<li data-model="{_e(m)}" data-color="{_e(c)}">'
        f'<span class="swatch" style="color:{_e(c)}">■</span> {_e(m)}</li>'
        for m, c in colors.items()
    )
    return f'<ul id="colour-key" class="colour-key" aria-label="colour per model">{items}</ul>'


def render_html(page: Page) -> str:
    """The whole report as one HTML string (UTF-8, no external references).

    Order: title, banners (interrupted runs), the verdict, the lead tables (what
    changed between runs) and the tier tables (first: they are the answer), warnings, the run's metadata, summary tables, charts, notes
    on charts left out, errors, configs (secrets redacted), definitions.
    """
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        '<meta http-equiv="Content-Security-Policy" content="default-src \'none\'; '
        "img-src data:; style-src 'unsafe-inline'\">",
        f"<title>{_e(page.title)}</title><style>{_CSS}</style></head><body>",
        f"<header><h1>{_e(page.title)}</h1>",
    ]
    parts += [f'<p class="banner" role="status">{_e(b)}</p>' for b in page.banners]
    if page.verdict:
        parts.append('<section id="verdict" class="verdict">')
        parts += [f"<p>{_e(line)}</p>" for line in page.verdict]
        parts.append("</section>")
    parts.append("</header>")
    for i, table in enumerate(page.lead):
        parts.append(_table_html(table, html_id="what-changed" if i == 0 else f"changed-{i}"))
    for i, table in enumerate(page.tier):
        parts.append(_table_html(table, html_id="tier-pick" if i == 0 else f"tier-{i}"))
    if page.warnings:
        parts.append(f'<section id="warnings"><h2>Warnings ({len(page.warnings)})</h2><ul>')
        parts += [f"<li>{_e(w)}</li>" for w in page.warnings[:_SHOWN_WARNINGS]]
        parts.append("</ul>")
        if len(page.warnings) > _SHOWN_WARNINGS:
            rest = page.warnings[_SHOWN_WARNINGS:]
            parts.append(f"<details><summary>{len(rest)} more</summary><ul>")
            parts += [f"<li>{_e(w)}</li>" for w in rest]
            parts.append("</ul></details>")
        parts.append("</section>")
    if page.meta:
        parts.append(f'<section id="meta"><h2>{_e(page.meta_title)}</h2><dl class="meta">')
        parts += [f"<dt>{_e(k)}</dt><dd>{_e(v)}</dd>" for k, v in page.meta]
        parts.append("</dl></section>")
    for i, table in enumerate(page.tables):
        parts.append(_table_html(table, html_id=f"summary-{i}"))
    if page.charts:
        parts.append('<section id="charts"><h2>Charts</h2>')
        parts.append(_colour_key(page.colors))
        for chart in page.charts:
            data = base64.b64encode(chart.png).decode("ascii")
            drawn = orjson.dumps({m: list(c) for m, c in chart.colors.items()}).decode()
            legend = orjson.dumps(list(chart.legend)).decode()
            parts.append(
                f'<figure id="chart-{_e(chart.name)}" data-colors="{_e(drawn)}" '
                f'data-legend="{_e(legend)}"><h3>{_e(chart.title)}</h3>'
                f'<div class="chart"><img alt="{_e(chart.title)}" '
                f'src="data:image/png;base64,{data}"></div>'
                f"<figcaption>{_e(chart.caption)}</figcaption></figure>"
            )
        parts.append("</section>")
    if page.notes:
        parts.append('<section id="left-out"><h2>Left out</h2><ul class="notes">')
        parts += [f"<li>{_e(n)}</li>" for n in page.notes]
        parts.append("</ul></section>")
    if page.errors is not None and page.errors.rows:
        parts.append(_table_html(page.errors, html_id="errors"))
    elif page.errors is not None:
        parts.append('<section id="errors"><h2>Errors</h2><p>No failed requests.</p></section>')
    if page.configs:
        parts.append('<section id="config"><h2>Configuration</h2>')
        for key, config in page.configs:
            text = orjson.dumps(
                Redactor().value(config), option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS
            ).decode()
            parts.append(
                f"<details><summary>{_e(key)} (secrets removed)</summary><pre>{_e(text)}</pre></details>"
            )
        parts.append("</section>")
    parts.append('<section id="definitions"><h2>Definitions</h2><dl class="defs">')
    parts += [f"<dt>{_e(k)}</dt><dd>{_e(v)}</dd>" for k, v in DEFINITIONS]
    parts.append("</dl></section></body></html>")
    return "\n".join(parts) + "\n"
