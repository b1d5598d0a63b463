"""``--workers N``: the process backend against the real simulator on 127.0.0.1.

Timing checks compare with the simulator's truth log (same CLOCK_MONOTONIC on one host),
not with wall-clock expectations, so they hold on a loaded 2-core machine.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from helpers.workers import (
    FIXED,
    SLOW,
    assert_close_summaries,
    assert_first_tokens_match_truth,
    bench_spec,
    shard_tasks,
)

from tokrate.inputs.targets import Target
from tokrate.load.backends.inprocess import InProcessBackend
from tokrate.load.backends.processes import ProcessBackend
from tokrate.load.backends.selection import open_backend
from tokrate.load.run import run_benchmark
from tokrate.load.worker.events import RequestFinished, RequestStarted, WorkerDone, WorkerWarning
from tokrate.load.worker.stopping import Stop
from tokrate.runfolder.jsondoc import to_json
from tokrate.runfolder.loaded_run import load_run
from tokrate.runfolder.records_frame import frame_to_records
from tokrate.spec.types import EndpointSpec, LoadSpec, ModelSpec


@pytest.fixture(scope="module")
def procs() -> Iterator[ProcessBackend]:
    """Two worker processes shared by the backend-level tests (spawn costs ~1 s)."""
    backend = ProcessBackend(2)
    backend.start()
    yield backend
    backend.close()


# --- through run_benchmark (what `tokrate run --workers 2` does) ---------------------


def test_two_workers_conserve_counts_and_agree_with_one_process(
    start_sim: Callable[..., str], tmp_path: Path
) -> None:
    log = tmp_path / "truth.jsonl"
    url = start_sim(tiers=(FIXED,), time_scale=1.0, truth_log=str(log))
    single = run_benchmark(bench_spec(url, tmp_path, "one", workers=1))
    double = run_benchmark(bench_spec(url, tmp_path, "two", workers=2))
    assert single.exit_code == double.exit_code == 0

    run = load_run(double.run_dir)
    assert to_json(run.info)["backend"] == "processes" and to_json(run.info)["workers"] == 2
    assert to_json(run.info)["counts"] == {"scheduled": 16, "ok": 16, "error": 0, "cancelled": 0}
    recs = frame_to_records(run.records)
    assert sorted(r.request_index for r in recs) == list(range(16))  # disjoint, complete
    by_worker = {w: sum(r.worker == w for r in recs) for w in ("w0", "w1")}
    assert by_worker == {"w0": 8, "w1": 8}, by_worker  # concurrency 4 -> 2 + 2 streams
    assert all(r.node_id for r in recs)
    (node,) = run.info.nodes  # this machine, the driver's own clock: nothing measured
    assert node.node_id == recs[0].node_id and node.workers == ("w0", "w1")
    assert (node.clock_offset_s, node.started_at_shift_s, node.clock_round_trips) == (0, 0, 0)
    assert {r.concurrency for r in recs} == {4}  # the level, though each worker ran 2

    # Each worker process measured with the host's monotonic clock: each first token
    # it stamped is the simulator's own write of the chunks it came with.
    assert_first_tokens_match_truth(recs, log)
    assert_first_tokens_match_truth(frame_to_records(load_run(single.run_dir).records), log)

    assert single.summary is not None and double.summary is not None
    assert_close_summaries(single.summary, double.summary, what="--workers 2")


def test_open_loop_rates_split_over_workers_keep_the_schedule(
    start_sim: Callable[..., str], tmp_path: Path
) -> None:
    url = start_sim(tiers=(FIXED,), time_scale=1.0)
    base = bench_spec(url, tmp_path, "rate", workers=2, requests=12)
    spec = dataclasses.replace(
        base,
        load=LoadSpec(mode="open", rates=(40.0,), arrival="constant", requests=12, workers=2),
    )
    result = run_benchmark(spec)
    run = load_run(result.run_dir)
    assert to_json(run.info)["counts"] == {"scheduled": 12, "ok": 12, "error": 0, "cancelled": 0}
    recs = sorted(run.records.to_dicts(), key=lambda r: r["request_index"])
    # Constant arrivals at 40/s dealt round-robin: request k is due at k/40 s on
    # worker k mod 2, each worker on its own clock from the (common) scenario start.
    assert [r["worker"] for r in recs] == ["w0", "w1"] * 6
    for k, r in enumerate(recs):
        assert r["scheduled_s"] == pytest.approx(k / 40.0)
        # Records carry the scenario's level, not the worker's share, so they group
        # with a one-process run of the same level.
        assert r["rate_rps"] == 40.0
        assert r["send_delay_s"] >= 0.0
    # Sent on schedule: the typical request leaves within two intervals of its due time.
    # One preempted worker on a loaded machine may send late (80 ms was seen beside two
    # CPU-bound processes); that is lateness the record keeps, not a lost schedule.
    delays = sorted(r["send_delay_s"] for r in recs)
    assert delays[len(delays) // 2] < 0.05, delays


def test_open_backend_picks_the_backend_the_spec_asks_for(tmp_path: Path) -> None:
    one = open_backend(bench_spec("http://127.0.0.1:9/v1", tmp_path, "x", workers=1))
    assert isinstance(one, InProcessBackend) and one.workers == 1 and one.kind == "inprocess"
    two = open_backend(bench_spec("http://127.0.0.1:9/v1", tmp_path, "x", workers=2))
    try:
        assert isinstance(two, ProcessBackend) and two.workers == 2
        assert two.kind == "processes"
        assert len(set(two.pids)) == 2  # started (and ready) before open_backend returned
    finally:
        two.close()
    one.close()


# --- backend level: streaming, stop, a killed worker --------------------------------


def test_records_stream_back_while_the_scenario_runs(
    procs: ProcessBackend, start_sim: Callable[..., str], tmp_path: Path
) -> None:
    url = start_sim(tiers=(SLOW,), time_scale=1.0)
    spec = bench_spec(url, tmp_path, "s", model="slow-7b", concurrency=2, requests=8, max_tokens=4)
    tasks = shard_tasks(spec, url, "slow-7b", 2)
    events: list[Any] = []
    first_record_at: dict[str, int] = {}
    done_at: dict[str, int] = {}

    def on_event(ev: Any) -> None:
        events.append(ev)
        if isinstance(ev, RequestFinished):
            first_record_at.setdefault(ev.record.worker, len(events))
        if isinstance(ev, WorkerDone):
            done_at[ev.worker_id] = len(events)

    procs.run_scenario(tasks, on_event, Stop())
    # Each worker runs 4 sequential ~150 ms requests; its first record reached the
    # driver long before its last events did: records stream, they are not batched
    # up to the end.
    for w in ("w0", "w1"):
        assert first_record_at[w] < done_at[w] - 3, (w, first_record_at, done_at)
    finished = [e.record for e in events if isinstance(e, RequestFinished)]
    assert len(finished) == 8 and {r.status for r in finished} == {"ok"}


def test_a_killed_worker_becomes_worker_lost_and_the_rest_go_on(
    procs: ProcessBackend, start_sim: Callable[..., str], tmp_path: Path
) -> None:
    url = start_sim(tiers=(SLOW,), time_scale=1.0)
    spec = bench_spec(url, tmp_path, "k", model="slow-7b", concurrency=4, requests=24, max_tokens=6)
    tasks = shard_tasks(spec, url, "slow-7b", 2)
    events: list[Any] = []
    w1_done: list[int] = []
    killed: list[int] = []

    def on_event(ev: Any) -> None:
        events.append(ev)
        if isinstance(ev, RequestFinished) and ev.record.worker == "w1":
            w1_done.append(ev.record.request_index)
        # Kill w1 just after it started a request (after one of its records arrived):
        # that request is then certainly in flight from the driver's point of view.
        if isinstance(ev, RequestStarted) and ev.worker_id == "w1" and w1_done and not killed:
            pid = procs.pids[1]
            killed.append(pid)
            os.kill(pid, signal.SIGKILL)

    procs.run_scenario(tasks, on_event, Stop())
    assert killed
    records = [e.record for e in events if isinstance(e, RequestFinished)]
    w0 = [r for r in records if r.worker == "w0"]
    w1 = [r for r in records if r.worker == "w1"]
    assert len(w0) == 12 and all(r.status == "ok" for r in w0)  # the other worker went on
    lost = [r for r in w1 if r.error_class == "worker_lost"]
    ok_w1 = [r for r in w1 if r.status == "ok"]
    assert ok_w1, "records delivered before the kill are kept"
    assert lost and all(r.status == "error" and r.worker == "w1" for r in lost)
    # Every RequestStarted of w1 ends in exactly one record: nothing vanishes.
    started = {
        e.request_index for e in events if isinstance(e, RequestStarted) and e.worker_id == "w1"
    }
    assert {r.request_index for r in w1} == started
    assert len(w1) == len(started) and len(set(r.request_index for r in records)) == len(records)
    # The warning sizes the loss against the whole scenario's 24 planned requests.
    # (Other warnings, e.g. event-loop lag on a loaded machine, may come too.)
    (warning,) = [
        e for e in events if isinstance(e, WorkerWarning) and " lost in scenario " in e.message
    ]
    n_unsent = 12 - len(w1)
    n_lost = n_unsent + len(lost)
    assert warning.worker_id == "w1"
    assert f"{len(lost)} in-flight requests recorded as worker_lost" in warning.message
    assert f"{n_unsent} planned requests were never sent" in warning.message
    assert f"{n_lost} of 24 planned requests" in warning.message
    assert f"{100 * n_lost / 24:.1f}%" in warning.message
    # The dead worker is replaced for the next scenario.
    again: list[Any] = []
    procs.run_scenario(tasks, again.append, Stop())
    assert sum(isinstance(e, RequestFinished) for e in again) == 24
    assert killed[0] not in procs.pids


def test_stop_cancels_in_flight_requests_in_every_worker(
    procs: ProcessBackend, start_sim: Callable[..., str], tmp_path: Path
) -> None:
    url = start_sim(tiers=(SLOW,), time_scale=1.0)
    spec = bench_spec(
        url, tmp_path, "c", model="slow-7b", concurrency=2, requests=200, max_tokens=200
    )
    tasks = [dataclasses.replace(t, grace_s=0.2) for t in shard_tasks(spec, url, "slow-7b", 2)]
    stop = Stop()
    events: list[Any] = []

    def on_event(ev: Any) -> None:
        events.append(ev)
        started = sum(isinstance(e, RequestStarted) for e in events)
        if started == 2:
            stop.set()  # both streams in flight; each answer takes ~5 s

    procs.run_scenario(tasks, on_event, stop)
    records = [e.record for e in events if isinstance(e, RequestFinished)]
    assert {r.worker for r in records} == {"w0", "w1"}
    assert all(r.status == "cancelled" for r in records)
    assert {e.worker_id for e in events if isinstance(e, WorkerDone)} == {"w0", "w1"}


def test_ray_without_ray_installed_says_how_to_install(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import sys

    from tokrate.cli import main
    from tokrate.errors import UsageError

    monkeypatch.setitem(sys.modules, "ray", None)  # makes `import ray` raise ImportError
    with pytest.raises(UsageError, match=r"pip install 'tokrate\[ray\]'"):
        open_backend(bench_spec("http://127.0.0.1:9/v1", tmp_path, "x", ray="auto"))
    code = main(["run", "--ray", "auto", "--output-dir", str(tmp_path), "--quiet", "--no-report"])
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1 and "pip install 'tokrate[ray]'" in err, err


def test_a_killed_worker_during_run_benchmark_keeps_every_record_on_disk(
    start_sim: Callable[..., str], tmp_path: Path
) -> None:
    """The same loss through the whole pipeline: records.jsonl, run.json and the
    summary account for it, and every record written before the kill is still there."""
    import multiprocessing
    import time

    url = start_sim(tiers=(SLOW,), time_scale=1.0)
    spec = bench_spec(url, tmp_path, "kill", model="slow-7b", workers=2, requests=24, max_tokens=6)
    jsonl = tmp_path / "kill" / "records.jsonl"
    before_kill: list[dict[str, Any]] = []
    # Children that exist already (another fixture's workers) are not this run's.
    others = {p.pid for p in multiprocessing.active_children()}

    def killer() -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            lines = jsonl.read_bytes().splitlines() if jsonl.exists() else []
            rows = [orjson.loads(x) for x in lines[:-1]]  # the last line may be torn
            if any(r["worker"] == "w1" for r in rows):
                for p in multiprocessing.active_children():
                    if p.name == "tokrate-worker-1" and p.pid and p.pid not in others:
                        before_kill.extend(rows)
                        os.kill(p.pid, signal.SIGKILL)
                        return
            time.sleep(0.01)

    th = threading.Thread(target=killer, daemon=True)
    th.start()
    result = run_benchmark(spec)
    th.join(timeout=5)
    assert before_kill, "the worker was never killed"
    run = load_run(result.run_dir)
    rows = run.records.to_dicts()
    keys = {(r["request_index"], r["attempt"]) for r in rows}
    assert {(r["request_index"], r["attempt"]) for r in before_kill} <= keys  # nothing lost
    lost = [r for r in rows if r["error_class"] == "worker_lost"]
    assert lost and all(r["worker"] == "w1" for r in lost)
    assert {r["concurrency"] for r in rows} == {4}  # lost records group with the level
    counts = to_json(run.info)["counts"]
    assert counts["scheduled"] == len(rows) == counts["ok"] + counts["error"]
    assert counts["error"] == len(lost)
    assert sum(r["worker"] == "w0" and r["status"] == "ok" for r in rows) == 12
    assert any(" lost in scenario c=4 " in w for w in to_json(run.info)["warnings"])
    (group,) = to_json(run.summary)["groups"]  # type: ignore[index]
    assert group["errors_by_class"] == {"worker_lost": len(lost)}


def test_a_worker_exception_is_re_raised_in_the_driver(
    procs: ProcessBackend, sim_url: str, tmp_path: Path
) -> None:
    """A deliberate error inside the workers (here a reserved extra_body key) is not a
    lost worker: it reaches the driver as the same one-line ConfigError."""
    from tokrate.errors import ConfigError

    spec = bench_spec(sim_url, tmp_path, "e", requests=4)
    bad = Target(
        EndpointSpec("sim", sim_url), ModelSpec("sim", "x", extra_body=(("stream", False),))
    )
    tasks = [dataclasses.replace(t, targets=(bad,)) for t in shard_tasks(spec, sim_url, "x", 2)]
    events: list[Any] = []
    with pytest.raises(ConfigError, match="extra_body may not set 'stream'"):
        procs.run_scenario(tasks, events.append, Stop())
    assert not any(isinstance(e, WorkerWarning) and "lost" in e.message for e in events)
    assert len(set(procs.pids)) == 2  # both workers survive for the next scenario
