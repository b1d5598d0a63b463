"""Models are listed by size, then by name read naturally, in every table: the
terminal, summary.md, the report, compare and history (issue 24)."""

from __future__ import annotations

import io
from pathlib import Path

from helpers.runfolders import make_records, summary_of, write_run
from rich.console import Console

from tokrate.analysis.compare import compare_runs
from tokrate.analysis.metrics import summarize
from tokrate.analysis.ordering import level_key, model_key, natural_key
from tokrate.report.build import build_report
from tokrate.report.history_pages import build_history
from tokrate.report.terminal.comparison_text import render_markdown, render_table
from tokrate.report.terminal.run_tables import render_summary
from tokrate.runfolder.records_frame import records_to_frame
from tokrate.runfolder.run_info import RunInfo, TargetInfo

#: The issue's examples, in the order strings would sort them.
STRING_ORDER = ["sim-13b", "sim-1b", "sim-70b", "sim-7b"]
SIZE_ORDER = ["sim-1b", "sim-7b", "sim-13b", "sim-70b"]


def test_names_read_naturally_and_sizes_come_first() -> None:
    assert sorted(STRING_ORDER, key=natural_key) == SIZE_ORDER
    assert sorted(["20m", "300m", "5m", "80m"], key=natural_key) == ["5m", "20m", "80m", "300m"]
    assert sorted(["c=16", "c=4", "c=1"], key=natural_key) == ["c=1", "c=4", "c=16"]
    # A known size wins over the name; unknown sizes come after every known one.
    named = [("zeta", 1.0), ("alpha", 70.0), ("beta", None), ("sim-2b", None)]
    ordered = sorted(named, key=lambda ms: model_key(*ms))
    assert [m for m, _ in ordered] == ["zeta", "alpha", "beta", "sim-2b"]
    assert level_key("c=16", 16) > level_key("c=4", 4)


def _lines_with(text: str, names: list[str]) -> list[str]:
    """The names in the order they first appear in ``text`` (row order)."""
    return sorted(names, key=text.index)


def test_summarize_orders_groups_by_size_then_name() -> None:
    models = ["20m", "300m", "5m", "80m"]
    records = make_records("r", models=models, n=4)
    unsized = summarize(records_to_frame(records), RunInfo(run_id="r"))
    assert [g.model for g in unsized.groups] == ["5m", "20m", "80m", "300m"]
    # Sizes from run.json win over names (a "300m" that is really the smallest).
    targets = tuple(
        TargetInfo("sim", m, params_b=p) for m, p in zip(models, (2.0, 0.01, 3.0, 4.0), strict=True)
    )
    sized = summarize(records_to_frame(records), RunInfo(run_id="r", targets=targets))
    assert [g.model for g in sized.groups] == ["300m", "20m", "5m", "80m"]


def test_terminal_summary_md_and_report_list_models_by_size(tmp_path: Path) -> None:
    records = make_records("r", models=STRING_ORDER, n=6)
    run = write_run(tmp_path, "r", records, summary=summary_of("r", records))
    console = Console(file=io.StringIO(), width=100)
    render_summary(summarize(records_to_frame(records), RunInfo(run_id="r")), console)
    terminal = console.file.getvalue()  # type: ignore[attr-defined]
    assert _lines_with(terminal, STRING_ORDER) == SIZE_ORDER
    out = build_report([run], tmp_path / "report", formats=("png",))
    md = (out / "summary.md").read_text()
    summary_part = md[md.index("### Summary") :]
    assert _lines_with(summary_part, [f"| {m} |" for m in STRING_ORDER]) == [
        f"| {m} |" for m in SIZE_ORDER
    ]


def test_compare_and_history_list_models_by_size(tmp_path: Path) -> None:
    a = write_run(tmp_path / "runs", "a", make_records("a", models=STRING_ORDER, n=20))
    b = write_run(
        tmp_path / "runs",
        "b",
        make_records("b", models=STRING_ORDER, n=20, seed=1, started_at=1_700_100_000.0),
        started_at="2026-01-02T00:00:00Z",
    )
    comparison = compare_runs(a, b)
    md = render_markdown(comparison)
    table = md[md.index("| target |") :]
    assert _lines_with(table, [f"| {m} c=4" for m in STRING_ORDER]) == [
        f"| {m} c=4" for m in SIZE_ORDER
    ]
    console = Console(file=io.StringIO(), width=100)
    render_table(comparison, console)
    assert _lines_with(console.file.getvalue(), STRING_ORDER) == SIZE_ORDER  # type: ignore[attr-defined]
    out, _ = build_history(tmp_path / "runs", tmp_path / "history")
    history_md = (out / "history.md").read_text()
    assert _lines_with(history_md, [f"| {m} c=4" for m in STRING_ORDER]) == [
        f"| {m} c=4" for m in SIZE_ORDER
    ]
