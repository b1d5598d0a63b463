"""The routing table and the pass-rate comparison, on hand-made summaries and records:
the smallest clearing model per task, by how much each misses, the bar's sources,
summary.json's quality round trip, and a pass-rate drop judged by its interval."""

from __future__ import annotations

import polars as pl

from tokrate.analysis.quality_compare import compare_pass_rate, has_checks
from tokrate.analysis.routing import routing_table
from tokrate.analysis.tier_pick import TierRun, decide_tiers
from tokrate.report.tier_text import verdict_lines
from tokrate.runfolder.comparison import CompareSettings, MetricResult
from tokrate.runfolder.quality import Quality, wilson
from tokrate.runfolder.run_info import RunInfo, SloInfo, TargetInfo
from tokrate.runfolder.summary import (
    Cost,
    Distribution,
    Group,
    GroupCounts,
    Summary,
    TaskGroup,
)
from tokrate.spec.thresholds import PASS_RATE_DEFAULT, parse_threshold

SIZES = {"small": 1.0, "mid": 13.0, "big": 70.0}


def _task(task: str, n: int, passed: int, slo: float | None = None) -> TaskGroup:
    d = Distribution()
    return TaskGroup(
        task, GroupCounts(scheduled=n, ok=n), d, d, d, d, slo, Quality(n, passed, passed / n)
    )


def _run(tasks: dict[str, list[TaskGroup]], slo: SloInfo, price: dict[str, float]) -> tuple:  # type: ignore[type-arg]
    groups = tuple(
        Group(
            "ep",
            model,
            "c4",
            4,
            None,
            GroupCounts(scheduled=40, ok=40),
            cost=Cost(price[model], "price") if model in price else None,
            by_task=tuple(tasks[model]),
        )
        for model in tasks
    )
    info = RunInfo(
        "r1",
        targets=tuple(TargetInfo("ep", m, active_params_b=SIZES[m]) for m in tasks),
        slo=slo,
    )
    return Summary("r1", groups), info


def test_smallest_clearing_model_per_task_and_misses() -> None:
    summary, info = _run(
        {
            "big": [_task("cls", 40, 40), _task("ext", 40, 39)],
            "mid": [_task("cls", 40, 39), _task("ext", 40, 30)],
            "small": [_task("cls", 40, 30), _task("ext", 40, 10)],
        },
        SloInfo(min_pass_rate=0.9, min_pass_rate_by_task=(("ext", 0.99),)),
        {"big": 2.0, "mid": 0.5},
    )
    table = routing_table(summary, info)
    assert table is not None
    doc = table.to_dict()
    assert doc["routes"] == {"cls": {"endpoint": "ep", "model": "mid"}, "ext": None}
    assert doc["bar"] == {"default": 0.9, "by_task": {"ext": 0.99}, "source": "config"}
    (level,) = doc["levels"]
    cls, ext = level["tasks"]
    assert [c["model"] for c in cls["candidates"]] == ["small", "mid", "big"]
    assert cls["cheapest"] == {"endpoint": "ep", "model": "mid"}
    assert cls["candidates"][0]["misses"] == ["pass rate 75.0% < 90% (by 15.0 points)"]
    assert ext["candidates"][2]["misses"] == ["pass rate 97.5% < 99% (by 1.5 points)"]
    # One verdict: the tier pick holds each task to the same bar and names the same
    # model (mid: the cheapest priced one that clears; small fails the bar).
    cls_line, ext_line = verdict_lines(decide_tiers([TierRun("r1", summary, info)]))
    assert cls_line.startswith(
        "For cls pick mid: answered 40/40 requests (95% CI 91–100%) at c=4 with no SLOs set"
    )
    assert "passes 39/40 checked answers (95% CI 87–100%) ≥ the 90% bar" in cls_line
    assert "; small (pass rate 75%, 95% CI 60–86%) fails the 90% pass-rate bar." in cls_line
    # 40 answers cannot show 99%: one wrong answer is 2.5% (100 would be needed).
    assert ext_line.startswith("For ext there are too few checked answers at c=4 to decide")
    assert "a 99% pass-rate bar needs at least 100" in ext_line


def test_slo_and_default_bar() -> None:
    summary, info = _run(
        {"small": [_task("cls", 40, 40, slo=0.5)], "big": [_task("cls", 40, 38, slo=1.0)]},
        SloInfo(ttft_s=0.5),
        {},
    )
    table = routing_table(summary, info)
    assert table is not None and table.bar_source == "default"
    assert table.to_dict()["routes"] == {"cls": {"endpoint": "ep", "model": "big"}}
    small = table.routes[0].candidates[0]
    assert small.misses() == ["SLO met 50% < 95%"]
    (line,) = verdict_lines(decide_tiers([TierRun("r1", summary, info)]))
    assert line.startswith("For cls pick big: meets TTFT ≤ 500 ms at c=4 in 40/40 requests")
    assert "≥ the 90% bar (the default; set [slo] min_pass_rate)" in line


def test_no_checks_no_table_and_quality_round_trip() -> None:
    summary, info = _run({"small": []}, SloInfo(), {})
    assert routing_table(summary, info) is None
    q = Quality(24, 22, 0.9, 1)
    d = q.to_dict()
    assert d["rate"] == 22 / 24 and d["rate_ci"] == list(wilson(22, 24))
    assert Quality.from_dict(d, "w") == q
    lo, hi = wilson(22, 24)
    assert 0.72 < lo < 0.75 and 0.97 < hi < 0.99  # the textbook Wilson interval


def _frame(passed: int, n: int) -> pl.DataFrame:
    return pl.DataFrame({"check_passed": [True] * passed + [False] * (n - passed)})


def test_pass_rate_drop_needs_its_interval() -> None:
    empty = MetricResult(
        "e",
        "m",
        "s",
        "pass_rate",
        "rate",
        "higher_is_better",
        PASS_RATE_DEFAULT,
        "not_comparable",
        "",
    )
    s = CompareSettings()
    big = compare_pass_rate(_frame(58, 60), _frame(30, 60), PASS_RATE_DEFAULT, s, None, empty)
    assert big.verdict == "regressed" and big.ci_high is not None and big.ci_high < 0
    noisy = compare_pass_rate(_frame(9, 10), _frame(7, 10), PASS_RATE_DEFAULT, s, None, empty)
    assert noisy.verdict == "unchanged" and "not significant" in noisy.reason
    up = compare_pass_rate(_frame(30, 60), _frame(58, 60), PASS_RATE_DEFAULT, s, None, empty)
    assert up.verdict == "improved"
    assert has_checks(pl.DataFrame({"check_passed": [None, True]}))
    assert not has_checks(
        pl.DataFrame({"check_passed": [None]}, schema={"check_passed": pl.Boolean})
    )
    t = parse_threshold("pass_rate=-3pp")
    assert not isinstance(t, str) and t.limit == 0.03 and t.describe() == "-3pp"
