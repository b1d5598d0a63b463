"""What the worker-backend tests share (``--workers N`` processes and Ray actors): the
fixed-timing simulator tiers, a small closed-loop run of one model, the shards of its
first scenario, the simulator's truth of every first token, and a check that two
summaries of the same load agree."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson

from helpers.specs import sim_spec, synthetic_prompts
from tokrate.load.engine import Target, WorkerSettings, WorkerTask
from tokrate.load.plan import build_plan, shard
from tokrate.sim.model import Tier
from tokrate.spec import DistributedSpec, EndpointSpec, ModelSpec, RunSpec

__all__ = [
    "FIXED",
    "SLOW",
    "assert_close_summaries",
    "bench_spec",
    "schema",
    "shard_tasks",
    "truth_ttft",
]

#: Exact timing (real time): TTFT 40 ms, ITL 4 ms, 12 tokens -> ~84 ms per request.
FIXED = Tier("fixed-7b", 7.0, 7.0, fixed_ttft_ms=40.0, fixed_itl_ms=4.0)
#: Slow enough that a worker is reliably mid-request when it is killed.
SLOW = Tier("slow-7b", 7.0, 7.0, fixed_ttft_ms=50.0, fixed_itl_ms=25.0)


def bench_spec(
    url: str,
    out: Path,
    run_id: str,
    *,
    model: str = "fixed-7b",
    workers: int = 1,
    concurrency: int = 4,
    requests: int = 16,
    max_tokens: int = 12,
    ray: str | None = None,
    report: bool = False,
) -> RunSpec:
    """A small closed-loop benchmark of one simulator model over ``workers`` workers
    (local processes, or Ray actors with ``ray``)."""
    return sim_spec(
        url,
        out,
        models=(ModelSpec("sim", model, params_b=7.0),),
        run_id=run_id,
        prompts=synthetic_prompts(max_tokens),
        distributed=DistributedSpec(ray=ray, workers=workers, num_cpus_per_worker=0.5),
        report=report,
        concurrency=(concurrency,),
        requests=requests,
        workers=workers,
    )


def shard_tasks(spec: RunSpec, url: str, model: str, n: int) -> list[WorkerTask]:
    """The WorkerTasks run_benchmark would build for scenario 0, cut into n shards."""
    from tokrate.inputs.prompts import load_prompts

    prompts = load_prompts(spec.prompts, base_dir=Path.cwd())
    target = Target(EndpointSpec("sim", url), ModelSpec("sim", model), simulated=True)
    plan = build_plan(spec, len(prompts), 1)
    return [
        WorkerTask(
            "r", f"w{i}", part.scenarios[0], WorkerSettings.from_spec(spec), (target,), prompts
        )
        for i, part in enumerate(shard(plan, n))
    ]


def truth_ttft(log: Path) -> dict[str, int]:
    """response id -> the simulator's first content write (CLOCK_MONOTONIC ns)."""
    rows = [orjson.loads(line) for line in log.read_bytes().splitlines() if line]
    return {row["id"]: row["content_write_ns"][0] for row in rows if row["content_write_ns"]}


def schema(obj: Any) -> Any:
    """The key structure of a JSON document (a summary, run.json) (values dropped, lists by their first item)."""
    if isinstance(obj, dict):
        return {k: schema(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [schema(obj[0])] if obj else []
    return None


def assert_close_summaries(one: Any, many: Any, *, what: str) -> None:
    """Same schema; per-request latencies agree within noise (both measure the same
    fixed-timing server at a load far below what one process can drive)."""
    one, many = one.to_dict(), many.to_dict()
    assert schema(one) == schema(many), f"{what}: summary schema differs from one process"
    g1, g2 = one["groups"][0], many["groups"][0]
    keys = ("endpoint", "model", "scenario", "concurrency", "rate_rps", "counts")
    assert [g1[k] for k in keys] == [g2[k] for k in keys]
    assert g1["output_tokens_total"] == g2["output_tokens_total"]
    for metric in ("ttft_s", "tpot_s", "e2e_s"):
        a, b = g1[metric]["p50"], g2[metric]["p50"]
        # 15 ms + 20 %: wide enough for a loaded shared machine, far tighter than the
        # quantities compared (TTFT 40 ms, E2E ~84 ms, TPOT 4 ms -> tolerance on TPOT
        # is dominated by the 15 ms floor, so TPOT is also checked by the truth log).
        assert abs(a - b) <= 0.015 + 0.2 * max(a, b), f"{what}: {metric} p50 {a} vs {b}"
