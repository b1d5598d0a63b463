"""run_worker against real loopback servers: fallbacks, mixing, stop, open loop,
connect failures and retries. (Simulator-truth accuracy lives in test_engine_sim.py.)"""

from __future__ import annotations

import gc
import socket
import threading
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
from helpers.hostile_server import HostileServer, hostile_server

from tokrate.inputs.prompt_base import Prompt
from tokrate.inputs.targets import Target
from tokrate.load.collector import count_outcomes
from tokrate.load.plan import build_plan
from tokrate.load.worker.engine import WorkerTask, run_worker
from tokrate.load.worker.events import (
    LoopLag,
    RequestFinished,
    RequestStarted,
    WorkerDone,
    WorkerWarning,
)
from tokrate.load.worker.settings import WorkerSettings
from tokrate.load.worker.stopping import Stop
from tokrate.runfolder.records import RequestRecord
from tokrate.spec.types import ClientSpec, EndpointSpec, LoadSpec, ModelSpec, RetrySpec, RunSpec


def _prompt(i: int) -> Prompt:
    return Prompt(
        id=f"p{i}",
        task="chat",
        messages=({"role": "user", "content": f"question {i}"},),
        prompt=None,
        max_tokens=8,
        input_tokens_est=4,
        source=f"test:{i}",
    )


# The real dataclass, not a look-alike: a stand-in missed every attribute the engine
# learned to read after it was written (``expect``).
PROMPTS = tuple(_prompt(i) for i in range(4))


@pytest.fixture(scope="module")
def server() -> Iterator[HostileServer]:
    with hostile_server() as srv:
        yield srv
    # Collect now, so anything the server left unclosed is reported against this
    # module, not against whichever later test happens to trigger a collection.
    gc.collect()


def _target(name: str, url: str, model: str = "m") -> Target:
    return Target(endpoint=EndpointSpec(name, url), model=ModelSpec(name, model))


def _run(
    spec: RunSpec,
    targets: tuple[Target, ...],
    *,
    stop: threading.Event | None = None,
    grace_s: float = 5.0,
    scenario: int = 0,
) -> list[Any]:
    plan = build_plan(spec, len(PROMPTS), len(targets))
    events: list[Any] = []
    task = WorkerTask(
        run_id="r",
        worker_id="w0",
        scenario=plan.scenarios[scenario],
        settings=WorkerSettings.from_spec(spec),
        targets=targets,
        prompts=PROMPTS,
        grace_s=grace_s,
    )
    run_worker(task, events.append, stop or Stop())
    return events


def _records(events: list[Any]) -> list[RequestRecord]:
    return [e.record for e in events if isinstance(e, RequestFinished)]


def test_events_and_records_closed_loop(server: HostileServer) -> None:
    spec = RunSpec(load=LoadSpec(concurrency=(3,), requests=6))
    events = _run(spec, (_target("a", server.base_url("ok", tokens=5, itl_ms=2)),))
    recs = _records(events)
    assert len(recs) == 6 and all(r.status == "ok" for r in recs)
    assert sorted(r.request_index for r in recs) == list(range(6))
    assert all(r.tokens_source == "usage" and r.output_tokens == 5 for r in recs)
    assert all(r.concurrency == 3 and r.scenario == "c=3" and r.worker == "w0" for r in recs)
    started = [e for e in events if isinstance(e, RequestStarted)]
    assert len(started) == 6
    assert isinstance(events[-1], WorkerDone)
    assert any(isinstance(e, LoopLag) and e.samples > 0 for e in events)


def test_include_usage_rejection_remembered(server: HostileServer) -> None:
    spec = RunSpec(load=LoadSpec(concurrency=(1,), requests=4))
    url = server.base_url("ok", tokens=4, reject_usage=1)
    recs = _records(_run(spec, (_target("a", url),)))
    assert all(r.status == "ok" and r.output_tokens == 4 for r in recs)
    assert all(r.tokens_source == "chunks" for r in recs)
    # The first request met the 400 and was retried without stream_options; the
    # engine then stopped asking, so later requests went out once, without it.
    assert recs[0].extra.get("usage_rejected") is True
    assert all(not r.extra.get("usage_rejected") and r.attempt == 1 for r in recs[1:])


def test_interleaving_mixes_targets(server: HostileServer) -> None:
    spec = RunSpec(load=LoadSpec(concurrency=(1,), requests=6, targets="interleaved"))
    url = server.base_url("ok", tokens=2)
    targets = (_target("a", url, "m1"), _target("b", url, "m2"))
    # Each target has its own stream (docs/config.md), so which one sends first within a
    # block is the machine's timing; the deal of request indices is the plan's: in
    # balanced blocks, every consecutive pair of indices holds both targets.
    recs = sorted(_records(_run(spec, targets)), key=lambda r: r.request_index)
    order = [r.model for r in recs]
    assert Counter(order) == {"m1": 6, "m2": 6}
    assert [r.request_index for r in recs] == list(range(12))
    assert all(set(order[i : i + 2]) == {"m1", "m2"} for i in range(0, 12, 2))


def test_parallel_targets_run_their_own_streams(server: HostileServer) -> None:
    spec = RunSpec(load=LoadSpec(concurrency=(2,), requests=4, targets="parallel"))
    fast = _target("a", server.base_url("ok", tokens=2), "fast")
    slow = _target("b", server.base_url("ok", tokens=2, ttft_ms=150), "slow")
    recs = _records(_run(spec, (fast, slow)))
    ends = {m: max(r.t0_ns for r in recs if r.model == m) for m in ("fast", "slow")}
    # The fast target is not held back by the slow one's streams.
    assert ends["fast"] < ends["slow"]
    assert Counter(r.model for r in recs) == {"fast": 4, "slow": 4}


def test_stop_grace_then_cancel_keeps_partial_timings(server: HostileServer) -> None:
    spec = RunSpec(load=LoadSpec(concurrency=(3,), requests=50))
    url = server.base_url("ok", tokens=200, itl_ms=20)
    stop = Stop()
    stopped_at_ns: list[int] = []

    def stop_now() -> None:
        stopped_at_ns.append(time.perf_counter_ns())
        stop.set()

    timer = threading.Timer(0.3, stop_now)
    timer.start()
    recs = _records(_run(spec, (_target("a", url),), stop=stop, grace_s=0.2))
    timer.cancel()
    assert len(recs) == 3
    for r in recs:
        assert r.status == "cancelled" and r.error_class == "cancelled"
        assert r.ttft_s is not None and r.content_chunks > 0 and r.e2e_s is not None
        # Ran through the 0.2 s grace after the stop, then was cancelled: judged from the
        # moment the stop was set (the records' t0_ns is the same perf_counter), since
        # on a busy machine the requests start later than the timer does. The event
        # loop may fire the grace timer up to a clock tick early: 2 ms.
        ended_ns = r.t0_ns + r.e2e_s * 1e9
        assert ended_ns >= stopped_at_ns[0] + 0.2e9 - 2e6
        # The run did not wait for the streams: each was cut before the server's 200
        # tokens (4 s at 20 ms each) - judged on what the stream received, not on a
        # wall clock a busy machine stretches.
        assert r.content_chunks < 200
    counts = count_outcomes(recs)
    assert counts == {"scheduled": 3, "ok": 0, "error": 0, "cancelled": 3}


def test_open_loop_records_schedule_and_send_delay(server: HostileServer) -> None:
    spec = RunSpec(
        load=LoadSpec(mode="open", concurrency=(), rates=(40.0,), arrival="constant", requests=8)
    )
    recs = sorted(
        _records(_run(spec, (_target("a", server.base_url("ok", tokens=2)),))),
        key=lambda r: r.request_index,
    )
    assert len(recs) == 8
    scheduled = [r.scheduled_s for r in recs]
    assert scheduled == pytest.approx([i / 40.0 for i in range(8)])
    assert all(r.send_delay_s is not None and 0.0 <= r.send_delay_s < 0.5 for r in recs)
    # Absolute deadlines: the k-th send happens at start + k/40 s, not drifting.
    t0 = [r.t0_ns for r in recs]
    span_s = (t0[-1] - t0[0]) / 1e9
    assert span_s == pytest.approx(7 / 40.0, abs=0.1)
    assert all(r.rate_rps == 40.0 and r.concurrency is None for r in recs)


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_connection_refused_and_dns_failure_are_recorded() -> None:
    spec = RunSpec(load=LoadSpec(concurrency=(2,), requests=3))
    refused = _target("refused", f"http://127.0.0.1:{_closed_port()}/v1", "m1")
    # The reserved .invalid TLD never resolves (RFC 2606): no real host is contacted.
    dns = _target("dns", "http://tokrate-test.invalid/v1", "m2")
    recs = _records(_run(spec, (refused, dns)))
    assert len(recs) == 6
    assert all(r.status == "error" and r.error_class == "connect" for r in recs)
    assert all(r.ttft_s is None and r.output_tokens in (0, None) for r in recs)
    counts = count_outcomes(recs)
    assert counts["scheduled"] == counts["error"] == 6


def test_retry_policy_records_every_attempt(server: HostileServer) -> None:
    retry = RetrySpec(max_attempts=3, on=("http_5xx",), backoff_s=0.01)
    spec = RunSpec(load=LoadSpec(concurrency=(1,), requests=2), client=ClientSpec(retry=retry))
    recs = _records(_run(spec, (_target("a", server.base_url("status", code=503)),)))
    assert [(r.request_index, r.attempt) for r in recs] == [
        (0, 1),
        (0, 2),
        (0, 3),
        (1, 1),
        (1, 2),
        (1, 3),
    ]
    assert all(r.error_class == "http_5xx" and r.http_status == 503 for r in recs)
    assert count_outcomes(recs) == {"scheduled": 2, "ok": 0, "error": 2, "cancelled": 0}


def test_retries_off_by_default(server: HostileServer) -> None:
    spec = RunSpec(load=LoadSpec(concurrency=(1,), requests=2))
    recs = _records(_run(spec, (_target("a", server.base_url("status", code=500)),)))
    assert [r.attempt for r in recs] == [1, 1]


def test_open_loop_safety_cap_is_reported_never_silent(server: HostileServer) -> None:
    spec = RunSpec(
        load=LoadSpec(mode="open", concurrency=(), rates=(50.0,), arrival="constant", requests=6)
    )
    target = _target("a", server.base_url("ok", tokens=2, ttft_ms=200))
    plan = build_plan(spec, len(PROMPTS), 1)
    events: list[Any] = []
    task = WorkerTask(
        "r",
        "w0",
        plan.scenarios[0],
        WorkerSettings.from_spec(spec),
        (target,),
        PROMPTS,
        open_loop_cap=2,
    )
    run_worker(task, events.append, Stop())
    warnings = [e.message for e in events if isinstance(e, WorkerWarning)]
    assert any("load.max_in_flight" in w for w in warnings)
    recs = sorted(_records(events), key=lambda r: r.request_index)
    assert len(recs) == 6
    # Held-back sends show their wait: the 3rd request waited for a slot (~200 ms).
    assert recs[2].send_delay_s is not None and recs[2].send_delay_s > 0.1


def test_a_config_error_while_building_requests_surfaces_as_itself(
    server: HostileServer,
) -> None:
    from tokrate.errors import ConfigError

    spec = RunSpec(load=LoadSpec(concurrency=(2,), requests=2))
    target = Target(
        endpoint=EndpointSpec("ep", server.base_url("ok")),
        model=ModelSpec("ep", "m", extra_body=(("stream", False),)),
    )
    with pytest.raises(ConfigError, match="extra_body may not set 'stream'"):
        _run(spec, (target,))
