"""The tier pick in words: the verdict a reader can quote, and the phrases the tier
tables share.

Renders a :class:`~tokrate.analysis.tier_pick.TierDecision`; decides nothing. The
verdict is one sentence per answer at the heaviest load level measured (the level a
tier must hold), e.g.::

    For classification pick sim-7b: meets TTFT ≤ 500 ms and TPOT ≤ 30 ms at c=8 in
    47/48 requests (95% CI 89–100%), $0.12 per 1M output tokens, 6x cheaper than
    sim-13b, the next tier that meets.

and, where no tier meets, which bar each one misses by how much. Where answers were
checked the pick must also clear the pass-rate bar, and the sentence says so with the
pick's pass rate and interval and names the smaller tiers the bar excluded with
theirs. Where the level's SLOs had to be judged on all tasks pooled (too few requests
per task), one line before the sentences says so once, with how many requests would
decide per task. Imports nothing but the decision's types and the text helpers, so the
measuring process can print it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

from tokrate.analysis.tier_pick import (
    PASS_RATE,
    Candidate,
    Cell,
    Judgement,
    Shortfall,
    TierDecision,
    min_requests,
)
from tokrate.runfolder.run_info import SloInfo
from tokrate.textfmt import DASH, fmt_ms, fmt_pct_interval

if TYPE_CHECKING:
    from rich.console import Console

__all__ = [
    "candidate_text",
    "cost_text",
    "interval_text",
    "judgement_text",
    "pass_rate_text",
    "pooled_line",
    "render_verdict",
    "slo_text",
    "tasks_text",
    "verdict_lines",
]

#: The SLO limits in the order a sentence names them, with their names.
_LIMITS = (("ttft_s", "TTFT"), ("tpot_s", "TPOT"), ("e2e_s", "E2E"), ("itl_p99_s", "ITL p99"))


def _and(items: Sequence[str]) -> str:
    """ "a", "a and b", "a, b and c"."""
    if len(items) <= 1:
        return "".join(items)
    return ", ".join(items[:-1]) + " and " + items[-1]


def _limit(seconds: float) -> str:
    return f"{seconds * 1000:.4g} ms"


def slo_text(slo: SloInfo) -> str:
    """The SLOs set, e.g. "TTFT ≤ 500 ms and TPOT ≤ 30 ms" ("" when none)."""
    limits = slo.as_mapping()
    return _and(
        [f"{name} ≤ {_limit(v)}" for key, name in _LIMITS if (v := limits[key]) is not None]
    )


def interval_text(j: Judgement) -> str:
    """ "95% CI 89–100%" (DASH without requests)."""
    if j.interval is None:
        return DASH
    lo, hi = j.interval
    return f"95% CI {fmt_pct_interval(lo, hi)}"


def judgement_text(j: Judgement) -> str:
    """ "47/48 requests (95% CI 89–100%)"; "30/30 requests of all tasks (...)" where
    judged pooled; "11/11 checked answers (...)" for the pass rate."""
    if not j.n:
        return "no checked answers" if j.bar == PASS_RATE else "no requests"
    if j.bar == PASS_RATE:
        return f"{j.met}/{j.n} checked answers ({interval_text(j)})"
    pooled = " of all tasks" if j.pooled else ""
    return f"{j.met}/{j.n} requests{pooled} ({interval_text(j)})"


def pass_rate_text(j: Judgement, *, brief: bool = False) -> str:
    """ "pass rate 45% (95% CI 27–65%)"; ``brief``: "pass rate 45%, 95% CI 27–65%"
    (inside brackets of its own)."""
    if not j.n:
        return "no checked answers"
    if brief:
        return f"pass rate {j.met / j.n:.0%}, {interval_text(j)}"
    return f"pass rate {j.met / j.n:.0%} ({interval_text(j)})"


def _usd(value: float) -> str:
    return f"${value:,.2f}" if value >= 0.1 else f"${value:.2g}"


def cost_text(c: Candidate) -> str:
    """ "$0.12 per 1M output tokens" (with "GPU-hour price" where it came from one)."""
    if c.usd_per_m is None:
        return "no price"
    how = " (GPU-hour price at the measured throughput)" if c.cost_source == "gpu_hourly" else ""
    return f"{_usd(c.usd_per_m)} per 1M output tokens{how}"


def _times(ratio: float) -> str:
    """How much cheaper: "6x", "1.5x", "12x"; "4%" below 1.1x."""
    if ratio < 1.1:
        return f"{(ratio - 1) * 100:.0f}%"
    return f"{ratio:.2g}x" if ratio < 10 else f"{ratio:,.0f}x"


def tasks_text(cell: Cell, decision: TierDecision | None = None) -> str:
    """Which tasks a cell answers for: their names (up to four), saying when they
    were pooled; with ``decision``, why ("as few as 15 requests per task ...")."""
    if cell.tasks == ("all",):
        return "all requests"
    names = _and(list(cell.tasks)) if len(cell.tasks) <= 4 else f"all {len(cell.tasks)} tasks"
    if not cell.pooled:
        return names
    if decision is None:
        return f"{names} (pooled)"
    if decision.checked:
        # Said once for the level (pooled_line); the SLO part names its pooled n.
        return names
    return (
        f"{names} (pooled: as few as {cell.fewest} requests per task, fewer than the "
        f"{decision.min_requests} a decision needs)"
    )


def pooled_line(decision: TierDecision, level: str) -> str | None:
    """Once per decision where ``level``'s SLOs were judged on all its tasks pooled
    and its answers per task: why, and how many requests would decide per task."""
    fewest = decision.pooled_at(level)
    if fewest is None or not decision.checked:
        return None
    totals = [
        j.n
        for cell in decision.cells_at(level)
        for c in cell.candidates
        for j in c.judgements
        if j.pooled
    ]
    needed = decision.min_requests
    text = (
        f"At {level} each model has as few as {fewest} requests of a task, fewer than the "
        f"{needed} a latency decision needs, so its SLOs are judged on all its tasks "
        "together; answers are still judged per task."
    )
    if totals and fewest:
        per_level = math.ceil(needed * max(totals) / fewest)
        text += (
            f" For a decision per task send about {per_level} requests per model and "
            f"level (--requests {per_level})."
        )
    return text


def _shortfall(s: Shortfall) -> str:
    return f"{s.what} {fmt_ms(s.value)} vs ≤ {_limit(s.limit)} ({s.ratio:.2g}x the limit)"


def candidate_text(c: Candidate, *, fraction: bool = True) -> str:
    """Why a candidate does not meet: its fraction (unless ``fraction`` is False)
    and the limits it overran, its pass rate below the bar, its failures, or why it
    could not be decided."""
    parts = []
    for j in c.judgements:
        if j.verdict == "undecided":
            parts.append(f"undecided ({j.reason})")
        elif j.verdict == "misses" and j.bar == PASS_RATE:
            parts.append(f"{pass_rate_text(j)} < {j.target:.0%}")
        elif j.verdict == "misses":
            why = [_shortfall(s) for s in j.shortfalls]
            if not why and not c.failed:
                why = ["misses spread over the limits"]
            if fraction:
                why.insert(0, f"{j.met}/{j.n} met {j.bar} ({interval_text(j)})")
            parts += why
    if c.failed:
        parts.append(f"{c.failed} failed")
    return ", ".join(parts) or "meets"


def _bar_default(decision: TierDecision) -> str:
    return " (the default; set [slo] min_pass_rate)" if decision.pass_bar_default else ""


def _bars_text(decision: TierDecision, c: Candidate, level: str) -> str:
    """What the pick met, one part per bar: "meets TTFT ≤ 500 ms and TPOT ≤ 30 ms at
    c=8 in 47/48 requests (95% CI 89–100%)" ("answered ... with no SLOs set" without
    SLOs), "passes 11/11 checked answers (...) ≥ the 90% bar"; a bar that did not apply
    (no checked answers) is left out."""
    out = []
    for j in c.judgements:
        if j.verdict == "unjudged":
            continue
        if j.bar == PASS_RATE:
            out.append(
                f"passes {judgement_text(j)} ≥ the {j.target:.0%} bar{_bar_default(decision)}"
            )
        elif j.bar == "SLOs" and not decision.slo_set:
            out.append(f"answered {judgement_text(j)} at {level} with no SLOs set")
        else:
            what = slo_text(decision.slo) if j.bar == "SLOs" else j.bar
            out.append(f"meets {what} at {level} in {judgement_text(j)}")
    return " and ".join(out) if len(out) == 2 else "; ".join(out)


def _excluded_text(cell: Cell, pick: Candidate) -> str:
    """The tiers ranked before the pick that the pass-rate bar kept out, with their
    pass rates ("" when none)."""
    before = cell.candidates[: cell.candidates.index(pick)]
    if cell.rule == "cheapest" and pick.usd_per_m is not None:
        before = (
            tuple(
                c
                for c in cell.candidates
                if c.usd_per_m is not None and c.usd_per_m < pick.usd_per_m
            )
            or before
        )
    failed = [(c, j) for c in before if (j := c.pass_rate) is not None and j.verdict == "misses"]
    if not failed:
        return ""
    parts = [f"{c.label} ({pass_rate_text(j, brief=True)})" for c, j in failed]
    bar = max(j.target for _, j in failed)
    verb = "fails" if len(failed) == 1 else "fail"
    return f"; {_and(parts)} {verb} the {bar:.0%} pass-rate bar"


def _cost_clause(cell: Cell, pick: Candidate) -> str:
    """The cost part of a pick: its price and how much cheaper than the next tier
    that meets, the unpriced ones named; or why it was picked by size."""
    if cell.rule != "cheapest":
        return (
            ", the smallest tier that meets (no price known: set price_out_per_m or "
            "gpu_hourly_usd in [[model]] to rank by cost)"
        )
    text = f", {cost_text(pick)}"
    runner = cell.runner_up
    if runner is not None and runner.usd_per_m and pick.usd_per_m:
        ratio = runner.usd_per_m / pick.usd_per_m
        text += f", {_times(ratio)} cheaper than {runner.label}, the next tier that meets"
    else:
        text += ", the only priced tier that meets"
    free = cell.unpriced_meeting
    if len(free) == 1:
        text += f"; {free[0].label} also meets but has no price, so is not ranked"
    elif free:
        names = _and([c.label for c in free])
        text += f"; {names} also meet but have no price, so are not ranked"
    return text


def _pick_sentence(decision: TierDecision, cell: Cell, pick: Candidate) -> str:
    meets = _bars_text(decision, pick, cell.level)
    cost = _cost_clause(cell, pick)
    excluded = _excluded_text(cell, pick)
    return f"For {tasks_text(cell, decision)} pick {pick.label}: {meets}{cost}{excluded}."


def _bars_names(decision: TierDecision, cell: Cell) -> str:
    names = []
    for bar in decision.bars:
        if bar == "SLOs":
            names.append(slo_text(decision.slo) or "the SLOs")
        elif bar == PASS_RATE:
            targets = {j.target for c in cell.candidates if (j := c.pass_rate) is not None}
            if targets:
                names.append(f"the {max(targets):.0%} pass-rate bar{_bar_default(decision)}")
        else:
            names.append(bar)
    return _and(names)


def _none_sentence(decision: TierDecision, cell: Cell) -> str:
    misses = "; ".join(f"{c.label} {candidate_text(c)}" for c in cell.not_meeting)
    answers = [c.pass_rate for c in cell.candidates]
    if answers and all(j is not None and j.verdict == "undecided" for j in answers):
        # Every tier's answers too few to judge: that is the news, whatever the SLOs say.
        counted = [j for j in answers if j is not None]
        few = min(j.n for j in counted)
        needed = max(j.target for j in counted)
        fast = [
            c.label for c in cell.candidates if (s := c.judgement("SLOs")) and s.verdict == "meets"
        ]
        alone = f" By the SLOs alone: {fast[0]}." if fast else ""
        return (
            f"For {tasks_text(cell, decision)} there are too few checked answers at "
            f"{cell.level} to decide: as few as {few} per tier, and a {needed:.0%} "
            f"pass-rate bar needs at least {min_requests(needed)}; send more of those "
            f"checked prompts (--requests) before picking a tier for it.{alone}"
        )
    if all(c.verdict == "undecided" for c in cell.candidates):
        return (
            f"For {tasks_text(cell, decision)} there are too few requests at {cell.level} to decide: "
            f"{misses}. Run at least {decision.min_requests} requests per target and level."
        )
    bars = _bars_names(decision, cell)
    return f"For {tasks_text(cell, decision)} no tier meets {bars} at {cell.level}: {misses}."


def _fallback(decision: TierDecision, cell: Cell) -> str:
    """Where no tier meets at the heaviest level: the heaviest lighter level whose
    answer covers the same tasks and has a pick."""
    for level in reversed(decision.levels[:-1]):
        for other in decision.cells_at(level):
            if other.pick is not None and set(cell.tasks) <= set(other.tasks):
                j = other.pick.judgements[0]
                return f" At {level}, {other.pick.label} meets: {judgement_text(j)}."
    return ""


def _no_slo_sentence(decision: TierDecision, cell: Cell) -> str:
    text = (
        f"No SLOs are set, so every tier that answered passes at {cell.level}"
        f" for {tasks_text(cell, decision)}"
    )
    if cell.pick is not None and cell.rule == "cheapest":
        text += f"; the cheapest is {cell.pick.label} ({cost_text(cell.pick)})"
    return text + ". Set [slo] ttft_s / tpot_s to pick the smallest tier fast enough for you."


def verdict_lines(decision: TierDecision) -> list[str]:
    """One sentence per answer at the heaviest load level measured (after the line
    that says, once, why the level's SLOs were pooled, where they were)."""
    if not decision.levels:
        return []
    heaviest = decision.levels[-1]
    out = []
    pooled = pooled_line(decision, heaviest)
    if pooled is not None:
        out.append(pooled)
    for cell in decision.cells_at(heaviest):
        if not decision.slo_set and decision.bars == ("SLOs",):
            out.append(_no_slo_sentence(decision, cell))
        elif cell.pick is not None:
            out.append(_pick_sentence(decision, cell, cell.pick))
        else:
            out.append(_none_sentence(decision, cell) + _fallback(decision, cell))
    return out


def render_verdict(decision: TierDecision, console: Console) -> None:
    """Print the verdict lines (the end of the terminal summary), each wrapped at
    word boundaries to the console's width."""
    from rich.text import Text

    for line in verdict_lines(decision):
        console.print(Text(line))
