"""``python -m tokrate.finish.probe_judge SLO_JSON``: the child that judges a capacity
search's probe records (the protocol, and the parent's side, is
:mod:`tokrate.finish.probe_judge_child`).

``SLO_JSON`` is the ``[slo]`` latency limits set (``{"ttft_s": 1.0, ...}``, seconds).
Each input line is one batch of records; each answer says per record whether it met
every limit by summary.json's ``slo_met`` rule and the values it was judged by, so a
probe's verdict and the run's summary never disagree about a request.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from typing import Any

import orjson
import polars as pl

from tokrate.analysis.metrics import SLO_COLUMNS, derive, slo_judgement_exprs
from tokrate.finish.probe_judge_child import Judged, answer_line
from tokrate.runfolder.records_frame import records_to_frame

__all__ = ["judge_records", "main"]


def judge_records(records: Sequence[Mapping[str, Any]], slo: Mapping[str, float]) -> list[Judged]:
    """The verdict of each record (a RequestRecord's dict), in order, against ``slo``
    (the limits set, seconds)."""
    limits = {k: v for k, v in slo.items() if k in SLO_COLUMNS}
    rule = slo_judgement_exprs(limits)
    if rule is None:  # no latency limit: a request meets when it ended ok
        met, unjudged = pl.col("status") == "ok", pl.lit(False)
    else:
        met, unjudged = rule
    frame = derive(records_to_frame([dict(r) for r in records])).select(
        "request_index",
        (pl.col("status") == "ok").alias("ok"),
        met.alias("met"),
        unjudged.alias("unjudged"),
        "send_delay_s",
        *(pl.col(SLO_COLUMNS[k]).alias(f"slo:{k}") for k in limits),
    )
    return [
        Judged(
            request_index=int(row["request_index"]),
            ok=bool(row["ok"]),
            met=bool(row["met"]),
            values={k: row[f"slo:{k}"] for k in limits},
            send_delay_s=row["send_delay_s"],
            judged=not row["unjudged"],
        )
        for row in frame.iter_rows(named=True)
    ]


def main(argv: Sequence[str]) -> int:
    """Answer every batch on stdin until it ends; exit 0 (2 for bad arguments)."""
    try:
        slo = {str(k): float(v) for k, v in orjson.loads(argv[0]).items()}
    except (IndexError, ValueError, TypeError, AttributeError):
        sys.stderr.write("tokrate.finish.probe_judge: usage: ... probe_judge SLO_JSON\n")
        return 2
    for line in sys.stdin.buffer:
        if line.strip():
            sys.stdout.buffer.write(answer_line(judge_records(orjson.loads(line), slo)))
            sys.stdout.buffer.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
