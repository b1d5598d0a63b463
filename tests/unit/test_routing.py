"""The routing table and the pass-rate comparison, on hand-made summaries and records:
each task's route is the tier decision's pick (so routing.json and the verdict never
disagree), a task the decision cannot settle has no route and says why with its
numbers, each candidate says by how much it misses, the bar's sources, summary.json's
quality round trip, and a pass-rate drop judged by its interval."""

from __future__ import annotations

import random
from dataclasses import replace
from types import SimpleNamespace

import polars as pl
import pytest

from tokrate.analysis.quality_compare import compare_pass_rate, has_checks
from tokrate.analysis.routing import routing_file, routing_table
from tokrate.analysis.tier_pick import TierRun, decide_tiers
from tokrate.report.model import LeftOut
from tokrate.report.quality_section import quality_chart
from tokrate.report.terminal.tier_text import verdict_lines
from tokrate.runfolder.comparison import CompareSettings, MetricResult
from tokrate.runfolder.jsondoc import from_json, to_json
from tokrate.runfolder.proportions import wilson_interval as wilson
from tokrate.runfolder.quality import Quality
from tokrate.runfolder.routing import ROUTING_LAYOUT
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


def _task(
    task: str, n: int, passed: int, slo: float | None = None, requests: int | None = None
) -> TaskGroup:
    """A task of ``requests`` (default ``n``) ok requests, ``n`` of them checked."""
    d = Distribution()
    sent = n if requests is None else requests
    quality = Quality(n, passed, passed / n if n else None)
    return TaskGroup(task, GroupCounts(scheduled=sent, ok=sent), d, d, d, d, slo, quality)


def _cost(usd_per_1k: float | None) -> Cost | None:
    if usd_per_1k is None:
        return None
    return Cost("price", n=40, usd_per_1k_requests=usd_per_1k, usd_per_1k_requests_sd=0.0)


def _run(tasks: dict[str, list[TaskGroup]], slo: SloInfo, price: dict[str, float]) -> tuple:  # type: ignore[type-arg]
    groups = tuple(
        Group(
            "ep",
            model,
            "c4",
            4,
            None,
            GroupCounts(scheduled=40, ok=40),
            cost=_cost(price.get(model)),
            by_task=tuple(replace(t, cost=_cost(price.get(model))) for t in tasks[model]),
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
    doc = to_json(routing_file(table))
    assert doc["layout"] == ROUTING_LAYOUT and doc["level"] == "c=4"
    assert doc["routes"] == {"cls": {"endpoint": "ep", "model": "mid"}, "ext": None}
    assert doc["bar"] == {"default": 0.9, "by_task": {"ext": 0.99}, "source": "config"}
    # 40 answers cannot show 99%: one wrong answer is 2.5% (100 would be needed).
    assert doc["unrouted"] == {
        "ext": {
            "why": "too_few_answers",
            "reason": "too few checked answers to decide: as few as 40 per model, and a "
            "99% pass-rate bar needs at least 100",
            "answers": 40,
            "answers_needed": 100,
        }
    }
    (level,) = doc["levels"]
    cls, ext = level["tasks"]
    assert [c["model"] for c in cls["candidates"]] == ["small", "mid", "big"]
    assert cls["route"] == cls["cheapest"] == {"endpoint": "ep", "model": "mid"}
    assert cls["rule"] == "cheapest" and cls["smallest"] == cls["route"]
    small = cls["candidates"][0]
    assert small["misses"] == ["pass rate 75.0% < 90% (by 15.0 points)"]
    assert small["pass_rate"]["verdict"] == "misses" and small["pass_rate"]["needed"] == 10
    assert (small["n"], small["passed"], small["rate"]) == (40, 30, 0.75)
    assert small["rate_ci"] == list(wilson(30, 40))
    assert ext["candidates"][2]["misses"] == [
        "pass rate undecided (40 checked answers: a 99% bar needs at least 100)"
    ]
    # One verdict: the tier pick holds each task to the same bar and names the same
    # model (mid: the cheapest priced one that meets; small fails the bar).
    cls_line, ext_line = verdict_lines(decide_tiers([TierRun("r1", summary, info)]))
    assert cls_line.startswith(
        "For cls pick mid: answered 40/40 requests (95% CI 91–100%) at c=4 with no SLOs set"
    )
    assert "passes 39/40 checked answers (95% CI 87–100%) ≥ the 90% bar" in cls_line
    assert "; small (pass rate 75%, 95% CI 60–86%) fails the 90% pass-rate bar." in cls_line
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
    assert to_json(routing_file(table))["routes"] == {"cls": {"endpoint": "ep", "model": "big"}}
    assert to_json(routing_file(table))["slo_set"] is True
    small = table.routes[0].candidates[0]
    assert small.misses() == ["SLOs met 20/40 (50%) < 95%"]
    assert table.routes[0].rule == "smallest"
    (line,) = verdict_lines(decide_tiers([TierRun("r1", summary, info)]))
    assert line.startswith("For cls pick big: meets TTFT ≤ 500 ms at c=4 in 40/40 requests")
    assert "≥ the 90% bar (the default; set [slo] min_pass_rate)" in line


def test_no_checks_no_table_and_quality_round_trip() -> None:
    summary, info = _run({"small": []}, SloInfo(), {})
    assert routing_table(summary, info) is None
    q = Quality(24, 22, 0.9, 1)
    d = to_json(q)
    assert d["rate"] == 22 / 24 and d["rate_ci"] == list(wilson(22, 24))
    assert from_json(Quality, d, "w") == q
    lo, hi = wilson(22, 24)
    assert 0.72 < lo < 0.75 and 0.97 < hi < 0.99  # the textbook Wilson interval


def _frame(passed: int, n: int) -> pl.DataFrame:
    return pl.DataFrame({"check_passed": [True] * passed + [False] * (n - passed)})


def test_pass_rate_drop_needs_its_interval() -> None:
    empty = MetricResult(
        endpoint="e",
        model="m",
        scenario="s",
        metric="pass_rate",
        unit="rate",
        threshold=PASS_RATE_DEFAULT.describe(),
        verdict="not_comparable",
        reason="",
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


def test_a_model_with_too_few_answers_is_never_routed() -> None:
    """4 of 4 right is no evidence of a 90% rate (10 answers decide it): the small
    model that answered them is not routed, and where no model has 10 answers the task
    has no route, with the counts; the verdict says the same."""
    summary, info = _run(
        {
            "small": [_task("cls", 4, 4, requests=40), _task("ext", 4, 4, requests=40)],
            "big": [_task("cls", 20, 19, requests=40), _task("ext", 4, 4, requests=40)],
        },
        SloInfo(),
        {},
    )
    table = routing_table(summary, info)
    assert table is not None
    doc = to_json(routing_file(table))
    assert doc["routes"] == {"cls": {"endpoint": "ep", "model": "big"}, "ext": None}
    assert doc["unrouted"]["ext"]["why"] == "too_few_answers"
    assert (doc["unrouted"]["ext"]["answers"], doc["unrouted"]["ext"]["answers_needed"]) == (4, 10)
    cls = doc["levels"][0]["tasks"][0]
    assert cls["candidates"][0]["verdict"] == "undecided"
    assert cls["candidates"][0]["misses"] == [
        "pass rate undecided (4 checked answers: a 90% bar needs at least 10)"
    ]
    cls_line, ext_line = verdict_lines(decide_tiers([TierRun("r1", summary, info)]))
    assert cls_line.startswith("For cls pick big:")
    assert ext_line.startswith("For ext there are too few checked answers at c=4 to decide")
    assert "as few as 4 per tier, and a 90% pass-rate bar needs at least 10" in ext_line


def test_no_route_below_the_bar_or_missing_one_bar_each() -> None:
    """Every model below the bar: "below_bar", naming the best with its interval. One
    model below the bar and the other over the SLOs: "no_model_meets", each with what it
    missed by how much."""
    summary, info = _run(
        {"small": [_task("cls", 40, 20)], "big": [_task("cls", 40, 30)]}, SloInfo(), {}
    )
    table = routing_table(summary, info)
    assert table is not None
    (route,) = table.routes
    assert route.pick is None and route.why == "below_bar"
    assert route.reason == (
        "no model reaches the 90% pass-rate bar: the best, big, passes 30/40 = 75% (95% CI 60–86%)"
    )
    summary, info = _run(
        {"small": [_task("cls", 40, 40, slo=0.5)], "big": [_task("cls", 40, 30, slo=1.0)]},
        SloInfo(ttft_s=0.5),
        {},
    )
    table = routing_table(summary, info)
    assert table is not None
    (route,) = table.routes
    assert route.why == "no_model_meets"
    assert route.reason == (
        "no model meets both the pass-rate bar and the SLOs: small: SLOs met 20/40 (50%) "
        "< 95%; big: pass rate 75.0% < 90% (by 15.0 points)"
    )
    (line,) = verdict_lines(decide_tiers([TierRun("r1", summary, info)]))
    assert line.startswith("For cls no tier meets")


def test_few_requests_per_task_pool_the_latency_but_not_the_answers() -> None:
    """With 12 requests per task (20 decide 95%), each model's SLOs are judged on its
    requests of all tasks, said in ``latency_pooled`` and in the SLO judgement; the
    pass rate stays the task's own."""
    summary, info = _run(
        {
            "small": [_task("cls", 12, 8, slo=1.0), _task("chat", 0, 0, slo=1.0, requests=12)],
            "big": [_task("cls", 12, 12, slo=1.0), _task("chat", 0, 0, slo=1.0, requests=12)],
        },
        SloInfo(ttft_s=1.0),
        {},
    )
    table = routing_table(summary, info)
    assert table is not None
    doc = to_json(routing_file(table))
    assert doc["routes"] == {"cls": {"endpoint": "ep", "model": "big"}}  # chat is unchecked
    (cls,) = doc["levels"][0]["tasks"]
    assert cls["latency_pooled"] is True
    big = cls["candidates"][1]
    assert big["slo"]["pooled"] is True and big["slo"]["n"] == 40  # the group's requests
    assert big["pass_rate"]["n"] == 12 and big["pass_rate"]["verdict"] == "meets"


def test_routes_are_the_verdicts_picks_on_random_runs() -> None:
    """On 300 random runs (3 models, 1-3 tasks, answers 0-40, SLO fractions, prices
    or none, two levels) every task's route is the pick of the verdict's cell for that
    task at the heaviest level, and a task without one is unrouted with a reason."""
    rng = random.Random(28)
    for _ in range(300):
        tasks = rng.sample(["cls", "ext", "qa"], rng.randint(1, 3))
        groups = []
        for level in (1, 8):
            for model in SIZES:
                parts = []
                for task in tasks:
                    n = rng.choice([0, 3, 9, 10, 12, 25, 40])
                    passed = rng.randint(0, n)
                    requests = max(n, rng.choice([4, 12, 30]))
                    slo = rng.choice([None, 0.8, 0.96, 1.0])
                    parts.append(_task(task, n, passed, slo=slo, requests=requests))
                price = rng.choice([None, 0.5, 2.0])
                groups.append(
                    Group(
                        "ep",
                        model,
                        f"c{level}",
                        level,
                        None,
                        GroupCounts(scheduled=60, ok=60),
                        slo_met_fraction=rng.choice([None, 0.9, 1.0]),
                        cost=None if price is None else Cost(price, "price"),
                        by_task=tuple(parts),
                    )
                )
        slo = SloInfo(ttft_s=rng.choice([None, 0.5]), min_pass_rate=rng.choice([None, 0.8]))
        info = RunInfo(
            "r", targets=tuple(TargetInfo("ep", m, active_params_b=SIZES[m]) for m in SIZES)
        )
        info = RunInfo("r", targets=info.targets, slo=slo)
        summary = Summary("r", tuple(groups))
        decision = decide_tiers([TierRun("r", summary, info)])
        table = routing_table(summary, info)
        if table is None:
            assert not decision.checked
            continue
        heaviest = decision.levels[-1]
        assert table.level == heaviest
        doc = to_json(routing_file(table))
        for cell in decision.cells_at(heaviest):
            for task in cell.tasks:
                if task not in doc["routes"]:
                    assert all(c.pass_rate is None for c in cell.candidates)
                    continue
                route = doc["routes"][task]
                assert (route and route["model"]) == (cell.pick and cell.pick.model)
                assert (task in doc["unrouted"]) == (route is None)


def test_the_trade_chart_says_which_model_has_no_speed_to_draw() -> None:
    """A checked model whose streams gave no decode speed (all buffered, or one token)
    keeps its pass-rate point but cannot be drawn in the speed panel: a LeftOut note
    names it, and the chart still comes."""
    summary, info = _run(
        {"small": [_task("cls", 40, 30)], "big": [_task("cls", 40, 39)]}, SloInfo(), {}
    )
    speeds = {"small": Distribution(), "big": Distribution(n=40, p50=50.0)}
    summary = Summary(
        "r1",
        tuple(
            replace(
                g,
                decode_tps=speeds[g.model],
                by_task=tuple(replace(t, decode_tps=speeds[g.model]) for t in g.by_task),
            )
            for g in summary.groups
        ),
    )
    inputs = SimpleNamespace(
        summaries=(("r1", summary),), runs=(("r1", SimpleNamespace(info=info)),), multi=False
    )
    items = list(quality_chart(inputs))  # type: ignore[arg-type]
    notes = [i.note for i in items if isinstance(i, LeftOut)]
    assert notes == [
        "quality vs size: left out of the speed panel (no measurable decode speed: fewer "
        "than 2 tokens, or the stream was buffered: it came in a few reads): small"
    ]
    (chart,) = [i for i in items if not isinstance(i, LeftOut)]
    assert chart.figure() is not None  # draws with the speedless model left out
    assert {(p.label, p.decode_tps) for p in chart.data.points} == {
        ("small", None),
        ("big", 50.0),
    }


@pytest.mark.parametrize(("passed", "n"), [(19, 19), (38, 38), (0, 5), (0, 19)])
def test_the_trade_chart_draws_all_or_none_passed(passed: int, n: int) -> None:
    """A model that passed all of its 19 (or 38) checked answers, or none of 5, still
    gets its point and error bar: the Wilson ends are exact at 0 and 1, so no bar is
    negative ("'yerr' must not contain negative values" lost the chart, issue 44)."""
    summary, info = _run(
        {"small": [_task("cls", n, passed)], "big": [_task("cls", 40, 39)]}, SloInfo(), {}
    )
    speeds = {"small": Distribution(n=40, p50=200.0), "big": Distribution(n=40, p50=50.0)}
    summary = Summary("r1", tuple(replace(g, decode_tps=speeds[g.model]) for g in summary.groups))
    inputs = SimpleNamespace(
        summaries=(("r1", summary),), runs=(("r1", SimpleNamespace(info=info)),), multi=False
    )
    items = list(quality_chart(inputs))  # type: ignore[arg-type]
    (chart,) = [i for i in items if not isinstance(i, LeftOut)]
    point = next(p for p in chart.data.points if p.label == "small")
    assert point.lo <= point.rate <= point.hi
    # The speed panel names its load level, so its figures can be found in a table.
    assert "decode speed (median) at c=4, the Routing table's level" in chart.caption
    from tokrate.report.drawing import chart_files

    files = chart_files(chart.figure(), ("png",))
    assert files["png"].startswith(b"\x89PNG")
