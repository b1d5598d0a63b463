"""Send-side truth, per request, against the simulator's truth log.

Each record's t0 is when its request left (the kernel's transmit stamp of its last
byte with the fast client's kernel stamps; the moment the write returned otherwise),
and the client's own queueing before it is its ``send_queue_s``, from the moment the
request was due. The truth log says when each request reached the server
(``arrived_ns``: the kernel's receive stamp of its last byte, tokrate.sim.arrival) and
when the server wrote each token (``content_write_ns``), on the same CLOCK_MONOTONIC.

No wall-clock band: causality gives the bounds (a request cannot arrive before it
left; a token cannot be read before it was written), and what is left of TTFT minus
the server's own TTFT, net of the CPU waits the kernel counted for the client and the
server inside that request (helpers.cpu_waits), is the two kernel paths between them
(tens of microseconds on loopback), idle or busy.

Each run takes a few seconds (5-6 s on the busy 2-core machine): a simulator in its own
process at time_scale 1 (the tests judge time against its truth log, so its physics
is not scaled) and a whole `run_benchmark` with its finishing child.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from helpers.cpu_waits import CpuWaits
from helpers.specs import sim_spec, synthetic_prompts
from helpers.stamps_vs_truth import net_of_waits

from tokrate.load.run import run_benchmark
from tokrate.runfolder.loaded_run import read_records_jsonl
from tokrate.runfolder.records import RequestRecord
from tokrate.runfolder.records_frame import frame_to_records
from tokrate.sim.model import Tier
from tokrate.sim.server import SimConfig, simulator_process
from tokrate.spec.types import ClientSpec, ModelSpec

FIXED = Tier(
    "fixed",
    7.0,
    7.0,
    fixed_ttft_ms=60.0,
    fixed_itl_ms=10.0,
    output_tokens_min=8,
    output_tokens_max=8,
)
#: TTFT minus the server's own TTFT, net of CPU waits, at most: the two loopback
#: kernel paths are tens of microseconds; the rest is room for the simulator's own
#: stamp-to-write path (it stamps a write just before handing it to its transport).
BOUND_NS = 2_000_000


def _truth(path: Path) -> dict[str, dict[str, Any]]:
    rows = (orjson.loads(line) for line in path.read_bytes().splitlines() if line)
    return {row["request"]["headers"]["x-request-id"]: row for row in rows}


def _run(tmp_path: Path, client: ClientSpec, **load: Any) -> tuple[list[RequestRecord], Any]:
    """A run of the fixed tier on a simulator in its own process (truth log kept),
    with the CPU waits of this process and its children sampled throughout."""
    truth = tmp_path / "truth.jsonl"
    config = SimConfig(tiers=(FIXED,), time_scale=1.0, truth_log=str(truth))
    with simulator_process(config) as url, CpuWaits() as waits:
        spec = sim_spec(
            url,
            tmp_path,
            models=[ModelSpec("sim", "fixed", params_b=7.0)],
            prompts=synthetic_prompts(8),
            client=client,
            **load,
        )
        result = run_benchmark(spec, quiet=True)
    frame = read_records_jsonl(Path(result.run_dir) / "records.jsonl")
    records = frame_to_records(frame)
    return records, (_truth(truth), waits)


@pytest.fixture(scope="module")
def closed_loop(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, ...]]:
    """32 streams, 3 requests each, fast client with kernel stamps (the default)."""
    tmp = tmp_path_factory.mktemp("closed")
    records, (truth, waits) = _run(tmp, ClientSpec(), concurrency=(32,), requests=96)
    yield records, truth, waits


def test_t0_is_the_kernels_transmit_stamp_and_precedes_the_servers_receipt(
    closed_loop: tuple[Any, ...],
) -> None:
    records, truth, _waits = closed_loop
    assert len(records) == 96 and all(r.status == "ok" for r in records)
    for r in records:
        assert r.t0_source == "kernel", r
        row = truth[r.request_id]
        # Left before it arrived, and it arrived before the app had it.
        assert r.t0_ns <= row["arrived_ns"] <= row["received_ns"], (r.request_id, row)


def _errors_net_of_waits(closed_loop: tuple[Any, ...]) -> list[float]:
    """Per request: TTFT - (first content write - arrival), asserted never negative,
    then net of the CPU waits inside the request (the server's intake queue, tens of
    ms for a burst of requests, is the server's: not in it)."""
    records, truth, waits = closed_loop
    errors = []
    for r in records:
        row = truth[r.request_id]
        assert r.ttft_s is not None
        first_ns = r.t0_ns + round(r.ttft_s * 1e9)
        # A kernel stamp is the arrival of the newest chunk its read took: a first token
        # read together with the second stands for the second's write.
        offsets = r.chunk_offsets_s
        stood = next(
            i for i, off in enumerate(offsets) if i + 1 == len(offsets) or offsets[i + 1] != off
        )
        server_ttft = row["content_write_ns"][stood] - row["arrived_ns"]
        error = first_ns - r.t0_ns - server_ttft
        assert error >= -1_000, (r.request_id, error)  # rounding of ttft_s to ns
        errors.append(net_of_waits(error, waits, r.t0_ns, first_ns))
    return errors


def test_ttft_minus_the_servers_own_is_the_kernel_paths_net_of_cpu_waits(
    closed_loop: tuple[Any, ...],
) -> None:
    """Per request the error is never negative (causality); net of the CPU waits, the
    median request's stays under a quarter of BOUND_NS."""
    errors = _errors_net_of_waits(closed_loop)
    assert statistics.median(errors) < BOUND_NS / 4, statistics.median(errors)


@pytest.mark.xfail(
    strict=False,
    reason="issue 42: in one fast-suite run on the busy machine (-n auto beside other"
    " jobs) five requests of one wave were 162.6 ms over the bound, all alike. Cause"
    " found and fixed since: a transmit stamp had no floor, so a system clock stepped"
    " back since the bridge's last sample put t0 that much before the write"
    " (test_client_kernel_stamps: a backward step never puts a send stamp before its"
    " write); kept non-strict until runs on the busy machine show no other cause",
)
def test_every_request_stays_within_the_kernel_paths_bound(
    closed_loop: tuple[Any, ...],
) -> None:
    """Net of the CPU waits inside it, every request's error stays under BOUND_NS."""
    errors = _errors_net_of_waits(closed_loop)
    assert max(errors) < BOUND_NS, sorted(errors)[-5:]


def test_send_queue_counts_from_the_moment_each_request_was_due(
    closed_loop: tuple[Any, ...],
) -> None:
    """Closed loop: every stream's first request is due when the window opens (one
    moment for all 32), each later one when its stream's previous request ended;
    ``ttft_from_due_s`` = ``send_queue_s`` + ``ttft_s``."""
    records, _truth_rows, _waits = closed_loop
    for r in records:
        assert r.send_queue_s is not None and r.send_queue_s >= 0
        assert r.ttft_from_due_s == pytest.approx(r.send_queue_s + (r.ttft_s or 0.0), abs=1e-9)
    first_wave = sorted(records, key=lambda r: r.t0_ns)[:32]
    dues = [r.t0_ns - r.send_queue_s * 1e9 for r in first_wave]  # type: ignore[operator]
    assert max(dues) - min(dues) < 2_000, dues  # one window start (float rounding)
    ends = sorted(r.t0_ns + (r.e2e_s or 0.0) * 1e9 for r in records)
    later = sorted(records, key=lambda r: r.t0_ns)[32:]
    for r in later:
        due = r.t0_ns - r.send_queue_s * 1e9  # type: ignore[operator]
        # Due when some earlier request of the run ended (its stream's previous one).
        assert any(abs(due - end) < 2_000 for end in ends), r.request_id


def test_open_loop_send_queue_is_the_send_delay(tmp_path: Path) -> None:
    """Open loop: a request is due at its schedule, so send_queue_s is send_delay_s.
    A run of its own, at time_scale 1 (module docstring: a few seconds)."""
    records, (truth, _waits) = _run(
        tmp_path, ClientSpec(), mode="open", rates=(20.0,), concurrency=(), requests=12
    )
    assert records and all(r.status == "ok" for r in records)
    for r in records:
        assert r.send_delay_s is not None
        assert r.send_queue_s == pytest.approx(r.send_delay_s, abs=1e-9)
        assert r.t0_ns <= truth[r.request_id]["arrived_ns"]


@pytest.mark.parametrize("kind", ["fast", "httpx"])
def test_without_kernel_stamps_t0_is_the_moment_the_write_returned(
    tmp_path: Path, kind: str
) -> None:
    """Kernel stamps off (fast) or a client without them (httpx): t0 is a user stamp
    taken right after the write, so the request arrived during it (on loopback the
    kernel stamps the arrival inside the sending call): before t0, after the request
    was due, and the app had it no earlier than t0 minus that write. A run of its own
    per client, at time_scale 1 (module docstring: a few seconds)."""
    client = ClientSpec(kind=kind, kernel_stamps="off")  # type: ignore[arg-type]
    records, (truth, _waits) = _run(tmp_path, client, concurrency=(4,), requests=8)
    assert len(records) == 8 and all(r.status == "ok" for r in records)
    for r in records:
        assert r.t0_source == "user"
        row = truth[r.request_id]
        due = r.t0_ns - (r.send_queue_s or 0.0) * 1e9
        assert due - 2_000 <= row["arrived_ns"] <= r.t0_ns, (r.request_id, row)
