"""`--requests auto`'s counting (tokrate.load.auto_sample): each statistic the run
judges is counted the way its verdict counts it, the tier pick's shares included."""

from __future__ import annotations

from typing import Any

from tokrate.load.auto_sample import AutoSample, SampleNeeds, budget_warnings
from tokrate.load.worker.events import RequestFinished
from tokrate.load.worker.stopping import Stop
from tokrate.runfolder.records import RequestRecord
from tokrate.runfolder.run_info import SloInfo


def _rec(i: int, task: str = "chat", tokens: int = 8, **kw: Any) -> RequestRecord:
    fields: dict[str, Any] = {
        "endpoint": "sim",
        "model": "m",
        "status": "ok",
        "prompt_id": f"{task}{i % 3}",
        "ttft_s": 0.01,
        "e2e_s": 0.05,
        "output_tokens": tokens,
        "chunk_offsets_s": tuple(0.01 * (k + 1) for k in range(tokens)),
        **kw,
    }
    return RequestRecord(
        run_id="r", scenario="c=1", task=task, request_index=i, started_at=1.0, t0_ns=i, **fields
    )


def _watch(needs: SampleNeeds, targets: int = 1) -> AutoSample:
    run = Stop()
    return AutoSample("c=1", targets, needs, Stop(run), run)


def test_each_task_needs_twenty_requests_the_slos_judge() -> None:
    """The error rate is judged on 10; the tier pick decides a task's SLO-met share
    on 20 (a 95% bar): the level stops at the 20th request of its rarer task."""
    watch = _watch(SampleNeeds(ok=10, ok_for="error_rate"))
    for i in range(60):
        watch.on_event(RequestFinished(_rec(i, "rare" if i % 3 == 0 else "chat")))
        if watch.stop.is_set():
            break
    assert i == 57  # the 20th "rare" request: i = 0, 3, ..., 57
    (stop,) = watch.outcome(max_requests=100, duration_bound=False)
    assert (stop.reason, stop.limiting, stop.unmet) == (
        "judged",
        "SLO-met share of task rare",
        (),
    )


def test_what_the_slos_cannot_judge_does_not_count() -> None:
    """A one-token answer under a TPOT limit, a cancelled request and a request never
    sent are not judged; a failed request is (it misses); a retried attempt counts
    once, by its last attempt."""
    needs = SampleNeeds(ok=1, ok_for="error_rate", slo=SloInfo(tpot_s=0.1))
    watch = _watch(needs)
    watch.on_event(RequestFinished(_rec(0, tokens=1)))
    watch.on_event(RequestFinished(_rec(1, status="cancelled")))
    not_sent = _rec(2, status="error", error_class="not_sent", output_tokens=None)
    watch.on_event(RequestFinished(not_sent))
    failed = _rec(3, status="error", error_class="http_5xx", output_tokens=None)
    watch.on_event(RequestFinished(failed, retry_in_s=0.5))
    watch.on_event(RequestFinished(failed))
    watch.on_event(RequestFinished(_rec(4)))
    (stop,) = watch.outcome(max_requests=5, duration_bound=False)
    assert stop.sent == 5 and stop.ok == 2
    assert stop.reason == "max_requests"
    assert stop.unmet == ("SLO-met share of task chat: 2 of the 20 requests the SLOs judge",)


def test_a_checked_task_needs_its_bars_checked_answers() -> None:
    """A 98% pass bar is decided on 50 checked answers; only ok answers of a prompt
    with an expect count, and compare's pass-rate row needs 10 of them in all."""
    needs = SampleNeeds(
        ok=10,
        ok_for="error_rate",
        slo=SloInfo(min_pass_rate_by_task=(("math", 0.98),)),
        checked=frozenset({("math0", None)}),
    )
    watch = _watch(needs)
    for i in range(30):  # math0, math1, math2 in turn: 10 checked answers
        watch.on_event(RequestFinished(_rec(i, "math", answer="4")))
    (stop,) = watch.outcome(max_requests=30, duration_bound=False)
    assert stop.unmet == ("pass rate of task math (98% bar): 10 of the 50 checked answers",)
    unchecked = _watch(SampleNeeds(ok=10, ok_for="error_rate", checked=needs.checked))
    for i in range(27):  # 9 checked: short of the 10 compare's pass-rate row needs
        unchecked.on_event(RequestFinished(_rec(i, "math", answer="4")))
    (stop,) = unchecked.outcome(max_requests=27, duration_bound=False)
    assert stop.unmet == (
        "pass rate of task math (90% bar): 9 of the 10 checked answers",
        "pass_rate: 9 of the 10 checked answers",
    )


def test_every_target_of_the_level_must_be_judged() -> None:
    watch = _watch(SampleNeeds(ok=20, ok_for="ttft_p95"), targets=2)
    for i in range(25):
        watch.on_event(RequestFinished(_rec(i)))
    assert not watch.stop.is_set()
    for i in range(20):
        watch.on_event(RequestFinished(_rec(i, model="other")))
    assert watch.stop.is_set()
    stops = watch.outcome(max_requests=100, duration_bound=False)
    assert [(s.model, s.reason, s.limiting) for s in stops] == [
        ("m", "judged", "ttft_p95"),
        ("other", "judged", "ttft_p95"),
    ]


def test_a_level_that_ends_on_its_budget_short_of_samples_is_a_warning() -> None:
    """One line per target whose level reached max_requests or duration_s with a
    statistic short; a judged level, or one a signal stopped, says nothing here."""
    needs = SampleNeeds(ok=662, ok_for="ttft_p99")
    capped, judged = _watch(needs), _watch(SampleNeeds(ok=5, ok_for="ttft_p50"))
    for i in range(40):
        capped.on_event(RequestFinished(_rec(i)))
        judged.on_event(RequestFinished(_rec(i)))
    stops = capped.outcome(max_requests=40, duration_bound=False)
    stops += judged.outcome(max_requests=40, duration_bound=False)
    assert budget_warnings(stops) == [
        "m (sim) at c=1: --requests auto reached load.max_requests after 40 requests with"
        " too few samples for ttft_p99: 40 of the 662 ok requests; those verdicts will say"
        " so. Raise load.max_requests to judge them"
    ]
    timed = capped.outcome(max_requests=1000, duration_bound=True)
    assert "reached load.duration_s after 40 requests" in budget_warnings(timed)[0]
    capped.run_stop.set()
    assert budget_warnings(capped.outcome(max_requests=1000, duration_bound=True)) == []
