"""Build synthetic run folders (layout version 1) for the compare/history tests.

Records are drawn from seeded lognormal distributions, so the tests know the truth: a
``slow`` factor multiplies a target's latencies exactly.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import polars as pl

from tokrate.runfolder.jsondoc import to_json
from tokrate.runfolder.records import RequestRecord
from tokrate.runfolder.records_frame import records_to_frame
from tokrate.runfolder.summary import Group, Summary

TIERS: dict[str, tuple[float, float]] = {
    # model -> (ttft_s, tpot_s) medians
    "sim-7b": (0.030, 0.008),
    "sim-70b": (0.120, 0.045),
}


def make_records(
    run_id: str,
    *,
    models: Sequence[str] = ("sim-7b", "sim-70b"),
    scenarios: Mapping[str, int] = {"c=4": 4},
    n: int = 200,
    seed: int = 0,
    slow: Mapping[str, float] | None = None,
    error_every: Mapping[str, int] | None = None,
    prompt_prefix: str = "p",
    started_at: float = 1_700_000_000.0,
    noise: float = 0.15,
) -> list[RequestRecord]:
    rng = np.random.default_rng(seed)
    out: list[RequestRecord] = []
    index = 0
    for scenario, conc in scenarios.items():
        for model in models:
            ttft0, tpot0 = TIERS.get(model, (0.05, 0.01))
            factor = (slow or {}).get(model, 1.0)
            every = (error_every or {}).get(model, 0)
            for i in range(n):
                tokens = 32
                ttft = ttft0 * factor * float(rng.lognormal(0.0, noise))
                tpot = tpot0 * factor * float(rng.lognormal(0.0, noise / 3))
                e2e = ttft + tpot * (tokens - 1)
                failed = every > 0 and i % every == 0
                common: dict[str, Any] = {
                    "run_id": run_id,
                    "endpoint": "sim",
                    "model": model,
                    "scenario": scenario,
                    "prompt_id": f"{prompt_prefix}{i % 20}",
                    "task": "chat",
                    "request_index": index,
                    "started_at": started_at + index * 0.01,
                    "t0_ns": index * 1000,
                    "concurrency": conc,
                }
                index += 1
                if failed:
                    out.append(
                        RequestRecord(
                            **common, status="error", error_class="http_5xx", http_status=500
                        )
                    )
                    continue
                out.append(
                    RequestRecord(
                        **common,
                        status="ok",
                        ttft_s=ttft,
                        first_byte_s=ttft * 0.9,
                        first_answer_s=ttft,
                        e2e_s=e2e,
                        tpot_s=tpot,
                        output_tokens=tokens,
                        tokens_source="usage",
                    )
                )
    return out


def write_run(
    root: Path,
    run_id: str,
    records: list[RequestRecord],
    *,
    scenarios: Mapping[str, int] = {"c=4": 4},
    started_at: str = "2026-01-01T00:00:00Z",
    status: str = "complete",
    summary: dict[str, Any] | None = None,
    layout_version: int = 1,
    config: dict[str, Any] | None = None,
    warnings: Sequence[str] = (),
    loop_lag: Mapping[str, float] | None = None,
) -> Path:
    """A run folder ``root/run_id``. ``loop_lag``: scenario -> event-loop lag p99 in
    ms, recorded as exceeded (run.json loop_lag.scenarios)."""
    folder = root / run_id
    folder.mkdir(parents=True)
    records_to_frame(records).write_parquet(folder / "records.parquet")
    # Each line as the store writes it (orjson: 5-10x json.dumps, which cost more than
    # the rest of the folder).
    (folder / "records.jsonl").write_bytes(
        b"".join(orjson.dumps(to_json(r)) + b"\n" for r in records)
    )
    models = sorted({r.model for r in records})
    run = {
        "layout_version": layout_version,
        "kind": "tokrate-run",
        "run_id": run_id,
        "status": status,
        "started_at": started_at,
        "ended_at": started_at,
        "config": config
        or {"load": {"mode": "closed", "burstiness": 1.0}, "prompts": {"sets": ["chat"]}},
        "targets": [{"endpoint": "sim", "model": m, "params_b": None} for m in models],
        "scenarios": [
            {"name": name, "concurrency": c, "rate_rps": None, "arrival": None}
            for name, c in scenarios.items()
        ],
        "warnings": list(warnings),
    }
    if loop_lag:
        run["loop_lag"] = {
            "threshold_ms": 5.0,
            "max_threshold_ms": 50.0,
            "p99_ms": max(loop_lag.values()),
            "max_ms": max(loop_lag.values()),
            "samples": 1000,
            "exceeded": True,
            "scenarios": [
                {"scenario": name, "p99_ms": ms, "max_ms": ms, "samples": 1000, "exceeded": True}
                for name, ms in loop_lag.items()
            ],
        }
    (folder / "run.json").write_text(json.dumps(run))
    if summary is not None:
        (folder / "summary.json").write_text(json.dumps(summary))
    return folder


def night_stamp(i: int) -> str:
    """The ``started_at`` of the i-th of a series of hourly runs (run folders sort by it)."""
    return f"2026-01-{1 + i // 24:02d}T{i % 24:02d}:00:00Z"


def write_runs(
    root: Path, count: int, *, change_at: int | None = None, summary: bool = True
) -> None:
    """``count`` hourly run folders ``run-000``... of the two tiers under ``root`` (30
    requests each, seeded by their index); from ``change_at`` on, sim-70b is 1.3x
    slower. ``summary``: with summary.json, as every finished run has (one summarize
    call for them all, :func:`summaries_of`)."""
    runs = {}
    for i in range(count):
        rid = f"run-{i:03d}"
        slow = {"sim-70b": 1.3} if change_at is not None and i >= change_at else None
        runs[rid] = make_records(rid, seed=i, n=30, slow=slow)
    summaries = summaries_of(runs) if summary else {}
    for i, (rid, recs) in enumerate(runs.items()):
        write_run(root, rid, recs, started_at=night_stamp(i), summary=summaries.get(rid))


def summary_of(run_id: str, records: list[RequestRecord]) -> dict[str, Any]:
    """summary.json (schema 1) of synthetic records, from tokrate.analysis.metrics.summarize."""
    from tokrate.analysis.metrics import summarize
    from tokrate.runfolder.run_info import RunInfo

    return to_json(summarize(records_to_frame(records), RunInfo(run_id=run_id)))


#: Joins a run id to a scenario name in :func:`summaries_of`'s one frame (in no name).
_RUN_SEP = "\x1f"


def summaries_of(runs: Mapping[str, list[RequestRecord]]) -> dict[str, dict[str, Any]]:
    """:func:`summary_of` of many runs (run id -> records) in one summarize call.

    summarize costs ~0.1 s a call whatever the size (polars plans a query of a few
    hundred aggregations), so 200 small runs are summarised as one frame whose
    scenario names carry their run: every group is its own run's, aggregated alone,
    and comes back under its own scenario name, in its run's order
    (tests/unit/test_history.py checks the result against summary_of).
    """
    from tokrate.analysis.metrics import summarize
    from tokrate.runfolder.run_info import RunInfo

    frames = [
        records_to_frame(records).with_columns(
            scenario=pl.lit(f"{run_id}{_RUN_SEP}") + pl.col("scenario")
        )
        for run_id, records in runs.items()
    ]
    batch = summarize(pl.concat(frames), RunInfo(run_id="batch"))
    groups: dict[str, list[Group]] = {run_id: [] for run_id in runs}
    for group in batch.groups:
        run_id, scenario = group.scenario.split(_RUN_SEP, 1)
        groups[run_id].append(dataclasses.replace(group, scenario=scenario))
    return {
        run_id: to_json(Summary(run_id=run_id, groups=tuple(run_groups)))
        for run_id, run_groups in groups.items()
    }
