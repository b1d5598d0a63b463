"""The child that judges a capacity search's probes (python -m tokrate.finish.probe_judge):
the measuring process sends it records and gets back, per request, summary.json's
slo_met verdict (buffered streams have no TPOT, empty answers miss), without polars in
the measuring process; a child that fails is one line, never a hang or a traceback."""

from __future__ import annotations

import dataclasses

import pytest
from helpers.runfolders import make_records

from tokrate.analysis.metrics import derive, slo_met_expr
from tokrate.errors import FinishError
from tokrate.finish.probe_judge_child import ProbeJudgeChild
from tokrate.runfolder.records_frame import records_to_frame

SLO = {"ttft_s": 0.05, "tpot_s": 0.010}


def test_the_child_gives_summary_verdicts_request_by_request() -> None:
    records = make_records("r", models=("sim-7b",), n=24, error_every={"sim-7b": 5})
    ok = records[1]
    # Held back by a proxy: the whole answer in one read, 5 s after the first token
    # would have been due (a raw TPOT far over the limit, but a buffered stream has none).
    buffered = dataclasses.replace(
        ok, request_index=100, chunk_offsets_s=(0.04,) * 31 + (0.04,), tpot_s=0.2, e2e_s=6.24
    )
    # An ok request whose stream carried no content: no limit holds "vacuously" for it.
    empty = dataclasses.replace(ok, request_index=101, ttft_s=None, tpot_s=None)
    batch = [*records, buffered, empty]
    with ProbeJudgeChild(SLO) as child:
        first = child.judge(batch[:4])
        rest = child.judge(batch[4:])
    judged = first + rest
    met = slo_met_expr(SLO)
    assert met is not None
    frame = derive(records_to_frame(batch))
    expected = frame.select(met.alias("met"))["met"].to_list()
    assert [j.met for j in judged] == expected
    assert [j.request_index for j in judged] == [r.request_index for r in batch]
    assert [j.ok for j in judged] == [r.status == "ok" for r in batch]
    by_index = {j.request_index: j for j in judged}
    assert by_index[100].met and by_index[100].values["tpot_s"] is None
    assert not by_index[101].met and by_index[101].ok
    assert not by_index[0].ok and not by_index[0].met  # every 5th failed
    assert sum(j.met for j in judged) >= 15  # the tier is well inside the limits
    assert by_index[1].values == {"ttft_s": records[1].ttft_s, "tpot_s": records[1].tpot_s}


def test_a_child_that_cannot_judge_is_one_line() -> None:
    records = make_records("r", models=("sim-7b",), n=2)
    with ProbeJudgeChild({"ttft_s": "soon"}) as child, pytest.raises(FinishError) as caught:  # type: ignore[dict-item]
        child.judge(records)
    message = str(caught.value)
    assert "probes' judge" in message and "exit code 2" in message and "usage" in message
    assert "\n" not in message and "Traceback" not in message
