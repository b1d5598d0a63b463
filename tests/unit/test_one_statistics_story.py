"""The same pair of runs gets the same verdicts in the report's "runs side by side",
`tokrate compare` and `tokrate history` — and two runs of one unchanged workload give
no difference in any of them."""

from __future__ import annotations

import re
from pathlib import Path

from helpers.runfolders import make_records, write_run

from tokrate.analysis.compare import compare_runs
from tokrate.analysis.history import load_history
from tokrate.report.build import build_report


def test_identical_runs_give_no_difference_anywhere(tmp_path: Path) -> None:
    root = tmp_path / "reports"
    base = write_run(
        root, "night-1", make_records("night-1", seed=11, n=200), started_at="2026-01-01T00:00:00Z"
    )
    cur = write_run(
        root, "night-2", make_records("night-2", seed=12, n=200), started_at="2026-01-02T00:00:00Z"
    )

    comparison = compare_runs(base, cur)
    verdicts = {(r.model, r.metric): r.verdict for r in comparison.results}
    assert comparison.exit_code == 0
    assert set(verdicts.values()) <= {"unchanged", "not_comparable"}, verdicts

    history = load_history(root)
    assert history.changes.height == 0, history.changes
    # History judges the newest run against the previous with compare's functions:
    # the same rows, the same (absent) changes.
    latest = history.points.filter(history.points["run_id"] == "night-2")
    assert latest.height and latest["change"].null_count() == latest.height

    assert _side_by_side_verdicts(base, cur, tmp_path) == {"unchanged"}


def _side_by_side_verdicts(base: Path, cur: Path, tmp: Path) -> set[str]:
    """The verdict words of the multi-run report's "Runs side by side" table."""
    out = build_report([base, cur], out_dir=tmp / "side-by-side", formats=("png",))
    html = (out / "report.html").read_text(encoding="utf-8")
    start = html.index('id="summary-0"')
    table = html[start : html.index("</section>", start)]
    assert "Runs side by side" in table
    return set(re.findall(r"\], (regressed|improved|unchanged|not comparable)\)", table))


def test_a_real_slowdown_is_the_same_verdict_everywhere(tmp_path: Path) -> None:
    root = tmp_path / "reports"
    base = write_run(
        root, "night-1", make_records("night-1", seed=11, n=200), started_at="2026-01-01T00:00:00Z"
    )
    slow = make_records("night-2", seed=12, n=200, slow={"sim-70b": 1.5})
    cur = write_run(root, "night-2", slow, started_at="2026-01-02T00:00:00Z")

    comparison = compare_runs(base, cur)
    regressed = {(r.model, r.metric) for r in comparison.results if r.verdict == "regressed"}
    assert regressed and all(model == "sim-70b" for model, _ in regressed)

    history = load_history(root)
    flagged = {
        (m, metric)
        for m, metric, change in history.changes.select("model", "metric", "change").rows()
        if change == "regressed"
    }
    assert flagged == regressed
    assert "regressed" in _side_by_side_verdicts(base, cur, tmp_path)
