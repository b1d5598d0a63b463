"""The load plan: pure, seeded, lazy.

:func:`build_plan` turns a RunSpec's ``[load]`` into scenarios (one per sweep level; in
``sequential`` targets mode one per level x target). :meth:`ScenarioPlan.requests`
yields PlannedRequests lazily: duration-bound scenarios are unbounded in count, and
nothing here ever builds the whole list. :func:`shard` cuts a plan into disjoint parts
for workers. No clock, no I/O: the same spec, seed and sizes give the same prompt order
and the same arrival times, on any machine.

Semantics (documented in docs/config.md):

- A level is *per target*: "c=4" keeps 4 requests in flight for each target
  (``streams`` = 4 x targets in the scenario in total); "rate=2/s" sends each target
  2 requests/s (``total_rate_rps`` = 2 x targets).
- ``requests`` counts measured requests per target; each target also gets
  ``warmup_requests`` warm-up requests first. ``warmup_s`` marks every request sent in
  the first ``warmup_s`` seconds as warm-up (open loop: decided here from
  ``scheduled_s``; closed loop: by the engine at send time, see ``warmup_s``); those
  count toward ``requests``. With ``duration_s`` the scenario lasts ``warmup_s +
  duration_s`` seconds (``ScenarioPlan.duration_s`` is that total).
- Prompt order: every target walks the same seeded sequence of prompt indices (each
  pass over the prompts is a fresh permutation), so the k-th request of every target
  asks the same prompt and targets are compared on identical work.
- Targets: ``interleaved`` and ``parallel`` run every target of a scenario in the same
  time window, ``sequential`` runs one scenario per target. A level is per target in
  every mode. Closed loop: each target has its own ``concurrency`` slots (the engine
  runs ``requests(target=t)`` per target), so interleaved and parallel differ only in
  how request indices are dealt (interleaved: seeded balanced blocks, each block of n
  requests holding every target once). Open loop: ``interleaved`` draws one arrival
  process at the total rate (rate x targets) and deals its arrivals to the targets in
  seeded balanced blocks, so each target gets exactly ``rate`` on average and arrivals
  stay interleaved; ``parallel`` gives each target its own independent arrival process
  at ``rate`` (merged in time order).
- Arrivals (open loop, per stream of requests): ``constant`` (every 1/rate s),
  ``poisson`` (exponential gaps), ``gamma`` with ``burstiness`` = 1/shape = the squared
  coefficient of variation of the gaps (1 = Poisson, > 1 burstier, < 1 more regular);
  the mean gap is always 1/rate. The first request is sent at 0.
- Ramp-up (open loop, ``ramp_up_s``): the rate climbs linearly from 0 to the level over
  the first ``ramp_up_s`` seconds; those requests are warm-up and the scenario lasts
  that much longer.
"""

from __future__ import annotations

import dataclasses
import hashlib
import heapq
import itertools
import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import overload

from tokrate.errors import ConfigError
from tokrate.spec.types import ArrivalKind, LoadMode, RunSpec, TargetsMode

__all__ = [
    "Plan",
    "PlannedRequest",
    "ScenarioPlan",
    "build_plan",
    "derive_seed",
    "shard",
    "split_evenly",
]


def derive_seed(seed: int, *parts: object) -> int:
    """A 63-bit seed from ``seed`` and labels; stable across processes and Python
    versions (blake2b, not ``hash()``, which is salted per process)."""
    text = "\x1f".join(str(p) for p in (seed, *parts)).encode()
    return int.from_bytes(hashlib.blake2b(text, digest_size=8).digest(), "big") >> 1


def split_evenly(total: int, n: int) -> tuple[int, ...]:
    """``total`` split into ``n`` non-negative parts differing by at most 1, larger
    parts first: split_evenly(10, 3) == (4, 3, 3)."""
    if n < 1:
        raise ValueError("n must be >= 1")
    base, extra = divmod(total, n)
    return tuple(base + (1 if i < extra else 0) for i in range(n))


@dataclass(frozen=True, slots=True)
class PlannedRequest:
    """One request the plan asks for.

    ``index`` is unique within the scenario (across all shards); ``target_index`` and
    ``prompt_index`` index the run's targets and prompts; ``scheduled_s`` is the send
    time in seconds from scenario start (open loop; None in closed loop); ``warmup``
    marks a request recorded but excluded from metrics.
    """

    index: int
    target_index: int
    prompt_index: int
    scheduled_s: float | None
    warmup: bool


@dataclass(frozen=True, slots=True)
class ScenarioPlan:
    """One scenario (one sweep level, possibly one target) or one shard of it.

    Frozen and picklable (workers receive it). Fields:

    - ``name``: "c=4", "rate=2/s", plus " [target]" in sequential mode.
    - ``mode``: "closed" or "open". ``concurrency`` (closed) / ``rate_rps`` (open) is
      the level *per target* in this shard; the other is None.
    - ``streams``: closed loop, requests in flight in total in this shard
      (concurrency x len(target_indices)): ``concurrency`` streams per target in every
      targets mode (the engine runs ``requests(target=t)`` per target). None in open
      loop.
    - ``total_rate_rps``: open loop, arrivals/s summed over targets in this shard.
    - ``requests_per_target``: measured requests per target (None: duration-bound).
    - ``warmup_requests``: warm-up requests per target before those.
    - ``warmup_s``: seconds from scenario start during which every sent request is
      warm-up (open loop: already applied to ``PlannedRequest.warmup``; closed loop:
      the engine marks requests whose t0 falls inside it).
    - ``duration_s``: total seconds the scenario lasts (warmup_s + measured duration),
      None when only counts bound it.
    - ``shard_index``/``shard_count``: this part of the scenario; ``seed`` is the
      scenario's seed (every shard walks the same global schedule and keeps its part,
      so the union of shards is exactly the unsharded plan) and ``shard_seed`` a seed
      derived per shard for shard-local randomness (e.g. unique prompt prefixes).
    """

    name: str
    mode: LoadMode
    concurrency: int | None
    rate_rps: float | None
    arrival: ArrivalKind
    burstiness: float
    targets_mode: TargetsMode
    target_indices: tuple[int, ...]
    n_prompts: int
    requests_per_target: int | None
    warmup_requests: int
    warmup_s: float
    duration_s: float | None
    seed: int
    prompt_seed: int
    shard_index: int = 0
    shard_count: int = 1
    #: The full (unsharded) per-target level, and (closed loop) this shard's slots in
    #: it: shards walk the unsharded schedule and keep their part.
    level_concurrency: int | None = None
    level_rate_rps: float | None = None
    slot_range: tuple[int, int] | None = None
    #: Open loop: seconds over which the rate climbs linearly from 0 (already part of
    #: ``warmup_s`` and ``duration_s``).
    ramp_up_s: float = 0.0

    @property
    def streams(self) -> int | None:
        if self.concurrency is None:
            return None
        return self.concurrency * len(self.target_indices)

    @property
    def streams_per_target(self) -> int:
        """Closed loop: the streams per target worth starting in this shard, the
        concurrency capped at the requests a target can ever have (a stream beyond
        that would find nothing to send, yet cost a task and a pool slot). 0 in open
        loop."""
        conc = self.concurrency or 0
        planned = self.planned_per_target
        return conc if planned is None else min(conc, planned)

    @property
    def total_rate_rps(self) -> float | None:
        if self.rate_rps is None:
            return None
        return self.rate_rps * len(self.target_indices)

    @property
    def shard_seed(self) -> int:
        return derive_seed(self.seed, "shard", self.shard_index, self.shard_count)

    @property
    def is_empty(self) -> bool:
        """True for a shard that got no share of the load (more workers than streams)."""
        if self.mode == "closed":
            return not self.concurrency
        return not self.rate_rps

    @property
    def planned_per_target(self) -> int | None:
        """Requests per target the *unsharded* scenario sends; None if duration-bound."""
        if self.requests_per_target is None:
            return None
        return self.requests_per_target + self.warmup_requests

    def requests(self, target: int | None = None) -> Iterator[PlannedRequest]:
        """This shard's planned requests, lazily, in send order.

        Open loop: ordered by ``scheduled_s``. ``target`` (a target index) keeps only
        that target's requests. Deterministic: the same plan yields the same sequence.
        """
        if self.is_empty:
            return iter(())
        pairs = self._all()
        stream: Iterator[PlannedRequest]
        if self.shard_count > 1:
            stream = (pr for pr, k in pairs if self._owns(k))
        else:
            stream = (pr for pr, _ in pairs)
        if target is not None:
            stream = (pr for pr in stream if pr.target_index == target)
        return stream

    # --- internals ---------------------------------------------------------------

    def _owns(self, k: int) -> bool:
        """Whether this shard sends a target's k-th request. Closed loop: the k-th
        request takes slot k mod level, and this shard owns ``slot_range`` of them (so
        each shard's share matches its share of the concurrency). Open loop: k mod
        shard_count."""
        if self.mode == "closed":
            assert self.slot_range is not None and self.level_concurrency
            lo, hi = self.slot_range
            return lo <= k % self.level_concurrency < hi
        return k % self.shard_count == self.shard_index

    def _prompt_order(self) -> _PromptOrder:
        return _PromptOrder(self.n_prompts, self.prompt_seed)

    def _per_target_limit(self) -> int | None:
        return self.planned_per_target

    def _all(self) -> Iterator[tuple[PlannedRequest, int]]:
        """The unsharded scenario: (request, per-target counter k) in send order."""
        targets = self.target_indices
        if self.mode == "closed":
            return self._closed(targets)
        if self.targets_mode == "parallel" and len(targets) > 1:
            return self._open_parallel(targets)
        return self._open_shared(targets)

    def _is_warmup(self, k: int, scheduled_s: float | None) -> bool:
        if k < self.warmup_requests:
            return True
        return scheduled_s is not None and scheduled_s < self.warmup_s

    def _closed(self, targets: tuple[int, ...]) -> Iterator[tuple[PlannedRequest, int]]:
        order = self._prompt_order()
        limit = self._per_target_limit()
        counters = [0] * len(targets)
        rng = random.Random(derive_seed(self.seed, "targets"))
        index = 0
        for block in _blocks(len(targets), rng, shuffle=self.targets_mode != "parallel"):
            for slot in block:
                k = counters[slot]
                if limit is not None and k >= limit:
                    return
                counters[slot] += 1
                pr = PlannedRequest(index, targets[slot], order[k], None, self._is_warmup(k, None))
                index += 1
                yield pr, k

    def _open_shared(self, targets: tuple[int, ...]) -> Iterator[tuple[PlannedRequest, int]]:
        """One arrival process at the total rate; targets dealt in seeded blocks."""
        rate = self.level_rate_rps or self.rate_rps
        assert rate is not None
        order = self._prompt_order()
        limit = self._per_target_limit()
        total_rate = rate * len(targets)
        seed = derive_seed(self.seed, "t")
        times = _ramped(_arrivals(total_rate, self.arrival, self.burstiness, seed), self.ramp_up_s)
        rng = random.Random(derive_seed(self.seed, "targets"))
        counters = [0] * len(targets)
        index = 0
        for block in _blocks(len(targets), rng, shuffle=True):
            for slot in block:
                t = next(times)
                if self.duration_s is not None and t >= self.duration_s:
                    return
                k = counters[slot]
                if limit is not None and k >= limit:
                    return
                counters[slot] += 1
                yield PlannedRequest(index, targets[slot], order[k], t, self._is_warmup(k, t)), k
                index += 1

    def _open_parallel(self, targets: tuple[int, ...]) -> Iterator[tuple[PlannedRequest, int]]:
        """An independent arrival process per target, merged in time order."""
        rate = self.level_rate_rps or self.rate_rps
        assert rate is not None
        order = self._prompt_order()
        limit = self._per_target_limit()

        def one(slot: int) -> Iterator[tuple[float, int, int]]:
            seed = derive_seed(self.seed, "t", targets[slot])
            times = _ramped(_arrivals(rate, self.arrival, self.burstiness, seed), self.ramp_up_s)
            for k in itertools.count() if limit is None else range(limit):
                t = next(times)
                if self.duration_s is not None and t >= self.duration_s:
                    return
                yield t, slot, k

        merged = heapq.merge(*(one(s) for s in range(len(targets))))
        for index, (t, slot, k) in enumerate(merged):
            yield PlannedRequest(index, targets[slot], order[k], t, self._is_warmup(k, t)), k


class _PromptOrder:
    """Lazy seeded prompt sequence: pass p over the prompts is permutation p."""

    def __init__(self, n: int, seed: int) -> None:
        self.n = n
        self.seed = seed
        self._cache: dict[int, list[int]] = {}

    def __getitem__(self, k: int) -> int:
        cycle, pos = divmod(k, self.n)
        perm = self._cache.get(cycle)
        if perm is None:
            perm = list(range(self.n))
            random.Random(derive_seed(self.seed, "prompts", cycle)).shuffle(perm)
            if len(self._cache) > 4:  # streams of one scenario advance together
                self._cache.clear()
            self._cache[cycle] = perm
        return perm[pos]


def _blocks(n: int, rng: random.Random, *, shuffle: bool) -> Iterator[list[int]]:
    """Endless blocks of target slots 0..n-1, each a seeded permutation when shuffled."""
    base = list(range(n))
    while True:
        block = base.copy()
        if shuffle and n > 1:
            rng.shuffle(block)
        yield block


def _arrivals(rate: float, arrival: ArrivalKind, burstiness: float, seed: int) -> Iterator[float]:
    """Endless arrival times (s) from 0 with mean gap 1/rate."""
    rng = random.Random(seed)
    t = 0.0
    n = 0
    mean_gap = 1.0 / rate
    shape = 1.0 / burstiness
    while True:
        yield t
        n += 1
        if arrival == "constant":
            t = n * mean_gap  # multiply, not add: no accumulated rounding drift
        elif arrival == "poisson":
            t += rng.expovariate(rate)
        else:
            t += rng.gammavariate(shape, mean_gap / shape)


def _ramped(times: Iterator[float], ramp_up_s: float) -> Iterator[float]:
    """Arrival times under a linear ramp from rate 0 to the full rate over
    ``ramp_up_s``: the arrivals a full-rate process has by time u arrive by the t
    where the ramped process has as many (u = t^2 / 2T inside the ramp, t - T/2
    after it), so the gaps' shape is kept and the full rate holds from T on."""
    if ramp_up_s <= 0:
        yield from times
        return
    half = ramp_up_s / 2.0
    for u in times:
        yield (2.0 * ramp_up_s * u) ** 0.5 if u < half else u + half


def _format_level(value: float) -> str:
    return f"{value:g}"


@dataclass(frozen=True, slots=True)
class Plan:
    """Scenarios run one after another (all shards of scenario k end before k+1)."""

    scenarios: tuple[ScenarioPlan, ...]
    seed: int
    n_prompts: int
    n_targets: int


def build_plan(
    spec: RunSpec,
    n_prompts: int,
    n_targets: int,
    *,
    target_names: Sequence[str] | None = None,
) -> Plan:
    """The plan for ``spec.load`` over ``n_prompts`` prompts and ``n_targets`` targets.

    ``target_names`` (optional, same order as the targets) names sequential scenarios
    ("c=4 [llama-8b]"); without it they read "c=4 [t0]". Pure and deterministic.

    Raises:
        ConfigError: no prompts or no targets.
    """
    load = spec.load
    where = spec.source or "config"
    if n_prompts < 1:
        raise ConfigError(f"{where}: no prompts to send (prompts resolved to 0 entries)")
    if n_targets < 1:
        raise ConfigError(f"{where}: no targets (no [[model]] and no simulator tier)")
    names = list(target_names) if target_names is not None else [f"t{i}" for i in range(n_targets)]
    if load.mode == "closed":
        levels: list[tuple[str, int | None, float | None]] = [
            (f"c={c}", c, None) for c in load.concurrency
        ]
    else:
        levels = [(f"rate={_format_level(r)}/s", None, r) for r in load.rates]
    groups: list[tuple[tuple[int, ...], str]]
    if load.targets == "sequential":
        groups = [((t,), f" [{names[t]}]") for t in range(n_targets)]
    else:
        groups = [(tuple(range(n_targets)), "")]
    ramp_s = load.ramp_up_s if load.mode == "open" else 0.0
    duration = None if load.duration_s is None else ramp_s + load.warmup_s + load.duration_s
    prompt_seed = derive_seed(load.seed, "prompt-order")
    scenarios = []
    for level_name, conc, rate in levels:
        for targets, suffix in groups:
            name = level_name + suffix
            scenarios.append(
                ScenarioPlan(
                    name=name,
                    mode=load.mode,
                    concurrency=conc,
                    rate_rps=rate,
                    arrival=load.arrival,
                    burstiness=load.burstiness,
                    targets_mode=load.targets,
                    target_indices=targets,
                    n_prompts=n_prompts,
                    requests_per_target=(
                        load.max_requests if load.requests == "auto" else load.requests
                    ),
                    warmup_requests=load.warmup_requests,
                    warmup_s=ramp_s + load.warmup_s,
                    duration_s=duration,
                    seed=derive_seed(load.seed, "scenario", name),
                    prompt_seed=prompt_seed,
                    level_concurrency=conc,
                    level_rate_rps=rate,
                    slot_range=(0, conc) if conc is not None else None,
                    ramp_up_s=ramp_s,
                )
            )
    return Plan(tuple(scenarios), load.seed, n_prompts, n_targets)


def _shard_scenario(sc: ScenarioPlan, n: int) -> tuple[ScenarioPlan, ...]:
    if sc.shard_count != 1:
        raise ValueError(f"scenario {sc.name!r} is already a shard")
    if sc.mode == "closed":
        assert sc.concurrency is not None
        parts = split_evenly(sc.concurrency, n)
        lo = 0
        out = []
        for i, c in enumerate(parts):
            out.append(
                dataclasses.replace(
                    sc, concurrency=c, shard_index=i, shard_count=n, slot_range=(lo, lo + c)
                )
            )
            lo += c
        return tuple(out)
    assert sc.rate_rps is not None
    return tuple(
        dataclasses.replace(sc, rate_rps=sc.rate_rps / n, shard_index=i, shard_count=n)
        for i in range(n)
    )


@overload
def shard(plan: Plan, n: int) -> tuple[Plan, ...]: ...
@overload
def shard(plan: ScenarioPlan, n: int) -> tuple[ScenarioPlan, ...]: ...


def shard(plan: Plan | ScenarioPlan, n: int) -> tuple[Plan, ...] | tuple[ScenarioPlan, ...]:
    """Cut a plan (every scenario) or one scenario into ``n`` shards for n workers.

    Closed loop: the per-target concurrency is split as evenly as possible (10 over 3
    -> 4, 3, 3) and each shard sends the requests whose slot it owns, so shares follow
    concurrency; a shard may get 0 (``is_empty``: more workers than streams) and then
    yields nothing. Open loop: the rate is split evenly and request k of each target
    goes to shard k mod n, so the union of the shards' schedules is exactly the
    unsharded schedule (same times, same prompts). Request index sets are disjoint and
    cover the scenario. Returns exactly ``n`` parts; ``shard(plan, n)[i].scenarios[k]``
    is shard i of scenario k.

    Raises:
        ValueError: n < 1, or the input is already a shard.
    """
    if n < 1:
        raise ValueError("shard count must be >= 1")
    if isinstance(plan, ScenarioPlan):
        return _shard_scenario(plan, n)
    per = [_shard_scenario(sc, n) for sc in plan.scenarios]
    return tuple(
        Plan(tuple(parts[i] for parts in per), plan.seed, plan.n_prompts, plan.n_targets)
        for i in range(n)
    )
