"""A capacity run where no tier met every SLO still reports: the capacity table says so
per tier, and the "which tier serves N users" table is left out (no number of replicas
serves anyone at the SLO) instead of failing on an empty choice."""

from __future__ import annotations

from pathlib import Path

from tokrate.report.contents import build_model, load_inputs
from tokrate.runfolder.store import read_capacity

CAPACITY_RUN = Path(__file__).parents[1] / "fixtures" / "runs" / "v0.1-pre-convert-capacity"


def test_a_capacity_run_where_no_tier_met_reports_without_the_cheapest_table() -> None:
    capacity = read_capacity(CAPACITY_RUN)
    assert capacity is not None
    assert not any(t.capacity for t in capacity.targets)  # the fixture's premise

    model = build_model(load_inputs([CAPACITY_RUN]))

    titles = [t.title for t in model.tables]
    assert "Capacity" in " ".join(titles)
    assert "Which tier serves N users at the SLO cheapest" not in titles
