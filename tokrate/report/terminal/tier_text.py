"""The tier pick in words: the verdict a reader can quote, and the phrases the tier
tables share.

Renders a :class:`~tokrate.analysis.tier_pick.TierDecision`; decides nothing. The
verdict is one sentence per answer at the heaviest load level measured (the level a
tier must hold), e.g.::

    For support pick acme-pro: meets TTFT ≤ 2000 ms and TPOT ≤ 50 ms at c=4 in 24/24
    requests (95% CI 86–100%), $0.469 per 1,000 requests (95% CI $0.463–$0.475; token
    prices on its 2,644 input and 340 output tokens per request), 17x cheaper than
    acme-mini ($8.11 per 1,000 requests, token prices), the next tier that meets.

Every figure a ranking rests on is printed in the sentence (the cost per 1,000 requests
with its interval and the rule that priced it, the sizes and where they came from, the
goodputs), so a reader can check the pick against the tables under it.

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
    GOODPUT_TIE,
    PASS_RATE,
    Candidate,
    Cell,
    Judgement,
    Shortfall,
    TierDecision,
    min_requests,
    rank_key,
)
from tokrate.runfolder.run_info import SloInfo
from tokrate.runfolder.summary import Cost
from tokrate.spec.metric_table import metric_label
from tokrate.textfmt import DASH, fmt_ms, fmt_pct_interval, fmt_tps

if TYPE_CHECKING:
    from rich.console import Console

__all__ = [
    "PRICE_HINT",
    "candidate_text",
    "cost_cell",
    "cost_text",
    "usd_text",
    "interval_text",
    "judgement_text",
    "pass_rate_text",
    "pooled_line",
    "render_verdict",
    "slo_text",
    "tasks_text",
    "verdict_lines",
]

#: What to set to rank tiers by cost (said wherever a pick could not use a price).
PRICE_HINT = (
    "set price_in_per_m and price_out_per_m (or gpu_hourly_usd) in [[model]] to rank by cost"
)

#: The SLO limits in the order a sentence names them, with their names.
_LIMITS = (
    *((key, metric_label(key)) for key in ("ttft_s", "tpot_s", "e2e_s")),
    ("itl_p99_s", metric_label("itl_p99")),
)


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


def _unjudged_text(j: Judgement) -> str:
    """ "; 2 one-token answers not judged: no TPOT": requests too short for a limit set
    (a TPOT needs 2 output tokens), neither met nor missed."""
    if not j.unjudged:
        return ""
    answers = "answer" if j.unjudged == 1 else "answers"
    return f"; {j.unjudged} one-token {answers} not judged: no TPOT"


def _short_text(j: Judgement) -> str:
    """Where at least half the requests a TPOT limit judged had 2-4 output tokens:
    "; its TPOT judgement rests on answers of 2-4 tokens (40 of 42: 1-3 gaps each)"."""
    if not j.short or j.short * 2 < j.n:
        return ""
    return (
        f"; its TPOT judgement rests on answers of 2-4 tokens ({j.short} of {j.n}: 1-3 gaps each)"
    )


def judgement_text(j: Judgement) -> str:
    """ "47/48 requests (95% CI 89–100%)"; "30/30 requests of all tasks (...)" where
    judged pooled; "11/11 checked answers (...)" for the pass rate; requests too
    short to judge, and a TPOT judgement resting on short answers, said after the
    interval."""
    if not j.n:
        return "no checked answers" if j.bar == PASS_RATE else "no requests"
    if j.bar == PASS_RATE:
        return f"{j.met}/{j.n} checked answers ({interval_text(j)})"
    pooled = " of all tasks" if j.pooled else ""
    notes = _unjudged_text(j) + _short_text(j)
    return f"{j.met}/{j.n} requests{pooled} ({interval_text(j)}{notes})"


def pass_rate_text(j: Judgement, *, brief: bool = False) -> str:
    """ "pass rate 45% (95% CI 27–65%)"; ``brief``: "pass rate 45%, 95% CI 27–65%"
    (inside brackets of its own)."""
    if not j.n:
        return "no checked answers"
    if brief:
        return f"pass rate {j.met / j.n:.0%}, {interval_text(j)}"
    return f"pass rate {j.met / j.n:.0%} ({interval_text(j)})"


def usd_text(value: float) -> str:
    """Dollars to three significant figures below $10 ("$0.00651", "$0.469",
    "$8.11"), cents above ("$12.50", "$1,234.00")."""
    if value >= 10 or value == 0:
        return f"${value:,.2f}"
    return f"${value:#.3g}" if value >= 0.001 else f"${value:#.2g}"


def _tokens(value: float | None) -> str:
    return DASH if value is None else f"{value:,.0f}"


def _rule_text(cost: Cost) -> str:
    """Which rule priced a cost, with the figures it rests on."""
    if cost.source == "gpu_hourly":
        return "GPU-hour price × GPUs at the measured throughput"
    if cost.input_tokens_mean is None or cost.output_tokens_mean is None:
        return "token prices on its requests' own tokens"
    mix = f"{_tokens(cost.input_tokens_mean)} input"
    if cost.cached_input_tokens_mean:
        mix += f" ({_tokens(cost.cached_input_tokens_mean)} cached)"
    mix += f" and {_tokens(cost.output_tokens_mean)} output"
    if cost.reasoning_tokens_mean:
        mix += f" ({_tokens(cost.reasoning_tokens_mean)} reasoning)"
    return f"token prices on its {mix} tokens per request"


def cost_text(c: Candidate, *, brief: bool = False) -> str:
    """ "$0.469 per 1,000 requests (95% CI $0.463–$0.475; token prices on its 2,644
    input and 340 output tokens per request)"; ``brief``: "$8.11 per 1,000
    requests, token prices"; "no price" when unpriced."""
    cost = c.cost
    if cost is None or cost.usd_per_1k_requests is None:
        return "no price"
    value = f"{usd_text(cost.usd_per_1k_requests)} per 1,000 requests"
    if brief:
        rule = "GPU-hours" if cost.source == "gpu_hourly" else "token prices"
        return f"{value}, {rule}"
    ci = cost.usd_per_1k_requests_ci
    interval = "" if ci is None else f"95% CI {usd_text(ci[0])}–{usd_text(ci[1])}; "
    return f"{value} ({interval}{_rule_text(cost)})"


def cost_cell(cost: Cost | None, *, interval: bool = True) -> str:
    """A table cell: "$0.469 [0.463–0.475]" per 1,000 requests, "GPU-h" after a
    GPU-hour cost; DASH when unpriced (or an old summary without the figure)."""
    if cost is None or cost.usd_per_1k_requests is None:
        return DASH
    text = usd_text(cost.usd_per_1k_requests)
    ci = cost.usd_per_1k_requests_ci
    if interval and ci is not None:
        text += f" [{usd_text(ci[0])[1:]}–{usd_text(ci[1])[1:]}]"
    return text + (" GPU-h" if cost.source == "gpu_hourly" else "")


def _times(ratio: float) -> str:
    """How much cheaper: "6x", "1.5x", "12x"; "4%" below 1.1x."""
    if ratio < 1.1:
        return f"{(ratio - 1) * 100:.0f}%"
    return f"{ratio:.2g}x" if ratio < 10 else f"{ratio:,.0f}x"


def _overlap(a: Cost | None, b: Cost | None) -> bool:
    """Whether two costs' intervals overlap (then cost does not separate them)."""
    if a is None or b is None:
        return False
    ca, cb = a.usd_per_1k_requests_ci, b.usd_per_1k_requests_ci
    if ca is None or cb is None:
        return False
    return ca[0] <= cb[1] and cb[0] <= ca[1]


def tasks_text(cell: Cell, decision: TierDecision | None = None) -> str:
    """Which tasks a cell answers for: their names (up to four), saying when they
    were pooled and the fewest requests a task had ("(pooled: as few as 15 per
    task)", a table's cell); with ``decision``, why in words ("as few as 15 requests
    per task, fewer than the 20 a decision needs")."""
    if cell.tasks == ("all",):
        return "all requests"
    names = _and(list(cell.tasks)) if len(cell.tasks) <= 4 else f"all {len(cell.tasks)} tasks"
    if not cell.pooled:
        return names
    if decision is None:
        # A table's cell: the fewest a task had, the figure the verdict quotes.
        return f"{names} (pooled: as few as {cell.fewest} per task)"
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
    """The tiers the pass-rate bar kept out that the rule ranks before the pick (or
    could not rank: unpriced ones under "cheapest"), with their pass rates ("" when
    none)."""
    if cell.rule == "none":
        return ""
    mine = rank_key(cell.rule, pick)
    before = [
        c
        for c in cell.candidates
        if c is not pick
        and (rank_key(cell.rule, c) < mine or (cell.rule == "cheapest" and not c.priced))
    ]
    failed = [(c, j) for c in before if (j := c.pass_rate) is not None and j.verdict == "misses"]
    if not failed:
        return ""
    parts = [f"{c.label} ({pass_rate_text(j, brief=True)})" for c, j in failed]
    bar = max(j.target for _, j in failed)
    verb = "fails" if len(failed) == 1 else "fail"
    return f"; {_and(parts)} {verb} the {bar:.0%} pass-rate bar"


def _unpriced_text(cell: Cell) -> str:
    free = cell.unpriced_meeting
    if len(free) == 1:
        return f"; {free[0].label} also meets but has no price, so is not ranked"
    if free:
        names = _and([c.label for c in free])
        return f"; {names} also meet but have no price, so are not ranked"
    return ""


def _cheapest_clause(cell: Cell, pick: Candidate) -> str:
    text = f", {cost_text(pick)}"
    runner = cell.runner_up
    if runner is None or runner.usd_per_1k is None or pick.usd_per_1k is None:
        return text + ", the only priced tier that meets" + _unpriced_text(cell)
    if _overlap(pick.cost, runner.cost):
        text += (
            f"; {runner.label}, the next tier that meets, costs {cost_text(runner, brief=True)}:"
            " the intervals overlap, so cost does not separate them"
        )
    elif pick.usd_per_1k > 0:
        ratio = runner.usd_per_1k / pick.usd_per_1k
        text += (
            f", {_times(ratio)} cheaper than {runner.label} ({cost_text(runner, brief=True)}),"
            " the next tier that meets"
        )
    else:
        text += f", free against {runner.label} ({cost_text(runner, brief=True)})"
    return text + _unpriced_text(cell)


def _size(c: Candidate) -> str:
    size = f"{c.size_b:.3g}B" if c.size_b is not None else DASH
    return f"{size}, inferred from its name" if c.size_source == "name" else size


def _smallest_clause(cell: Cell, pick: Candidate) -> str:
    inferred = [c.label for c in cell.candidates if c.size_source == "name"]
    how = ""
    if len(inferred) == 1:
        how = f"; the size of {inferred[0]} inferred from its name"
    elif inferred:
        how = f"; sizes of {_and(inferred)} inferred from their names"
    runner = cell.runner_up
    than = "" if runner is None else f", against {runner.label}'s {_size(runner)}"
    return (
        f", the smallest tier that meets ({pick.size_b:.3g}B active parameters{than}{how};"
        f" no price known: {PRICE_HINT})"
    )


def _rate(c: Candidate) -> str:
    value = c.throughput
    return DASH if value is None else f"{value:.3g} req/s"


def _goodput_clause(decision: TierDecision, cell: Cell, pick: Candidate) -> str:
    what = "goodput" if decision.slo_set else "answered requests/s (no SLOs set)"
    runner = cell.runner_up
    some_sized = any(c.size_b is not None for c in cell.candidates)
    unknown = (
        "no price, and not every size, is known" if some_sized else ("no price or size is known")
    )
    if runner is None:
        return f", the only tier that meets ({what} {_rate(pick)}; {unknown}: {PRICE_HINT})"
    if cell.goodput_tie:
        return (
            f", ranked by measured {what} ({unknown}): {_rate(pick)} against"
            f" {_rate(runner)} for {runner.label}, within {GOODPUT_TIE:.0%}, so decode speed"
            f" per stream decides: {fmt_tps(pick.decode_tps)} against"
            f" {fmt_tps(runner.decode_tps)} tok/s (median); {PRICE_HINT}"
        )
    return (
        f", the highest {what} among the tiers that meet: {_rate(pick)} against"
        f" {_rate(runner)} for {runner.label} ({unknown}, so ranked by this measured"
        f" figure; to rank by cost, {PRICE_HINT.removesuffix(' to rank by cost')})"
    )


def _cost_clause(decision: TierDecision, cell: Cell, pick: Candidate) -> str:
    """Why this tier among those that meet, with the figures the rule ranked by."""
    if cell.rule == "cheapest":
        return _cheapest_clause(cell, pick)
    if cell.rule == "smallest":
        return _smallest_clause(cell, pick)
    return _goodput_clause(decision, cell, pick)


def _pick_sentence(decision: TierDecision, cell: Cell, pick: Candidate) -> str:
    meets = _bars_text(decision, pick, cell.level)
    cost = _cost_clause(decision, cell, pick)
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
    return text + ". Set [slo] ttft_s / tpot_s to pick a tier by the speed you need."


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
