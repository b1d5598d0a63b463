"""summary.md (GitHub-flavoured markdown) and the terminal summary table.

Every cell is escaped with :func:`md_escape`: model names, task names and error bodies
come from users and servers, and a "|" or newline would break the table, HTML would
render in a PR comment, and "[x](url)" would become a link.
"""

from __future__ import annotations

import html
import re
from collections.abc import Mapping, Sequence
from typing import Any, Final

from rich.console import Console
from rich.table import Table as RichTable
from rich.text import Text

from tokrate.report.tables import Table, fmt_ms, fmt_num

__all__ = ["md_escape", "render_markdown", "render_summary", "table_markdown"]

# Characters GitHub markdown gives meaning to inside a table cell (after HTML escaping,
# which takes care of < > & and quotes).
_MD_SPECIAL: Final = re.compile(r"([\\`*_\[\]|~])")
_NEWLINES: Final = re.compile(r"[\r\n\u2028\u2029]+")


def md_escape(text: object) -> str:
    """``text`` safe inside a GFM table cell: HTML-escaped, markdown punctuation
    backslash-escaped, newlines folded to spaces."""
    s = _NEWLINES.sub(" ", str(text))
    s = html.escape(s, quote=True)
    # Escape markdown punctuation, but not inside the entities html.escape just made.
    parts = re.split(r"(&(?:amp|lt|gt|quot|#x27);)", s)
    return "".join(
        p if p.startswith("&") and p.endswith(";") else _MD_SPECIAL.sub(r"\\\1", p) for p in parts
    )


def table_markdown(table: Table) -> str:
    """One GFM table with a heading and optional note (all cells escaped)."""
    if not table.rows:
        return ""
    align = [
        ("---:" if table.numeric and table.numeric[i] else "---") for i in range(len(table.header))
    ]
    lines = [f"### {md_escape(table.title)}", ""]
    if table.note:
        lines += [md_escape(table.note), ""]
    lines.append("| " + " | ".join(md_escape(h) for h in table.header) + " |")
    lines.append("| " + " | ".join(align) + " |")
    for row in table.rows:
        lines.append("| " + " | ".join(md_escape(c) for c in row) + " |")
    return "\n".join(lines) + "\n"


def render_markdown(
    *,
    title: str,
    meta: Sequence[tuple[str, str]],
    tables: Sequence[Table],
    notes: Sequence[str],
    warnings: Sequence[str],
) -> str:
    """summary.md: title, a metadata list, warnings, the tables, then chart notes."""
    out = [f"## {md_escape(title)}", ""]
    for key, value in meta:
        out.append(f"- **{md_escape(key)}**: {md_escape(value)}")
    out.append("")
    if warnings:
        out += ["**Warnings**", ""]
        out += [f"- {md_escape(w)}" for w in warnings]
        out.append("")
    for table in tables:
        body = table_markdown(table)
        if body:
            out += [body]
    if notes:
        out += ["**Left out of the report**", ""]
        out += [f"- {md_escape(n)}" for n in notes]
        out.append("")
    return "\n".join(out).rstrip() + "\n"


def render_summary(summary: Mapping[str, Any], console: Console) -> None:
    """Print the terminal summary table (one row per model x load level) to ``console``.

    Cells are rich ``Text`` objects, so "[" in a model name is never read as markup.
    """
    groups: list[Mapping[str, Any]] = list(summary.get("groups") or [])
    table = RichTable(title=Text(f"tokrate run {summary.get('run_id') or ''}".strip()))
    columns = (
        "endpoint", "model", "level", "ok", "err", "TTFT p50", "TTFT p95", "TPOT p50",
        "decode tok/s", "agg tok/s", "goodput/s",
    )  # fmt: skip
    for i, name in enumerate(columns):
        table.add_column(name, justify="right" if i >= 3 else "left", no_wrap=i < 3)
    for g in groups:
        counts = g["counts"]
        level = (
            f"c={g['concurrency']}"
            if g.get("concurrency") is not None
            else (f"{g['rate_rps']:g}/s" if g.get("rate_rps") is not None else str(g["scenario"]))
        )
        cells = (
            str(g["endpoint"]), str(g["model"]), level, str(counts["ok"]),
            str(counts["error"] + counts["cancelled"]), fmt_ms(g["ttft_s"]["p50"]),
            fmt_ms(g["ttft_s"]["p95"]), fmt_ms(g["tpot_s"]["p50"]), fmt_num(g["decode_tps"]["p50"]),
            fmt_num(g.get("aggregate_output_tps")), fmt_num(g.get("goodput_rps"), 2),
        )  # fmt: skip
        table.add_row(*(Text(c) for c in cells))
    if not groups:
        console.print(Text("no requests recorded"))
        return
    console.print(table)
