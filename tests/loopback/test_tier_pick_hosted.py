"""The tier pick for hosted tiers (issue 38), end to end on a simulator standing in for
a provider: tiers whose names carry no size, input-heavy prompts, and prices whose
output-price order and token-mix order disagree.

The pick must be the cheapest on the requests actually sent (cost per 1,000 requests,
recomputed here from the records), "N x cheaper" must be that figure's ratio, and
without prices the pick must follow the measured goodput, say so, and never call a
tier "smallest".
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import polars as pl
import pytest
from helpers.specs import sim_spec, synthetic_prompts

from tokrate.analysis.tier_pick import TierRun, decide_tiers
from tokrate.load.run import run_benchmark
from tokrate.report.terminal.tier_text import verdict_lines
from tokrate.runfolder.loaded_run import load_run
from tokrate.sim.answers import Reference, answers_right
from tokrate.sim.model import Tier, default_tiers
from tokrate.spec.types import ModelSpec, PromptsSpec, SloSpec

#: Two hosted-like tiers with no size in their names. acme-pro is the small, fast
#: one, so a pick that followed the names ("mini" before "pro") would pick wrong.
TIERS = (
    Tier("acme-mini", 8.0, 8.0, output_tokens_min=16, output_tokens_max=48),
    Tier("acme-pro", 3.0, 3.0, output_tokens_min=16, output_tokens_max=48),
)
#: acme-mini's output is cheaper, but its input costs 30x acme-pro's: on input-heavy
#: requests acme-pro is by far the cheaper tier.
PRICES = {"acme-mini": (3.00, 0.50), "acme-pro": (0.10, 0.60)}
#: Lenient SLOs both tiers meet at c=4 on the time-scaled simulator.
SLO = SloSpec(ttft_s=2.0, tpot_s=0.5)


def _run(start: Callable[..., str], out: Path, *, priced: bool, run_id: str = "run") -> Path:
    url = start(tiers=TIERS)
    models = [
        ModelSpec(
            "acme",
            name,
            price_in_per_m=PRICES[name][0] if priced else None,
            price_out_per_m=PRICES[name][1] if priced else None,
        )
        for name in PRICES
    ]
    run_benchmark(
        sim_spec(
            url,
            out,
            endpoint="acme",
            models=models,
            run_id=run_id,
            # 2,000 input tokens, 16-48 output: the input dominates the bill.
            prompts=synthetic_prompts(64, count=8, input_tokens=2000),
            slo=SLO,
            concurrency=(4,),
            requests=24,
        )
    )
    return out / run_id


def _cost_per_1k(records: pl.DataFrame, model: str) -> float:
    """USD per 1,000 requests from the records by hand: every measured ok request's
    own input and output tokens at the model's prices."""
    p_in, p_out = PRICES[model]
    mine = records.filter(
        (pl.col("model") == model) & (pl.col("status") == "ok") & ~pl.col("warmup")
    )
    costs = [
        (row["input_tokens"] * p_in + row["output_tokens"] * p_out) / 1e6
        for row in mine.iter_rows(named=True)
    ]
    return sum(costs) / len(costs) * 1000


def test_the_pick_is_the_cheapest_on_the_token_mix(
    start_sim_process: Callable[..., str], tmp_path: Path
) -> None:
    run_dir = _run(start_sim_process, tmp_path, priced=True)
    run = load_run(run_dir)
    assert run.summary is not None
    mini = _cost_per_1k(run.records, "acme-mini")
    pro = _cost_per_1k(run.records, "acme-pro")
    # By output price alone acme-mini is cheaper; on the requests sent it is not.
    assert PRICES["acme-mini"][1] < PRICES["acme-pro"][1] and mini > 10 * pro
    costs = {g.model: g.cost for g in run.summary.groups}
    for model, by_hand in (("acme-mini", mini), ("acme-pro", pro)):
        cost = costs[model]
        assert cost is not None and cost.source == "price" and cost.n == 24
        assert cost.usd_per_1k_requests == pytest.approx(by_hand, rel=1e-9)
        assert cost.usd_per_1k_requests_ci is not None
        lo, hi = cost.usd_per_1k_requests_ci
        assert lo < by_hand < hi  # the answers' lengths vary: a real interval
        (task,) = next(g for g in run.summary.groups if g.model == model).by_task
        assert task.cost is not None and task.cost.usd_per_1k_requests == pytest.approx(by_hand)
    decision = decide_tiers([TierRun("run", run.summary, run.info)])
    (cell,) = decision.cells
    assert cell.rule == "cheapest"
    assert cell.pick is not None and cell.pick.model == "acme-pro"
    (line,) = verdict_lines(decision)
    ratio = mini / pro
    times = f"{ratio:.2g}x" if ratio < 10 else f"{ratio:,.0f}x"
    assert line.startswith("For synthetic pick acme-pro: meets TTFT ≤ 2000 ms and TPOT")
    assert f"{times} cheaper than acme-mini" in line, line
    assert "per 1,000 requests" in line and "token prices on its 2,0" in line
    assert "smallest" not in line and "1M output tokens" not in line


def test_without_prices_the_pick_follows_goodput_and_never_says_smallest(
    start_sim_process: Callable[..., str], tmp_path: Path
) -> None:
    run_dir = _run(start_sim_process, tmp_path, priced=False)
    run = load_run(run_dir)
    assert run.summary is not None
    assert all(t.size_b is None for t in run.info.targets)  # no size in the names
    goodput = {g.model: g.goodput_rps for g in run.summary.groups}
    assert all(v is not None and v > 0 for v in goodput.values())
    decision = decide_tiers([TierRun("run", run.summary, run.info)])
    (cell,) = decision.cells
    assert cell.rule == "goodput"
    best = max(goodput, key=lambda m: goodput[m] or 0.0)
    assert cell.pick is not None
    if not cell.goodput_tie:
        assert cell.pick.model == best
    lines = verdict_lines(decision)
    text = " ".join(lines)
    assert "smallest" not in text and "smaller" not in text
    (line,) = lines
    pick_rate = goodput[cell.pick.model] or 0.0
    other = next(m for m in goodput if m != cell.pick.model)
    assert f"{pick_rate:.3g} req/s against {(goodput[other] or 0.0):.3g} req/s" in line
    assert "no price or size is known, so ranked by this measured figure" in line or (
        cell.goodput_tie and "decode speed per stream decides" in line
    )
    # acme-pro (3B) decodes about 2.7x as fast as acme-mini (8B): the measured figure
    # picks it, where the names ("mini" first) would not.
    assert cell.pick.model == "acme-pro"


def test_an_external_simulator_standing_in_for_a_provider_answers_checked_prompts(
    start_sim_process: Callable[..., str], tmp_path: Path
) -> None:
    """`tokrate sim` on its own, reached by URL like a provider, is recognised in the
    pre-flight and told the right answers, so a checked run on it judges its tiers'
    declared accuracy (before, every answer was filler: 0%, with no hint)."""
    url = start_sim_process()
    run_benchmark(
        sim_spec(
            url,
            tmp_path,
            models=["sim-70b"],
            prompts=PromptsSpec(sets=("classification",)),
            concurrency=(4,),
            requests=24,
        )
    )
    run = load_run(tmp_path / "run")
    (target,) = run.info.targets
    assert not target.simulated and target.served is not None and target.served.simulator
    tier = next(t for t in default_tiers() if t.name == "sim-70b")
    rows = run.records.filter(pl.col("status") == "ok").to_dicts()
    assert len(rows) == 24
    for row in rows:
        # The simulator's own draw (seed 0, the task, the prompt id) decides the answer.
        right = answers_right(0, tier, Reference("", row["task"], row["prompt_id"]))
        assert row["check_passed"] is right, row
    assert sum(1 for r in rows if r["check_passed"]) >= 20  # 99% declared accuracy
