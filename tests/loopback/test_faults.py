"""Every fault the simulator injects is survived, classified and counted.

One run over two tiers and two load levels against a simulator that injects every
fault kind; the simulator's truth log says which request got which fault, so the
record classes are checked against it, and counts are conserved per target and
scenario: scheduled = ok + error + cancelled.
"""

from __future__ import annotations

import dataclasses
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import orjson
import polars as pl
from helpers.specs import sim_spec

from tokrate.load.run import run_benchmark
from tokrate.runfolder.jsondoc import to_json
from tokrate.runfolder.loaded_run import load_run
from tokrate.spec.types import ClientSpec, PromptsSpec, RetrySpec, SyntheticSpec, TimeoutsSpec

FAULTS = (
    "http_500=0.08,http_429=0.08:retry_after=1,http_503=0.08,html_200=0.08,"
    "slow_first_byte=0.08:seconds=1.5,disconnect=0.08:at=0.5,stall=0.08:seconds=1.5:at=0.5,"
    "malformed=0.08:at=0.5"
)
#: What each injected fault must become on the record (timeouts are 0.5 s < 1.5 s).
EXPECTED = {
    "http_500": "http_5xx",
    "http_429": "http_429",
    "http_503": "http_5xx",
    "html_200": "protocol",
    "slow_first_byte": "timeout",
    "disconnect": "truncated",
    "stall": "timeout",
    "malformed": "protocol",
}


def test_every_fault_recorded_and_counts_conserved(
    start_sim: Callable[..., str], tmp_path: Path
) -> None:
    log = tmp_path / "truth.jsonl"
    url = start_sim(faults=FAULTS, truth_log=str(log), seed=3)
    spec = sim_spec(
        url,
        tmp_path,
        models=("sim-1b", "sim-7b"),
        run_id="faults",
        prompts=PromptsSpec(synthetic=SyntheticSpec(count=8, input_tokens=32), max_tokens=16),
        client=ClientSpec(timeouts=TimeoutsSpec(first_byte_s=0.5, idle_s=0.5, total_s=10.0)),
        concurrency=(4, 8),
        requests=30,
    )
    result = run_benchmark(spec)
    assert result.exit_code == 0
    run = load_run(result.run_dir)
    recs = run.records
    assert recs.height == 2 * 2 * 30
    # A stalled stream is logged when the simulator finishes it, after the client's
    # timeout gave up on it: wait for every request's line.
    deadline = time.monotonic() + 10.0
    while log.read_bytes().count(b"\n") < recs.height and time.monotonic() < deadline:
        time.sleep(0.05)
    truth = [orjson.loads(line) for line in log.read_bytes().splitlines() if line]
    assert len(truth) == recs.height
    injected = Counter(t["fault"] for t in truth if t.get("fault"))
    assert set(injected) == set(EXPECTED), injected  # every kind fired at least once
    expected_classes: Counter[str] = Counter()
    for kind, n in injected.items():
        expected_classes[EXPECTED[kind]] += n
    got = Counter(c for c in recs["error_class"].to_list() if c is not None)
    assert got == expected_classes
    assert recs.filter(pl.col("status") == "ok").height == recs.height - sum(got.values())
    # Partial timings: a stream cut or stalled half-way had its first token.
    for cls in ("truncated",):
        part = recs.filter(pl.col("error_class") == cls)
        assert part["ttft_s"].null_count() == 0 and (part["content_chunks"] > 0).all()
    assert (
        recs.filter(pl.col("error_class") == "http_429")["http_status"].to_list()
        == [429] * got["http_429"]
    )
    # Conservation per target and scenario, in run.json, records and summary.json.
    counts = to_json(run.info)["counts"]
    assert counts["scheduled"] == counts["ok"] + counts["error"] + counts["cancelled"] == 120
    assert run.summary is not None
    groups = to_json(run.summary)["groups"]
    assert len(groups) == 4
    for g in groups:
        c = g["counts"]
        failed = c["error"] + c["not_sent"] + c["cancelled"]
        assert c["scheduled"] == c["ok"] + failed == 30, g["model"]
        assert sum(g["errors_by_class"].values()) == c["error"] + c["not_sent"]


def test_retry_policy_records_each_attempt_and_conserves_counts(
    start_sim: Callable[..., str], tmp_path: Path
) -> None:
    url = start_sim(faults="http_500=0.3,http_429=0.2:retry_after=0", seed=5)
    spec = sim_spec(
        url,
        tmp_path,
        run_id="retry",
        prompts=PromptsSpec(synthetic=SyntheticSpec(count=4, input_tokens=16), max_tokens=4),
        client=ClientSpec(
            retry=RetrySpec(max_attempts=3, on=("http_5xx", "http_429"), backoff_s=0.01)
        ),
        concurrency=(4,),
        requests=40,
    )
    run = load_run(run_benchmark(spec).run_dir)
    recs = run.records
    retried = recs.filter(pl.col("attempt") > 1)
    assert retried.height > 0  # ~half the first attempts failed
    # Every attempt n > 1 follows a failed attempt n - 1 of the same request.
    keys = set(zip(recs["request_index"], recs["attempt"], strict=True))
    assert all(
        (i, a - 1) in keys
        for i, a in zip(retried["request_index"], retried["attempt"], strict=True)
    )
    failed_before = recs.filter(pl.col("attempt") < 3).filter(pl.col("status") == "error")
    assert failed_before.height >= retried.height
    counts = to_json(run.info)["counts"]
    assert counts["scheduled"] == 40 == counts["ok"] + counts["error"] + counts["cancelled"]
    last = recs.sort("attempt").group_by("request_index").last()
    assert counts["ok"] == last.filter(pl.col("status") == "ok").height


def test_retry_after_999999_cannot_hold_the_run(
    start_sim: Callable[..., str], tmp_path: Path
) -> None:
    """Every answer is a 429 asking for 11.6 days. With retries on, a scenario bounded by
    its duration (2 s) ends with it: no retry wait outlives the duration, and a capped
    wait (max_wait_s 0.5 s) lets every request make its three attempts. The bound on the
    run's length is generous (60 s, for a busy machine); the old code waited 999,999 s."""
    url = start_sim(faults="http_429=1.0:retry_after=999999", seed=7)
    retry = RetrySpec(max_attempts=3, on=("http_429",), backoff_s=0.0, max_wait_s=0.5)
    spec = sim_spec(
        url,
        tmp_path,
        run_id="wait",
        client=ClientSpec(retry=retry),
        concurrency=(2,),
        requests=None,
        duration_s=2.0,
    )
    began = time.monotonic()
    run = load_run(run_benchmark(spec).run_dir)
    assert time.monotonic() - began < 60
    recs = run.records
    assert recs.height > 0 and set(recs["error_class"]) == {"http_429"}
    assert set(recs["attempt"]) == {1, 2, 3}  # waits of 0.5 s, not 999,999 s
    capped = sim_spec(
        url,
        tmp_path,
        run_id="capped",
        client=ClientSpec(retry=dataclasses.replace(retry, max_wait_s=30.0)),
        concurrency=(1,),
        requests=None,
        duration_s=1.0,
    )
    began = time.monotonic()
    recs = load_run(run_benchmark(capped).run_dir).records
    # The 30 s cap is past the 1 s duration: one attempt each, no retry after the end.
    assert time.monotonic() - began < 30
    assert set(recs["attempt"]) == {1}
