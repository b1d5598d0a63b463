"""The tier pick's rules on crafted summaries (issue 24): n and an interval with every
decision, too few requests pooled or undecided, only priced models ranked by cost,
equal answers collapsed, and a verdict sentence a reader can quote; where answers were
checked (issue 28), one verdict that holds each task's pick to its pass-rate bar."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import pytest

from tokrate.analysis.tier_pick import (
    Evidence,
    Judgement,
    SloBar,
    TierRun,
    decide_tiers,
    judge_fraction,
    min_requests,
)
from tokrate.report.tables import tier_tables
from tokrate.report.terminal.tier_text import verdict_lines
from tokrate.runfolder.quality import Quality
from tokrate.runfolder.run_info import RunInfo, SloInfo, TargetInfo
from tokrate.runfolder.summary import (
    Cost,
    Distribution,
    Group,
    GroupCounts,
    SloCounts,
    Summary,
    TaskGroup,
)

SLO = SloInfo(ttft_s=0.5, tpot_s=0.03)
SIZES = {"sim-1b": 1.0, "sim-7b": 7.0, "sim-13b": 13.0, "sim-70b": 70.0}


@dataclass(frozen=True)
class Part:
    """One model's requests of one task at one level: ``met`` of ``ok + error``."""

    task: str
    ok: int
    met: int
    error: int = 0
    ttft_p95: float = 0.1
    tpot_p95: float = 0.01
    #: Checked answers: (n, passed); None: the task's prompts had no checks.
    checked: tuple[int, int] | None = None
    #: Requests too short for the TPOT limit (one-token answers), and judged requests
    #: whose TPOT came from 2-4 tokens.
    unjudged: int = 0
    short: int = 0


def _dist(p95: float, n: int) -> Distribution:
    return Distribution(n=n, mean=p95 / 2, p50=p95 / 2, p90=p95 * 0.9, p95=p95, p99=p95)


def _group(
    model: str,
    parts: Sequence[Part],
    *,
    c: int = 8,
    usd: float | None = None,
    gpu: bool = False,
    goodput: float | None = None,
    decode: float = 50.0,
) -> Group:
    def priced(n: int) -> Cost | None:
        # USD per 1,000 requests, every request alike (no spread: a narrow interval).
        if usd is None:
            return None
        return Cost(
            "gpu_hourly" if gpu else "price",
            n=n,
            usd_per_1k_requests=usd,
            usd_per_1k_requests_sd=0.0,
            usd_per_1k_requests_ci=(usd, usd),
        )

    tasks = []
    for p in parts:
        n = p.ok + p.error
        tasks.append(
            TaskGroup(
                task=p.task,
                counts=GroupCounts(scheduled=n, ok=p.ok, error=p.error),
                ttft_s=_dist(p.ttft_p95, p.ok),
                tpot_s=_dist(p.tpot_p95, p.ok),
                e2e_s=_dist(1.0, p.ok),
                decode_tps=_dist(decode, p.ok),
                slo_met_fraction=p.met / n,
                quality=None if p.checked is None else Quality(*p.checked),
                cost=priced(p.ok),
                slo=SloCounts(p.met, n - p.unjudged, p.unjudged, p.short),
            )
        )
    ok = sum(p.ok for p in parts)
    error = sum(p.error for p in parts)
    met = sum(p.met for p in parts)
    cost = priced(ok)
    return Group(
        endpoint="sim",
        model=model,
        scenario=f"c={c}",
        concurrency=c,
        rate_rps=None,
        counts=GroupCounts(scheduled=ok + error, ok=ok, error=error),
        ttft_s=_dist(max(p.ttft_p95 for p in parts), ok),
        tpot_s=_dist(max(p.tpot_p95 for p in parts), ok),
        e2e_s=_dist(1.0, ok),
        decode_tps=_dist(decode, ok),
        slo_met_fraction=met / (ok + error),
        goodput_rps=goodput,
        cost=cost,
        by_task=tuple(tasks),
        slo=SloCounts(
            met,
            ok + error - sum(p.unjudged for p in parts),
            sum(p.unjudged for p in parts),
            sum(p.short for p in parts),
        ),
    )


def _run(
    groups: Sequence[Group],
    slo: SloInfo = SLO,
    key: str = "r",
    *,
    size_source: str | None = None,
) -> TierRun:
    models = dict.fromkeys(g.model for g in groups)
    targets = tuple(
        TargetInfo("sim", m, params_b=SIZES.get(m), size_source=size_source) for m in models
    )
    info = RunInfo(run_id=key, targets=targets, slo=slo)
    return TierRun(key, Summary(run_id=key, groups=tuple(groups)), info)


def test_min_requests_is_where_one_request_stops_deciding() -> None:
    assert min_requests(0.95) == 20
    assert min_requests(0.9) == 10
    assert min_requests(0.99) == 100
    # 19 of 19 met, yet one miss more would be 94.7%: undecided; 19 of 20 meets.
    assert judge_fraction("SLOs", 19, 19, 0.95).verdict == "undecided"
    assert judge_fraction("SLOs", 19, 20, 0.95).verdict == "meets"
    assert judge_fraction("SLOs", 18, 20, 0.95).verdict == "misses"
    j = judge_fraction("SLOs", 47, 48, 0.95)
    assert j.interval is not None
    assert (round(j.interval[0], 3), round(j.interval[1], 3)) == (0.891, 0.996)


def test_the_issue_sentence_cheapest_priced_with_n_interval_and_next_tier() -> None:
    run = _run(
        [
            _group("sim-1b", [Part("classification", 48, 30, tpot_p95=0.041)], usd=0.05),
            _group("sim-7b", [Part("classification", 48, 47)], usd=0.12),
            _group("sim-13b", [Part("classification", 48, 48)], usd=0.72),
        ]
    )
    decision = decide_tiers([run])
    (cell,) = decision.cells
    assert cell.pick is not None and cell.pick.model == "sim-7b" and cell.rule == "cheapest"
    assert cell.runner_up is not None and cell.runner_up.model == "sim-13b"
    assert verdict_lines(decision) == [
        "For classification pick sim-7b: meets TTFT ≤ 500 ms and TPOT ≤ 30 ms at c=8 in "
        "47/48 requests (95% CI 89–100%), $0.120 per 1,000 requests (95% CI "
        "$0.120–$0.120; token prices on its requests' own tokens), 6x cheaper than sim-13b "
        "($0.720 per 1,000 requests, token prices), the next tier that meets."
    ]
    picks, evidence = tier_tables(decision)
    (row,) = picks.rows
    assert row[:6] == (
        "c=8",
        "classification",
        "sim-7b",
        "47/48 = 98% (89–100%)",
        "cost per 1,000 requests",
        "$0.120 [0.120–0.120]",
    )
    assert "sim-1b: 30/48 met SLOs (95% CI 48–75%), TPOT p95 41.0 ms vs ≤ 30 ms" in row[7]
    # The evidence: every model with its n and interval, in size order.
    assert [r[2] for r in evidence.rows] == ["sim-1b", "sim-7b", "sim-13b"]
    assert [r[5] for r in evidence.rows] == [
        "30/48 = 62% (48–75%)",
        "47/48 = 98% (89–100%)",
        "48/48 = 100% (93–100%)",
    ]


def test_cheapest_ranks_only_priced_models_and_names_the_unpriced() -> None:
    """The `tokrate init` example: gpu_hourly_usd on sim-7b alone. sim-1b meets too:
    it is named, not ranked as free, and never hidden."""
    run = _run(
        [
            _group("sim-1b", [Part("chat", 30, 30)]),
            _group("sim-7b", [Part("chat", 30, 30)], usd=0.4, gpu=True),
            _group("sim-13b", [Part("chat", 30, 30)]),
        ]
    )
    decision = decide_tiers([run])
    (cell,) = decision.cells
    assert cell.pick is not None and cell.pick.model == "sim-7b"
    assert [c.model for c in cell.unpriced_meeting] == ["sim-1b", "sim-13b"]
    (line,) = verdict_lines(decision)
    assert (
        "$0.400 per 1,000 requests (95% CI $0.400–$0.400; GPU-hour price × GPUs at the "
        "measured throughput), the only priced tier that meets" in line
    )
    assert line.endswith("sim-1b and sim-13b also meet but have no price, so are not ranked.")
    picks, _ = tier_tables(decision)
    assert picks.rows[0][6] == "sim-1b (no price), sim-13b (no price)"


def test_without_prices_the_smallest_that_meets_is_picked() -> None:
    run = _run(
        [
            _group("sim-1b", [Part("chat", 30, 20)]),
            _group("sim-7b", [Part("chat", 30, 29)]),
            _group("sim-13b", [Part("chat", 30, 30)]),
        ]
    )
    decision = decide_tiers([run])
    assert decision.cells[0].pick is not None and decision.cells[0].pick.model == "sim-7b"
    assert decision.cells[0].rule == "smallest"
    (line,) = verdict_lines(decision)
    assert "pick sim-7b: meets" in line
    assert "the smallest tier that meets (7B active parameters, against sim-13b's 13B;" in line
    assert "no price known: set price_in_per_m and price_out_per_m" in line


def test_too_few_requests_per_task_are_pooled_and_said_so() -> None:
    """The default run's case: 4-11 requests per task; the level is judged on all its
    tasks together, and every sentence and row says so."""
    parts = [Part("code", 4, 4), Part("extraction", 4, 4), Part("summarization", 22, 22)]
    run = _run(
        [_group("sim-7b", parts, usd=0.1), _group("sim-13b", parts, usd=0.3)],
    )
    decision = decide_tiers([run])
    (cell,) = decision.cells
    assert cell.pooled and cell.fewest == 4
    assert cell.tasks == ("code", "extraction", "summarization")
    assert cell.pick is not None and cell.pick.judgements[0].n == 30
    (line,) = verdict_lines(decision)
    assert line.startswith(
        "For code, extraction and summarization (pooled: as few as 4 requests per task, "
        "fewer than the 20 a decision needs) pick sim-7b: meets TTFT ≤ 500 ms and TPOT ≤ 30 ms"
        " at c=8 in 30/30 requests (95% CI 89–100%)"
    )
    picks, _ = tier_tables(decision)
    assert picks.rows[0][1] == "code, extraction and summarization (pooled: as few as 4 per task)"


def test_a_level_with_too_few_requests_overall_is_undecided() -> None:
    run = _run([_group("sim-7b", [Part("chat", 8, 8)]), _group("sim-13b", [Part("chat", 8, 8)])])
    decision = decide_tiers([run])
    (cell,) = decision.cells
    assert cell.pick is None and {c.verdict for c in cell.candidates} == {"undecided"}
    (line,) = verdict_lines(decision)
    assert line.startswith("For chat there are too few requests at c=8 to decide: sim-7b ")
    assert "8 requests: a 95% bar needs at least 20" in line
    assert line.endswith("Run at least 20 requests per target and level.")


def test_where_no_tier_meets_each_miss_says_by_how_much() -> None:
    heavy = [
        _group("sim-7b", [Part("chat", 40, 10, ttft_p95=0.82)], c=8),
        _group("sim-13b", [Part("chat", 38, 0, error=2, tpot_p95=0.045)], c=8),
    ]
    light = [
        _group("sim-7b", [Part("chat", 40, 40)], c=1),
        _group("sim-13b", [Part("chat", 40, 39)], c=1),
    ]
    decision = decide_tiers([_run(light + heavy)])
    assert decision.levels == ("c=1", "c=8")
    (line,) = verdict_lines(decision)
    assert line == (
        "For chat no tier meets TTFT ≤ 500 ms and TPOT ≤ 30 ms at c=8: "
        "sim-7b 10/40 met SLOs (95% CI 14–40%), TTFT p95 820 ms vs ≤ 500 ms (1.6x the limit); "
        "sim-13b 0/40 met SLOs (95% CI 0–9%), TPOT p95 45.0 ms vs ≤ 30 ms (1.5x the limit), "
        "2 failed. At c=1, sim-7b meets: 40/40 requests (95% CI 91–100%)."
    )


def test_tasks_with_the_same_answer_collapse_into_one_row() -> None:
    run = _run(
        [
            _group(
                "sim-7b",
                [Part("chat", 30, 30), Part("code", 30, 30), Part("math", 30, 10)],
                usd=0.1,
            ),
            _group(
                "sim-13b",
                [Part("chat", 30, 30), Part("code", 30, 29), Part("math", 30, 30)],
                usd=0.3,
            ),
        ]
    )
    decision = decide_tiers([run])
    assert [c.tasks for c in decision.cells] == [("chat", "code"), ("math",)]
    merged = decision.cells[0]
    assert merged.pick is not None and merged.pick.model == "sim-7b"
    # The merged row's evidence is the two tasks' requests summed.
    assert merged.pick.judgements[0].n == 60 and merged.pick.judgements[0].met == 60
    assert merged.runner_up is not None and merged.runner_up.judgements[0].met == 59
    assert decision.cells[1].pick is not None and decision.cells[1].pick.model == "sim-13b"
    lines = verdict_lines(decision)
    assert lines[0].startswith("For chat and code pick sim-7b: meets")
    assert "in 60/60 requests" in lines[0] and "3x cheaper than sim-13b" in lines[0]
    assert lines[1].startswith("For math pick sim-13b: meets")


def test_without_slos_every_model_that_answered_passes() -> None:
    run = _run(
        [
            _group("sim-7b", [Part("chat", 30, 30)], usd=0.1),
            _group("sim-13b", [Part("chat", 30, 30)]),
        ],
        slo=SloInfo(),
    )
    decision = decide_tiers([run])
    assert not decision.slo_set
    (line,) = verdict_lines(decision)
    assert line.startswith("No SLOs are set, so every tier that answered passes at c=8 for chat")
    assert "the cheapest is sim-7b ($0.100 per 1,000 requests" in line


@dataclass(frozen=True)
class _PassRate:
    """A second bar (what issue 28's pass rate will be): here, only sim-13b passes."""

    attainment: float = 0.9
    name: str = "pass rate ≥ 90%"

    def judge(self, evidence: Evidence) -> Judgement:
        n = evidence.counts_n
        met = n if evidence.group.model == "sim-13b" else n // 2
        return judge_fraction(self.name, met, n, self.attainment)


def test_a_second_bar_plugs_in_and_the_pick_must_meet_both() -> None:
    run = _run(
        [
            _group("sim-7b", [Part("chat", 30, 30)], usd=0.1),
            _group("sim-13b", [Part("chat", 30, 30)], usd=0.3),
        ]
    )
    decision = decide_tiers([run], bars=[SloBar(), _PassRate()])
    assert decision.bars == ("SLOs", "pass rate ≥ 90%")
    (cell,) = decision.cells
    assert cell.pick is not None and cell.pick.model == "sim-13b"
    assert [c.verdict for c in cell.candidates] == ["misses", "meets"]
    (line,) = verdict_lines(decision)
    assert "pass rate ≥ 90% at c=8 in 30/30 requests" in line
    _, evidence = tier_tables(decision)
    assert evidence.header[5:7] == ("SLO met (95% CI)", "pass rate ≥ 90% met (95% CI)")


def test_several_runs_are_told_apart_in_labels() -> None:
    a = _run([_group("sim-7b", [Part("chat", 30, 30)], usd=0.1)], key="night-1")
    b = _run([_group("sim-7b", [Part("chat", 30, 20)], usd=0.1)], key="night-2")
    decision = decide_tiers([a, b])
    (cell,) = decision.cells
    assert [c.label for c in cell.candidates] == ["sim-7b (night-1)", "sim-7b (night-2)"]
    assert cell.pick is not None and cell.pick.label == "sim-7b (night-1)"


@pytest.mark.parametrize("empty", [[], [_run([])]])
def test_nothing_to_decide_says_nothing(empty: list[TierRun]) -> None:
    decision = decide_tiers(empty)
    assert decision.cells == () and verdict_lines(decision) == []


# --- answers checked: one verdict, held to the pass-rate bar (issue 28) ----------


def test_a_tier_below_the_pass_rate_bar_is_not_picked_and_the_sentence_says_why() -> None:
    """Latency alone picks sim-1b everywhere; classification's answers (checked) send
    it to sim-13b, naming the smaller tiers the bar kept out with their pass rates and
    intervals; chat (no checks) keeps today's pick."""
    run = _run(
        [
            _group("sim-1b", [Part("chat", 30, 30), Part("classification", 30, 30, checked=(30, 21))]),
            _group("sim-7b", [Part("chat", 30, 30), Part("classification", 30, 30, checked=(30, 24))]),
            _group("sim-13b", [Part("chat", 30, 30), Part("classification", 30, 30, checked=(30, 29))]),
        ],
        slo=SloInfo(ttft_s=0.5, tpot_s=0.03, min_pass_rate=0.9),
    )  # fmt: skip
    decision = decide_tiers([run])
    assert decision.bars == ("SLOs", "pass rate") and decision.checked
    chat, cls = decision.cells
    assert chat.tasks == ("chat",) and chat.pick is not None and chat.pick.model == "sim-1b"
    assert cls.pick is not None and cls.pick.model == "sim-13b"
    assert [c.verdict for c in cls.candidates] == ["misses", "misses", "meets"]
    chat_line, cls_line = verdict_lines(decision)
    assert chat_line.startswith(
        "For chat pick sim-1b: meets TTFT ≤ 500 ms and TPOT ≤ 30 ms at c=8 in 30/30 "
        "requests (95% CI 89–100%), the smallest tier that meets"
    )
    assert "checked answers" not in chat_line
    assert cls_line == (
        "For classification pick sim-13b: meets TTFT ≤ 500 ms and TPOT ≤ 30 ms at c=8 in "
        "30/30 requests (95% CI 89–100%) and passes 29/30 checked answers (95% CI 83–99%) "
        "≥ the 90% bar, the smallest tier that meets (13B active parameters; no price "
        "known: set price_in_per_m and price_out_per_m (or gpu_hourly_usd) in [[model]] "
        "to rank by cost); sim-1b (pass rate 70%, 95% CI 52–83%) and sim-7b (pass rate "
        "80%, 95% CI 63–90%) fail the 90% pass-rate bar."
    )
    # The evidence table shows the pass rate beside the SLOs for every model.
    picks, evidence = tier_tables(decision)
    assert "Where answers were checked, a model must also pass the task's bar" in picks.note
    assert evidence.header[5:7] == ("SLO met (95% CI)", "pass rate (95% CI)")
    cls_rows = [r for r in evidence.rows if r[1] == "classification"]
    assert [r[6] for r in cls_rows] == [
        "21/30 = 70% (52–83%)",
        "24/30 = 80% (63–90%)",
        "29/30 = 97% (83–99%)",
    ]
    assert cls_rows[0][7] == "pass rate 70% (95% CI 52–83%) < 90%"


def test_no_checked_answers_keeps_todays_pick() -> None:
    run = _run([_group("sim-1b", [Part("chat", 30, 30)]), _group("sim-7b", [Part("chat", 30, 30)])])
    decision = decide_tiers([run])
    assert decision.bars == ("SLOs",) and not decision.checked
    (line,) = verdict_lines(decision)
    assert line.startswith("For chat pick sim-1b: meets TTFT ≤ 500 ms and TPOT ≤ 30 ms")


def test_pooled_latency_keeps_answers_per_task_and_says_so_once() -> None:
    """Four tasks of 4-11 requests: the SLOs are judged on each model's 30 requests
    together (never summed again when tasks collapse), each checked task on its own
    answers; the reason is one line before the sentences, with the request count that
    would decide per task."""

    def parts(cls_passed: int) -> list[Part]:
        return [
            Part("chat", 11, 11),
            Part("code", 4, 4),
            Part("classification", 11, 11, checked=(11, cls_passed)),
            Part("summarization", 4, 4),
        ]

    run = _run(
        [
            _group("sim-1b", parts(5)),
            _group("sim-7b", parts(6)),
            _group("sim-13b", parts(11)),
            _group("sim-70b", [*parts(11)[:3], Part("summarization", 4, 0)]),
        ]
    )
    decision = decide_tiers([run])
    rest, cls = decision.cells
    assert rest.pooled and cls.pooled and rest.fewest == 4
    assert rest.tasks == ("chat", "code", "summarization")
    assert rest.pick is not None and rest.pick.model == "sim-1b"
    # The pooled SLO judgement counts the model's 30 requests once, not once per task.
    slo = rest.pick.judgement("SLOs")
    assert slo is not None and (slo.met, slo.n, slo.pooled) == (30, 30, True)
    assert cls.pick is not None and cls.pick.model == "sim-13b"
    lines = verdict_lines(decision)
    assert len(lines) == 3
    assert lines[0] == (
        "At c=8 each model has as few as 4 requests of a task, fewer than the 20 a latency "
        "decision needs, so its SLOs are judged on all its tasks together; answers are "
        "still judged per task. For a decision per task send about 150 requests per model "
        "and level (--requests 150)."
    )
    assert lines[1].startswith(
        "For chat, code and summarization pick sim-1b: meets TTFT ≤ 500 ms and TPOT ≤ 30 ms "
        "at c=8 in 30/30 requests of all tasks (95% CI 89–100%)"
    )
    assert lines[2].startswith(
        "For classification pick sim-13b: meets TTFT ≤ 500 ms and TPOT ≤ 30 ms at c=8 in "
        "30/30 requests of all tasks (95% CI 89–100%) and passes 11/11 checked answers "
        "(95% CI 74–100%) ≥ the 90% bar (the default; set [slo] min_pass_rate)"
    )
    assert "sim-1b (pass rate 45%, 95% CI 21–72%) and sim-7b (pass rate 55%" in lines[2]
    # Said once: no sentence repeats the pooling.
    assert sum("as few as" in line for line in lines) == 1


def test_too_few_checked_answers_and_per_task_bars() -> None:
    """A 90% bar needs 10 answers (one wrong of fewer is more than 10%); a per-task bar
    from [slo.min_pass_rate_by_task] applies to its task only."""
    run = _run(
        [
            _group("sim-1b", [Part("extraction", 30, 30, checked=(4, 4)), Part("classification", 30, 30, checked=(30, 25))]),
            _group("sim-7b", [Part("extraction", 30, 30, checked=(4, 4)), Part("classification", 30, 30, checked=(30, 29))]),
        ],
        slo=SloInfo(ttft_s=0.5, min_pass_rate_by_task=(("classification", 0.8),)),
    )  # fmt: skip
    decision = decide_tiers([run])
    cls_line, ext_line = verdict_lines(decision)
    # classification's own bar is 80%: sim-1b's 25/30 clears it.
    assert cls_line.startswith("For classification pick sim-1b: meets TTFT ≤ 500 ms at c=8")
    assert "passes 25/30 checked answers (95% CI 66–93%) ≥ the 80% bar" in cls_line
    assert ext_line == (
        "For extraction there are too few checked answers at c=8 to decide: as few as 4 per "
        "tier, and a 90% pass-rate bar needs at least 10; send more of those checked "
        "prompts (--requests) before picking a tier for it. By the SLOs alone: sim-1b."
    )
    assert decision.pass_bar_default  # extraction had no bar of its own


def test_a_pass_rate_bar_of_one_is_decided_by_any_number() -> None:
    assert min_requests(1.0) == 1
    assert judge_fraction("pass rate", 3, 3, 1.0).verdict == "meets"
    assert judge_fraction("pass rate", 2, 3, 1.0).verdict == "misses"


def test_checked_tasks_with_different_bars_never_share_a_sentence() -> None:
    """Two checked tasks with the same pick but different bars (issue 38): each gets
    its own sentence, quoting its own pass rate against its own bar."""
    parts = [
        Part("classification", 30, 30, checked=(30, 29)),
        Part("extraction", 30, 30, checked=(30, 29)),
    ]
    run = _run(
        [_group("sim-7b", parts), _group("sim-13b", parts)],
        slo=SloInfo(ttft_s=0.5, min_pass_rate=0.9, min_pass_rate_by_task=(("extraction", 0.95),)),
    )
    decision = decide_tiers([run])
    assert [c.tasks for c in decision.cells] == [("classification",), ("extraction",)]
    cls_line, ext_line = verdict_lines(decision)
    assert cls_line.startswith("For classification pick sim-7b:")
    assert "passes 29/30 checked answers (95% CI 83–99%) ≥ the 90% bar" in cls_line
    assert ext_line.startswith("For extraction pick sim-7b:")
    assert "passes 29/30 checked answers (95% CI 83–99%) ≥ the 95% bar" in ext_line
    # Unchecked tasks with the same ranking still share one.
    plain = [Part("chat", 30, 30), Part("code", 30, 30)]
    decision = decide_tiers([_run([_group("sim-7b", plain), _group("sim-13b", plain)])])
    assert [c.tasks for c in decision.cells] == [("chat", "code")]


def test_one_token_answers_are_not_judged_and_short_ones_are_said() -> None:
    """A one-token answer has no TPOT: not counted as meeting the TPOT limit, left out
    of n and said; a TPOT judgement resting on 2-4 token answers says so."""
    run = _run(
        [
            _group("sim-7b", [Part("classification", 30, 24, unjudged=6, short=20)]),
            _group("sim-13b", [Part("classification", 30, 24, unjudged=6, short=20)]),
        ]
    )
    decision = decide_tiers([run])
    (cell,) = decision.cells
    assert cell.pick is not None
    slo = cell.pick.judgement("SLOs")
    assert slo is not None and (slo.met, slo.n, slo.unjudged) == (24, 24, 6)
    (line,) = verdict_lines(decision)
    assert (
        "in 24/24 requests (95% CI 86–100%; 6 one-token answers not judged: no TPOT; its "
        "TPOT judgement rests on answers of 2-4 tokens (20 of 24: 1-3 gaps each))" in line
    )
    # 19 judged requests cannot decide a 95% bar, whatever the unjudged ones did.
    few = _run([_group("sim-7b", [Part("chat", 30, 19, unjudged=11)])])
    (cell,) = decide_tiers([few]).cells
    assert cell.pick is None and cell.candidates[0].verdict == "undecided"


def test_overlapping_cost_intervals_do_not_make_a_tier_cheaper() -> None:
    def priced(model: str, usd: float, half: float) -> Group:
        g = _group(model, [Part("chat", 30, 30)], usd=usd)
        cost = Cost(
            "price",
            n=30,
            usd_per_1k_requests=usd,
            usd_per_1k_requests_sd=0.1,
            usd_per_1k_requests_ci=(usd - half, usd + half),
        )
        return replace(g, cost=cost, by_task=tuple(replace(t, cost=cost) for t in g.by_task))

    run = _run([priced("sim-7b", 1.00, 0.10), priced("sim-13b", 1.05, 0.10)])
    (line,) = verdict_lines(decide_tiers([run]))
    assert "cheaper than" not in line
    assert (
        "sim-13b, the next tier that meets, costs $1.05 per 1,000 requests, token prices: "
        "the intervals overlap, so cost does not separate them" in line
    )


def test_sizes_from_names_are_said_to_be_inferred() -> None:
    run = _run(
        [_group("sim-7b", [Part("chat", 30, 30)]), _group("sim-13b", [Part("chat", 30, 30)])],
        size_source="name",
    )
    (line,) = verdict_lines(decide_tiers([run]))
    assert (
        "the smallest tier that meets (7B active parameters, against sim-13b's 13B, "
        "inferred from its name; sizes of sim-7b and sim-13b inferred from their names;" in line
    )


def test_without_sizes_or_prices_goodput_ranks_and_a_near_tie_goes_to_decode_speed() -> None:
    groups = [
        _group("tier-a", [Part("chat", 30, 30)], goodput=10.0, decode=40.0),
        _group("tier-b", [Part("chat", 30, 30)], goodput=9.8, decode=90.0),
        _group("tier-c", [Part("chat", 30, 30)], goodput=4.0, decode=200.0),
    ]
    decision = decide_tiers([_run(groups)])
    (cell,) = decision.cells
    assert cell.rule == "goodput" and cell.goodput_tie
    assert cell.pick is not None and cell.pick.model == "tier-b"
    (line,) = verdict_lines(decision)
    assert "smallest" not in line
    assert (
        "ranked by measured goodput (no price or size is known): 9.8 req/s against 10 req/s "
        "for tier-a, within 5%, so decode speed per stream decides: 45.0 against 20.0 tok/s"
    ) in line
    # Clearly apart: the higher goodput wins whatever the names or the decode speeds.
    groups[1] = _group("tier-b", [Part("chat", 30, 30)], goodput=5.0, decode=90.0)
    (cell,) = decide_tiers([_run(groups)]).cells
    assert cell.pick is not None and cell.pick.model == "tier-a" and not cell.goodput_tie
