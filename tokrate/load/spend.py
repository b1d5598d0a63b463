"""What a run will cost, before it costs it, and what it spends while it runs.

Before anything is sent, :func:`estimate_plan` prices the plan at each target's token
prices (:class:`tokrate.spec.pricing.TokenPrices`; targets priced by GPU-hours or not
at all are not counted: their cost is GPU time, not tokens): every planned request
(warm-up included) at its prompt's estimated input tokens (the cache-busting tag too,
and for a session turn its history at the earlier turns' ``max_tokens``), and at most
its ``max_tokens`` of output; times ``[client.retry] max_attempts`` where retries are
on (a failed attempt may be billed too). A level bounded by time, a prompt without
``max_tokens``, or a capacity search without a request budget has no upper bound, and
the estimate says so. With ``--max-cost`` a plan whose upper bound passes the cap is
refused (:func:`check_cap`: exit 2, one line, nothing sent).

While the run goes, :class:`SpendMeter` adds up what the records say was used: every
record's input tokens (the server's count, else the estimate; a request that was never
sent counts nothing) and its output tokens at the prices, warm-up, failed and retried
attempts included, so the figure errs high. As a stopping rule
(tokrate.load.stop_rules) it stops sending the moment the measured spend, plus what
the requests in flight will likely add (each at its target's mean cost so far, and one
more per target: the slot a worker refills before the driver sees an end), reaches
the cap: the requests in flight still finish and are recorded (a request already sent
is billed anyway), so the final spend lands near the cap, and run.json
``spend.spent_usd`` says what it was.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from tokrate.errors import ConfigError
from tokrate.inputs.prompt_base import Prompt, estimate_tokens
from tokrate.inputs.targets import Target
from tokrate.inputs.workloads import UNIQUE_TAG_TOKENS
from tokrate.load.plan import Plan
from tokrate.load.stop_rules import StopReason
from tokrate.runfolder.records import RequestRecord
from tokrate.runfolder.run_info import SpendInfo
from tokrate.spec.pricing import TokenPrices
from tokrate.spec.types import RunSpec

__all__ = ["PlanCost", "SpendMeter", "check_cap", "estimate_plan", "estimate_line"]

#: Tokens a chat template adds around one more message of a session's history (the
#: simulator's count: tokrate.physics.count_chat_tokens).
_TURN_OVERHEAD = 4


@dataclass(frozen=True, slots=True)
class PlanCost:
    """The estimate of a plan, over the targets with token prices.

    ``requests``: planned requests to priced targets (None: some level is bounded by
    time). ``input_usd``: their estimated input; ``output_max_usd``: their output at
    its cap (None: unbounded, ``unbounded_why`` says why). ``by_target``: each priced
    target's upper bound (its input where output is unbounded). ``attempts``: the
    retry factor applied. ``unpriced``: targets not counted (no token prices)."""

    requests: int | None
    input_usd: float | None
    output_max_usd: float | None
    by_target: tuple[tuple[str, float], ...]
    attempts: int = 1
    unbounded_why: str | None = None
    unpriced: tuple[str, ...] = ()

    @property
    def upper_usd(self) -> float | None:
        """The most the plan can cost (None: no upper bound)."""
        if self.input_usd is None or self.output_max_usd is None:
            return None
        return self.input_usd + self.output_max_usd


def _prompt_bounds(prompt: Prompt, tag_tokens: int) -> tuple[int, int | None]:
    """(input tokens, output cap) of every request one planned prompt sends: a
    session's turns each resend the history, whose answers are at most their caps."""
    inputs = prompt.input_tokens_est + tag_tokens
    cap: int | None = prompt.max_tokens
    total_in, total_out = inputs, cap
    history = inputs
    for turn in prompt.turns:
        if cap is None or total_out is None:
            return total_in, None
        history += cap + estimate_tokens(turn.user) + _TURN_OVERHEAD
        total_in += history
        cap = turn.max_tokens
        total_out = None if cap is None else total_out + cap
    return total_in, total_out


def _planned_prompts(plan: Plan, spec: RunSpec) -> dict[int, dict[int, int]] | None:
    """Per target index, how many times each prompt index is planned (warm-up
    included); None where a level is bounded only by time (or a capacity search
    without a request budget)."""
    counts: dict[int, dict[int, int]] = {}
    if spec.load.capacity is not None:
        return None
    for sc in plan.scenarios:
        if sc.planned_per_target is None:
            return None
        for pr in sc.requests():
            per = counts.setdefault(pr.target_index, {})
            per[pr.prompt_index] = per.get(pr.prompt_index, 0) + 1
    return counts


def estimate_plan(
    spec: RunSpec, plan: Plan, prompts: Sequence[Prompt], targets: Sequence[Target]
) -> PlanCost | None:
    """The plan's cost at its targets' token prices (module doc); None when no target
    has token prices."""
    prices = {i: p for i, t in enumerate(targets) if (p := TokenPrices.of(t.model)) is not None}
    if not prices:
        return None
    unpriced = tuple(t.label for i, t in enumerate(targets) if i not in prices)
    tag = UNIQUE_TAG_TOKENS if spec.client.unique_prompts else 0
    bounds = [_prompt_bounds(p, tag) for p in prompts]
    attempts = max(1, spec.client.retry.max_attempts)
    cap = spec.load.capacity
    if cap is not None:
        # A capacity search sends at most its request budget per target (warm-ups in it).
        worst_in = max(b[0] for b in bounds)
        outs = [b[1] for b in bounds]
        worst_out = None if any(o is None for o in outs) else max(o or 0 for o in outs)
        by_target = []
        input_usd = 0.0
        output_usd: float | None = 0.0
        for i, p in prices.items():
            n = cap.request_budget * attempts
            in_usd = n * p.cost_usd(worst_in, 0, 0)
            out_usd = None if worst_out is None else n * p.cost_usd(0, 0, worst_out)
            input_usd += in_usd
            output_usd = None if out_usd is None or output_usd is None else output_usd + out_usd
            by_target.append((targets[i].label, in_usd + (out_usd or 0.0)))
        why = None if worst_out is not None else "some prompts have no max_tokens"
        return PlanCost(
            cap.request_budget * len(prices),
            input_usd,
            output_usd,
            tuple(by_target),
            attempts,
            why,
            unpriced,
        )
    planned = _planned_prompts(plan, spec)
    if planned is None:
        return PlanCost(
            None,
            None,
            None,
            (),
            attempts,
            "a level is bounded by time (--duration), not by a request count",
            unpriced,
        )
    input_usd = 0.0
    output_usd = 0.0
    unbounded = False
    requests = 0
    by_target_list = []
    for i, p in prices.items():
        mine_in = mine_out = 0.0
        for index, n in planned.get(i, {}).items():
            tokens_in, tokens_out = bounds[index]
            requests += n
            mine_in += n * attempts * p.cost_usd(tokens_in, 0, 0)
            if tokens_out is None:
                unbounded = True
            else:
                mine_out += n * attempts * p.cost_usd(0, 0, tokens_out)
        input_usd += mine_in
        output_usd += mine_out
        by_target_list.append((targets[i].label, mine_in + mine_out))
    why = "some prompts have no max_tokens (set --max-tokens)" if unbounded else None
    return PlanCost(
        requests,
        input_usd,
        None if unbounded else output_usd,
        tuple(by_target_list),
        attempts,
        why,
        unpriced,
    )


def _usd(value: float) -> str:
    return (
        f"${value:,.2f}" if value >= 10 else f"${value:#.3g}" if value >= 0.001 else f"${value:.2g}"
    )


def _parts(cost: PlanCost) -> str:
    """ "48 requests: input $0.197 estimated, output at most $0.0106"."""
    count = "the planned requests" if cost.requests is None else f"{cost.requests:,} requests"
    parts = []
    if cost.input_usd is not None:
        parts.append(f"input {_usd(cost.input_usd)} estimated")
    if cost.output_max_usd is not None:
        parts.append(f"output at most {_usd(cost.output_max_usd)}")
    return f"{count}: {', '.join(parts)}" if parts else count


def estimate_line(cost: PlanCost, max_usd: float | None) -> str:
    """The estimate in one line, printed before anything is sent."""
    count = "the planned requests" if cost.requests is None else f"{cost.requests:,} requests"
    retries = f", x{cost.attempts} attempts" if cost.attempts > 1 else ""
    parts = []
    if cost.input_usd is not None:
        parts.append(f"input {_usd(cost.input_usd)} (the prompts' estimated tokens)")
    if cost.output_max_usd is not None:
        parts.append(f"output at most {_usd(cost.output_max_usd)} (their max_tokens)")
    upper = cost.upper_usd
    if upper is not None:
        head = f"at most {_usd(upper)} for {count}{retries}"
    else:
        head = f"no upper bound for {count}: {cost.unbounded_why}"
    text = head + (f": {', '.join(parts)}" if parts else "")
    if len(cost.by_target) > 1 and upper is not None:
        text += "; " + ", ".join(f"{label} {_usd(v)}" for label, v in cost.by_target)
    if cost.unpriced:
        text += f"; not counted (no token prices): {', '.join(cost.unpriced)}"
    if max_usd is not None:
        text += f"; --max-cost ${max_usd:g}"
        if upper is None:
            text += ": sending stops when the measured spend reaches it"
    return text


def check_cap(cost: PlanCost | None, max_usd: float | None) -> None:
    """Refuse a plan whose upper bound passes ``max_usd``, before anything is sent.
    Raises ConfigError (exit 2, one line)."""
    if max_usd is None:
        return
    if cost is None:
        raise ConfigError(
            "--max-cost: no target has token prices (set price_in_per_m and price_out_per_m "
            "in [[model]]); a cost cap needs them"
        )
    upper = cost.upper_usd
    if upper is not None and upper > max_usd:
        raise ConfigError(
            f"--max-cost ${max_usd:g}: the plan may cost up to {_usd(upper)} at the models' "
            f"token prices ({_parts(cost)}); raise --max-cost or plan fewer requests "
            "(--requests, --max-tokens)"
        )


class SpendMeter:
    """Adds up each record's cost at its target's token prices; a stopping rule that
    stops the run when the spend reaches ``max_usd`` (module doc)."""

    def __init__(self, prices: Mapping[str, TokenPrices], max_usd: float | None = None) -> None:
        #: Token prices by target label ("endpoint/model").
        self.prices = dict(prices)
        self.max_usd = max_usd
        self.spent_usd = 0.0
        self.priced = 0
        self._stopped = False
        #: Per target label: priced requests and their spend (the in-flight estimate).
        self._by_target: dict[str, tuple[int, float]] = {}

    @classmethod
    def for_targets(cls, targets: Sequence[Target], max_usd: float | None) -> SpendMeter | None:
        """A meter over the targets with token prices (None: none has them)."""
        prices = {t.label: p for t in targets if (p := TokenPrices.of(t.model)) is not None}
        return cls(prices, max_usd) if prices else None

    def cost_usd(self, record: RequestRecord) -> float:
        """What one record used at its target's prices (0 for an unpriced target or a
        request that was never sent)."""
        prices = self.prices.get(f"{record.endpoint}/{record.model}")
        if prices is None or record.error_class == "not_sent":
            return 0.0
        return prices.cost_usd(
            record.input_tokens or 0, record.cached_tokens or 0, record.output_tokens or 0
        )

    def observe(self, record: RequestRecord, in_flight: Mapping[str, int]) -> StopReason | None:
        cost = self.cost_usd(record)
        if cost:
            self.spent_usd += cost
            self.priced += 1
            label = f"{record.endpoint}/{record.model}"
            n, total = self._by_target.get(label, (0, 0.0))
            self._by_target[label] = (n + 1, total + cost)
        if self.max_usd is None or self._stopped:
            return None
        coming = self.in_flight_usd(in_flight)
        if self.spent_usd + coming < self.max_usd:
            return None
        self._stopped = True
        flying = sum(n for label, n in in_flight.items() if label in self.prices)
        return StopReason(
            "max_cost",
            "run",
            f"the measured spend {_usd(self.spent_usd)} after {self.priced:,} priced requests"
            + (
                f", with the {flying:,} in flight (about {_usd(coming)} at their targets'"
                " mean so far),"
                if flying
                else ""
            )
            + f" reached --max-cost ${self.max_usd:g}: sending stopped; the requests in"
            " flight were recorded (run.json spend.spent_usd has the final spend)",
        )

    def in_flight_usd(self, in_flight: Mapping[str, int]) -> float:
        """What the requests in flight will likely cost, each at its target's mean cost
        per request so far (0 before one of that target has ended), plus one more per
        target: the request a worker sends the moment one ends, before the driver has
        seen that end (a closed loop's slot refills at once)."""
        total = 0.0
        for label, done_spent in self._by_target.items():
            done, spent = done_spent
            n = in_flight.get(label, 0)
            if done:
                total += (n + 1) * spent / done
        return total

    def info(self, cost: PlanCost | None) -> SpendInfo:
        """run.json ``spend``."""
        return SpendInfo(
            max_usd=self.max_usd,
            requests_planned=None if cost is None else cost.requests,
            estimate_input_usd=None if cost is None else cost.input_usd,
            estimate_output_max_usd=None if cost is None else cost.output_max_usd,
            spent_usd=self.spent_usd,
            requests_priced=self.priced,
        )
