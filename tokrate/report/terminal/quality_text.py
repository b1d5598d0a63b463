"""The terminal's answer-quality table and routing sentences (lean: rich only).

Printed under the summary table when a run checked answers (docs/quality.md): one row per
model x task, summed over load levels (a check's verdict does not depend on the load),
with n judged, passed, the pass rate and its Wilson 95% interval, then a line naming
routing.json. The sentences that pick a tier per task are the tier pick's verdict
(report.tier_text), printed last.
"""

from __future__ import annotations

from rich import box
from rich.console import Console
from rich.table import Table as RichTable
from rich.text import Text

from tokrate.runfolder.quality import Quality
from tokrate.runfolder.routing import RoutingFile
from tokrate.runfolder.summary import Summary
from tokrate.spec.metric_table import metric_label
from tokrate.textfmt import fmt_pct_interval

__all__ = ["quality_rows", "render_quality"]

HEADER = ("model", "task", "n", "passed", metric_label("pass_rate"), "95% CI", "check errors")


def quality_rows(summary: Summary) -> list[tuple[str, ...]]:
    """(model, task, n, passed, rate, CI, check errors) per target x task, summed over
    load levels (a check's verdict does not depend on the load)."""
    totals: dict[tuple[str, str, str], list[int]] = {}
    for g in summary.groups:
        for t in g.by_task:
            if t.quality is None:
                continue
            cell = totals.setdefault((g.endpoint, g.model, t.task), [0, 0, 0])
            cell[0] += t.quality.n
            cell[1] += t.quality.passed
            cell[2] += t.quality.check_errors
    endpoints = {e for e, _m, _t in totals}
    rows: list[tuple[str, ...]] = []
    for (endpoint, model, task), (n, passed, errors) in totals.items():
        q = Quality(n, passed, None, errors)
        name = model if len(endpoints) == 1 else f"{endpoint}/{model}"
        ci = q.rate_ci
        rows.append(
            (
                name,
                task,
                str(n),
                str(passed),
                "-" if q.rate is None else f"{q.rate:.0%}",
                "-" if ci is None else fmt_pct_interval(*ci),
                str(errors),
            )
        )
    return rows


def render_quality(summary: Summary, routing: RoutingFile | None, console: Console) -> None:
    """The quality table (nothing when nothing was checked), and where routing.json
    holds the per-task routes; the verdict sentences (report.tier_text) hold each
    pick to the same pass-rate bar."""
    rows = quality_rows(summary)
    if not rows:
        return
    table = RichTable(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
    for i, header in enumerate(HEADER):
        table.add_column(header, justify="right" if i >= 2 else "left", no_wrap=i >= 2)
    for row in rows:
        table.add_row(*(Text(c) for c in row))
    console.print()
    console.print(Text("answer quality (checked prompts, all load levels; docs/quality.md)"))
    console.print(table)
    if routing is not None:
        console.print(
            Text(
                f"routing.json: each task's route at {routing.level} (the verdict's "
                "pick below, or why there is none) with every model's evidence."
            )
        )
