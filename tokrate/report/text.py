"""summary.md (GitHub-flavoured markdown); the terminal tables are
:mod:`tokrate.report.terminal.run_tables`'s.

Every cell is escaped with :func:`md_escape`: model names, task names and error bodies
come from users and servers, and a "|" or newline would break the table, HTML would
render in a PR comment, and "[x](url)" would become a link.
"""

from __future__ import annotations

from collections.abc import Sequence

from tokrate.report.tables import Table
from tokrate.textfmt import md_escape

__all__ = ["render_markdown", "table_markdown"]


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
    verdict: Sequence[str] = (),
) -> str:
    """summary.md: title, the verdict, a metadata list, warnings, the tables, then
    chart notes."""
    out = [f"## {md_escape(title)}", ""]
    for line in verdict:
        out += [f"**{md_escape(line)}**", ""]
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
