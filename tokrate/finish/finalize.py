"""Finalize a run folder after its load: records.parquet, summary.json, run.json.

The measuring process has appended every record to records.jsonl and written run.json
with everything it knows (counts, warnings, loop lag, connections, scrapes, and a
capacity search's capacity.json) but the status. :func:`finalize_run_folder` runs in
the finishing process (tokrate.finish.child) and writes, through the store, in this
order: records.parquet, server_metrics.parquet (from the scraper's
server_metrics.jsonl, when it scraped), summary.json (the capacity search's result in it
when there was one, and the servers' /metrics counters over the run:
tokrate.analysis.server_counters),
then run.json with the status, ``ended_at`` and the calibration verdict.
run.json comes last, so "complete" is only ever seen next to a complete parquet and
summary.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Literal

from tokrate.analysis.calibration import run_envelope
from tokrate.analysis.checks import apply_checks
from tokrate.analysis.metrics import summarize
from tokrate.analysis.routing import routing_file, routing_table
from tokrate.analysis.server_counters import server_counters
from tokrate.runfolder.loaded_run import read_records_jsonl, write_records_parquet
from tokrate.runfolder.server_metrics import read_server_metrics, samples_to_parquet
from tokrate.runfolder.store import (
    iso_now,
    load_run_info,
    read_capacity,
    write_routing,
    write_run_info,
    write_summary,
)
from tokrate.runfolder.summary import Summary

__all__ = ["finalize_run_folder"]


def finalize_run_folder(run_dir: Path, status: Literal["complete", "interrupted"]) -> Summary:
    """Write ``run_dir``'s records.parquet, server_metrics.parquet, summary.json and
    final run.json (module doc); returns the summary. Raises RunFolderError (an unreadable run.json or
    records.jsonl) or OutputError (a file cannot be written)."""
    info = dataclasses.replace(load_run_info(run_dir), status=status)
    frame = apply_checks(read_records_jsonl(run_dir / "records.jsonl"), run_dir)
    write_records_parquet(run_dir, frame)
    samples_to_parquet(run_dir)
    summary = summarize(frame, info)
    capacity = read_capacity(run_dir)
    if capacity is not None:
        summary = dataclasses.replace(summary, capacity=capacity)
    counters = server_counters(read_server_metrics(run_dir))
    if counters:
        summary = dataclasses.replace(summary, server_counters=counters)
    write_summary(run_dir, summary)
    routing = routing_table(summary, info)
    write_routing(run_dir, None if routing is None else routing_file(routing))
    lag_p99_ms = info.loop_lag.p99_ms if info.loop_lag is not None else None
    verdict = run_envelope(frame, lag_p99_ms or 0.0)
    write_run_info(run_dir, dataclasses.replace(info, ended_at=iso_now(), calibration=verdict))
    return summary
