"""What a run will cost, before it costs it (issue 38): the estimate printed before
anything is sent, ``--max-cost`` refusing a plan whose upper bound passes it (exit 2,
one line, not one request sent: the simulator's truth log stays empty), and stopping
the sends when the measured spend reaches it (every record kept, run.json saying why).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from tokrate.cli import main
from tokrate.runfolder.loaded_run import load_run
from tokrate.sim.model import Tier

#: A hosted-like tier that answers 120-160 tokens when no max_tokens caps it.
TIER = Tier("acme-mini", 3.0, 3.0, output_tokens_min=120, output_tokens_max=160)
PRICE_IN, PRICE_OUT = 3.0, 15.0  # USD per million tokens


def _config(tmp_path: Path, url: str, *, max_tokens: bool) -> Path:
    prompts = tmp_path / "prompts.jsonl"
    lines = []
    for i in range(6):
        line = {"id": f"p{i}", "task": "support", "prompt": "word " * 400 + str(i)}
        if max_tokens:
            line["max_tokens"] = 64
        lines.append(json.dumps(line))
    prompts.write_text("\n".join(lines) + "\n")
    config = tmp_path / "bench.toml"
    config.write_text(
        f'[[endpoint]]\nname = "acme"\nbase_url = "{url}"\n'
        f'[[model]]\nname = "acme-mini"\nprice_in_per_m = {PRICE_IN}\n'
        f"price_out_per_m = {PRICE_OUT}\n"
        '[prompts]\npaths = ["prompts.jsonl"]\n'
        "[load]\nconcurrency = [2]\nrequests = 30\n"
    )
    return config


def _cost(row: dict[str, object]) -> float:
    tokens_in = int(row["input_tokens"] or 0)  # type: ignore[call-overload]
    tokens_out = int(row["output_tokens"] or 0)  # type: ignore[call-overload]
    return (tokens_in * PRICE_IN + tokens_out * PRICE_OUT) / 1e6


def test_a_plan_over_the_cap_is_refused_before_anything_is_sent(
    start_sim_process: Callable[..., str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    truth = tmp_path / "truth.jsonl"
    url = start_sim_process(tiers=(TIER,), truth_log=str(truth))
    config = _config(tmp_path, url, max_tokens=True)
    out_dir = tmp_path / "reports"
    rc = main(["run", "-c", str(config), "--output-dir", str(out_dir), "--max-cost", "0.01"])
    err = capsys.readouterr().err
    assert rc == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    # 30 requests of ~407 input tokens ($3/M) and at most 64 output ($15/M).
    assert lines[0].startswith("tokrate: error: --max-cost $0.01: the plan may cost up to $0.0")
    assert "30 requests: input $0.0" in lines[0] and "output at most $0.0288" in lines[0]
    assert not out_dir.exists() or not any(out_dir.iterdir())
    # Not even the pre-flight's probe reached the server.
    assert not truth.exists() or truth.read_text() == ""


def test_the_estimate_is_printed_and_bounds_what_the_run_spends(
    start_sim_process: Callable[..., str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = start_sim_process(tiers=(TIER,))
    config = _config(tmp_path, url, max_tokens=True)
    out_dir = tmp_path / "reports"
    rc = main(["run", "-c", str(config), "--output-dir", str(out_dir), "--max-cost", "1"])
    err = capsys.readouterr().err
    assert rc == 0, err
    (line,) = [x for x in err.splitlines() if x.startswith("cost:")]
    assert line.startswith("cost: at most $")
    assert "for 30 requests: input $" in line and "--max-cost $1" in line
    (run_dir,) = out_dir.iterdir()
    run = load_run(run_dir)
    spend = run.info.spend
    assert spend is not None and spend.max_usd == 1.0 and spend.requests_planned == 30
    assert spend.estimate_output_max_usd == pytest.approx(30 * 64 * PRICE_OUT / 1e6)
    rows = run.records.to_dicts()
    assert spend.spent_usd == pytest.approx(sum(_cost(r) for r in rows))
    # The estimate bounds the spend: the input is the simulator's own count, the
    # output at most max_tokens.
    assert spend.estimate_input_usd is not None
    assert spend.spent_usd <= spend.estimate_input_usd + spend.estimate_output_max_usd + 1e-12
    assert run.info.stopped == ()


def test_sending_stops_when_the_measured_spend_reaches_the_cap(
    start_sim_process: Callable[..., str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = start_sim_process(tiers=(TIER,))
    # No max_tokens: the plan has no upper bound, so it is not refused; the spend stops it.
    config = _config(tmp_path, url, max_tokens=False)
    out_dir = tmp_path / "reports"
    cap = 0.02
    rc = main(["run", "-c", str(config), "--output-dir", str(out_dir), "--max-cost", str(cap)])
    err = capsys.readouterr().err
    assert rc == 0, err
    assert "cost: no upper bound for 30 requests: some prompts have no max_tokens" in err
    assert "warning: the measured spend $" in err and "reached --max-cost $0.02" in err
    (run_dir,) = out_dir.iterdir()
    run = load_run(run_dir)
    assert run.info.status == "complete"
    (stopped,) = run.info.stopped
    assert (stopped.rule, stopped.scope, stopped.scenario) == ("max_cost", "run", "c=2")
    rows = run.records.to_dicts()
    # Every request sent is recorded (and ok): fewer than planned, none lost.
    assert run.info.counts is not None and run.info.counts.scheduled == len(rows) < 30
    assert all(r["status"] == "ok" for r in rows)
    spend = run.info.spend
    assert spend is not None and spend.spent_usd == pytest.approx(sum(_cost(r) for r in rows))
    # It stopped at the cap, not before: the spend with the requests then in flight
    # reached it; what was in flight (2 streams) and what the worker sent before the
    # stop reached it (one per stream) is the most it can pass the cap by.
    worst = max(_cost(r) for r in rows)
    assert spend.spent_usd + 3 * worst >= cap
    assert spend.spent_usd <= cap + 4 * worst
    # The report says why it has fewer requests than planned.
    assert any("reached --max-cost" in w for w in run.info.warnings)
