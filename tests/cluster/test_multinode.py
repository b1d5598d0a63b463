"""``tokrate run --ray ADDRESS`` on a real multi-node Ray cluster: a head and two
worker nodes, each in its own network namespace with its own address (conftest.py,
helpers.netns_cluster), the simulator serving from node n1 at 10.231.0.11, the driver
on the head.

Every timing assertion compares with the simulator's truth log or with a bound the
measurement itself gives: all namespaces share the kernel's CLOCK_MONOTONIC (so a
worker's t0_ns and the simulator's write stamps are one clock) and its wall clock
(so every node's true offset is known: 0, or the skew injected into n2).
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from helpers.netns_cluster import ADDRESS, HEAD_ADDRESS, N2_CLOCK_SKEW_S, NetnsCluster, wait_for
from helpers.workers import (
    FIXED,
    SLOW,
    assert_close_summaries,
    assert_first_tokens_match_truth,
    schema,
)

from tokrate.runfolder.jsondoc import to_json
from tokrate.runfolder.loaded_run import LoadedRun, load_run
from tokrate.runfolder.records import RequestRecord, record_from_json
from tokrate.runfolder.records_frame import frame_to_records
from tokrate.sim.model import Tier

pytestmark = [
    pytest.mark.cluster,
    pytest.mark.ray,
    pytest.mark.timeout(600),
]


def tiers_toml(*tiers: Tier) -> str:
    """A tiers file for ``tokrate sim --tiers`` with the fixed-timing tiers."""
    return "".join(
        f'[[tier]]\nname = "{t.name}"\nparams_b = {t.params_b}\n'
        f"fixed_ttft_ms = {t.fixed_ttft_ms}\nfixed_itl_ms = {t.fixed_itl_ms}\n\n"
        for t in tiers
    )


@pytest.fixture(scope="module")
def sim(
    cluster: NetnsCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, Path]]:
    """The simulator on n1 (base URL, truth log)."""
    folder = tmp_path_factory.mktemp("sim")
    tiers = folder / "tiers.toml"
    # FIXED: ~84 ms per request of 12 tokens; SLOW: ~175 ms per request of 6 tokens,
    # so a node loss lands mid-request and mid-scenario.
    tiers.write_text(tiers_toml(FIXED, SLOW), encoding="utf-8")
    truth = folder / "truth.jsonl"
    with cluster.simulator("n1", tiers, truth) as url:
        assert url.startswith(f"http://{ADDRESS['n1']}:")
        yield url, truth


def bench_toml(
    folder: Path, url: str, model: str, *, concurrency: list[int], requests: int, max_tokens: int
) -> Path:
    path = folder / "bench.toml"
    path.write_text(
        f"""\
[[endpoint]]
name = "sim"
base_url = "{url}"

[[model]]
endpoint = "sim"
name = "{model}"
params_b = 7.0

[load]
concurrency = {concurrency}
requests = {requests}

[prompts]
max_tokens = {max_tokens}

[prompts.synthetic]
count = 8
input_tokens = 16
output_tokens = {max_tokens}

[distributed]
workers = 2
num_cpus_per_worker = 0.5
""",
        encoding="utf-8",
    )
    return path


def run_args(config: Path, out: Path, run_id: str, *ray: str) -> list[str]:
    return [
        "run",
        "-c",
        str(config),
        "--output-dir",
        str(out),
        "--run-id",
        run_id,
        *ray,
        "--quiet",
        "--no-report",
    ]


def finish(proc: Any, timeout_s: float = 240.0) -> None:
    out, err = proc.communicate(timeout=timeout_s)
    assert proc.returncode == 0, f"exit {proc.returncode}\n{out}\n{err}"


def records_of(run: LoadedRun) -> list[RequestRecord]:
    return frame_to_records(run.records)


def comparable(record: RequestRecord) -> dict[str, Any]:
    """A record as a dict, ``extra`` read the same from records.jsonl and parquet
    (an empty mapping or null)."""
    row = to_json(record)
    row["extra"] = row["extra"] or {}
    return row


def truth_rows(log: Path) -> dict[str, dict[str, Any]]:
    return {row["id"]: row for row in map(orjson.loads, log.read_bytes().splitlines()) if row}


def test_a_run_over_two_worker_nodes_is_a_local_run_spread_out(
    cluster: NetnsCluster, sim: tuple[str, Path], tmp_path: Path
) -> None:
    """Workers on both worker nodes, counts conserved, the run folder shaped like a
    one-process run's, latencies as true as a local run's, and n2's clock (2.5 s
    ahead) measured, stored, warned about and taken out of every started_at."""
    url, log = sim
    config = bench_toml(tmp_path, url, "fixed-7b", concurrency=[4], requests=24, max_tokens=12)
    local = cluster.tokrate(run_args(config, tmp_path, "local"))
    finish(local)
    on_ray = cluster.tokrate(run_args(config, tmp_path, "ray", "--ray", HEAD_ADDRESS))
    finish(on_ray)
    one, spread = load_run(tmp_path / "local"), load_run(tmp_path / "ray")
    info = spread.info

    # Placement: one worker per worker node (the head offers no CPUs), named by
    # their Ray node ids, which run.json lists with each node's address.
    assert (info.backend, info.workers) == ("ray", 2)
    recs = records_of(spread)
    by_address = {n.address: n for n in info.nodes}
    assert set(by_address) == {ADDRESS["n1"], ADDRESS["n2"]}
    n1, n2 = by_address[ADDRESS["n1"]], by_address[ADDRESS["n2"]]
    assert {r.node_id for r in recs} == {n1.node_id, n2.node_id}
    assert sorted((*n1.workers, *n2.workers)) == ["w0", "w1"]
    for node in (n1, n2):
        assert {r.worker for r in recs if r.node_id == node.node_id} == set(node.workers)

    # Counts conserved: 24 planned, 24 recorded once each, all ok.
    assert info.counts is not None and to_json(info.counts) == {
        "scheduled": 24,
        "ok": 24,
        "error": 0,
        "cancelled": 0,
    }
    assert sorted(r.request_index for r in recs) == list(range(24))

    # The same run folder as one process writes: files, run.json, summary.json and
    # record columns (values differ; the structure does not).
    assert sorted(p.name for p in spread.path.iterdir()) == sorted(
        p.name for p in one.path.iterdir()
    )
    docs = [orjson.loads((run.path / "run.json").read_bytes()) for run in (one, spread)]
    for doc in docs:
        doc.pop("warnings")  # the clock warning below is the one expected difference
    assert schema(docs[0]) == schema(docs[1])
    assert one.summary is not None and spread.summary is not None
    assert one.records.schema == spread.records.schema

    # As true to the simulator as a local run, and the same numbers within noise.
    assert_first_tokens_match_truth(records_of(one), log)
    assert_first_tokens_match_truth(recs, log)
    assert_close_summaries(one.summary, spread.summary, what="--ray over two nodes")
    g1, g2 = to_json(one.summary)["groups"][0], to_json(spread.summary)["groups"][0]

    # Clocks. n1 shares the driver's clock: its offset is within its own error bound
    # and nothing was shifted. n2 reads 2.5 s ahead: the estimate holds the truth
    # within its bound, and that offset was taken out of its records' started_at.
    assert n1.clock_round_trips == n2.clock_round_trips == 8
    assert n1.clock_offset_s is not None and n1.clock_uncertainty_s is not None
    assert abs(n1.clock_offset_s) <= n1.clock_uncertainty_s + 1e-4
    assert n1.started_at_shift_s == 0.0
    assert n2.clock_offset_s is not None and n2.clock_uncertainty_s is not None
    assert abs(n2.clock_offset_s - N2_CLOCK_SKEW_S) <= n2.clock_uncertainty_s + 1e-4
    assert n2.started_at_shift_s == n2.clock_offset_s
    # started_at and t0_ns are read one line apart in the sender: on the driver's wall
    # clock, started_at - t0 is the same constant (wall minus monotonic, this kernel's)
    # for every record of every node, up to n2's measured uncertainty and a thread
    # switch (the GIL's 5 ms interval) between the two readings.
    wall_minus_mono = time.time() - time.perf_counter()
    for r in recs:
        node = n2 if r.node_id == n2.node_id else n1
        drift = r.started_at - r.t0_ns / 1e9 - wall_minus_mono
        assert abs(drift) <= node.clock_uncertainty_s + 0.010, (r.worker, drift)  # type: ignore[operator]
    # The aggregate window spans the same few seconds as the local run's (unshifted,
    # n2's records would stretch it by 2.5 s).
    assert g2["window_s"] <= g1["window_s"] + 1.0, (g1["window_s"], g2["window_s"])

    (warning,) = [w for w in info.warnings if w.startswith("node ")]
    assert warning.startswith(
        f"node {ADDRESS['n2']} ({n2.node_id[:12]}) (workers {n2.workers[0]}):"
    )
    assert re.search(r"reads 2,5\d\d ms ahead of the driver's \(\+/-[\d.]+ ms, best of 8", warning)
    assert "moved onto the driver's clock" in warning


def test_a_worker_node_lost_mid_run(
    cluster: NetnsCluster, sim: tuple[str, Path], tmp_path: Path
) -> None:
    """n2's link is cut while its worker is mid-scenario: the node vanishes from the
    network as a crashed machine or a partition makes it vanish, and Ray declares it
    dead a few seconds later. The run goes on: the documented worker_lost records and
    warning, the other worker finishes the scenario, a replacement worker runs the
    next scenario on the surviving node, and nothing recorded before the loss is lost.
    """
    url, log = sim
    # Scenario c=4: 32 requests of ~175 ms per stream, ~5.6 s; then c=8, ~2.8 s.
    config = bench_toml(tmp_path, url, "slow-7b", concurrency=[4, 8], requests=128, max_tokens=6)
    run_dir = tmp_path / "loss"
    driver = cluster.tokrate(run_args(config, tmp_path, "loss", "--ray", HEAD_ADDRESS))
    try:
        wait_for(lambda: (run_dir / "run.json").is_file(), 120, "the run to start")
        started = load_run(run_dir).info
        (n2,) = [n for n in started.nodes if n.address == ADDRESS["n2"]]
        (lost_worker,) = n2.workers

        def n2_lines() -> list[bytes]:
            lines = (run_dir / "records.jsonl").read_bytes().splitlines()
            return [line for line in lines if orjson.loads(line)["node_id"] == n2.node_id]

        # Cut once n2's worker is well into the scenario (24 of its 64 records in).
        wait_for(lambda: len(n2_lines()) >= 24, 60, "n2's worker to record 24 requests")
        before_cut = (run_dir / "records.jsonl").read_bytes().splitlines()
        cut_ns = time.perf_counter_ns()
        cluster.cut("n2")
        out, err = driver.communicate(timeout=240)
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.communicate()
    assert driver.returncode == 0, f"exit {driver.returncode}\n{out}\n{err}"
    run = load_run(run_dir)
    info = run.info
    recs = records_of(run)
    first, second = (s.name for s in info.scenarios)

    # The documented warning, on the terminal and in run.json, its numbers those of
    # the records: in-flight requests became worker_lost records, the rest of the
    # lost worker's share was never sent.
    (warning,) = [w for w in info.warnings if " lost in scenario " in w]
    assert warning in err
    m = re.fullmatch(
        rf"worker {lost_worker} lost in scenario {re.escape(first)} \(Ray actor on node"
        rf" {re.escape(n2.label)} died \((\w+): .*\)\): (\d+) in-flight requests recorded as"
        r" worker_lost, (\d+) planned requests were never sent \((\d+) of 128 planned"
        r" requests, ([\d.]+)% of the scenario's load, lost\); the other workers went on\."
        r" Re-run the scenario for full load\.",
        warning,
    )
    assert m is not None, warning
    in_flight, unsent, lost = int(m[2]), int(m[3]), int(m[4])
    assert lost == in_flight + unsent and m[5] == f"{100 * lost / 128:.1f}"
    scenario1 = [r for r in recs if r.scenario == first]
    worker_lost = [r for r in scenario1 if r.error_class == "worker_lost"]
    assert len(worker_lost) == in_flight >= 1
    assert all(r.status == "error" and r.worker == lost_worker for r in worker_lost)
    assert all(r.node_id == n2.node_id for r in worker_lost)
    # Every planned request of the scenario is either recorded once or never sent.
    assert len(scenario1) == 128 - unsent
    assert len({r.request_index for r in scenario1}) == len(scenario1)
    # The other worker finished its whole share.
    other = [r for r in scenario1 if r.worker != lost_worker]
    assert len(other) == 64 and all(r.status == "ok" for r in other)

    # Counts conserved over the run: each request once, by its outcome.
    assert info.counts is not None
    counts = to_json(info.counts)
    assert counts["scheduled"] == len(recs) == counts["ok"] + counts["error"] + counts["cancelled"]
    assert counts["error"] == in_flight
    assert run.summary is not None
    (group1,) = [g for g in to_json(run.summary)["groups"] if g["scenario"] == first]
    assert group1["errors_by_class"] == {"worker_lost": in_flight}

    # The replacement ran the next scenario on the surviving node, in full.
    by_address = {n.address: n for n in info.nodes}
    n1 = by_address[ADDRESS["n1"]]
    scenario2 = [r for r in recs if r.scenario == second]
    assert len(scenario2) == 128 and all(r.status == "ok" for r in scenario2)
    assert {r.node_id for r in scenario2} == {n1.node_id}
    assert {r.worker for r in scenario2} == {"w0", "w1"}
    assert sorted(n1.workers) == ["w0", "w1"] and by_address[ADDRESS["n2"]].workers == (
        lost_worker,
    )

    # Nothing lost that had finished: every record on disk at the cut is in the
    # final run, unchanged; and every answer the simulator completed a second before
    # the cut (five poll intervals: records leave an actor within one) is recorded ok.
    final = {(r.scenario, r.request_index): comparable(r) for r in recs}
    for line in before_cut:
        row = comparable(record_from_json(orjson.loads(line)))
        assert final[(row["scenario"], row["request_index"])] == row
    ok_ids = {r.response_id for r in recs if r.status == "ok"}
    done_before = [
        rid
        for rid, row in truth_rows(log).items()
        if row["model"] == "slow-7b"
        and row["done_ns"] is not None
        and row["done_ns"] < cut_ns - 1_000_000_000
    ]
    assert len(done_before) >= 10
    assert set(done_before) <= ok_ids
