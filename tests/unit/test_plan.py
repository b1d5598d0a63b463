"""The load plan: seeded, lazy, balanced over targets, shardable, honest arrivals."""

from __future__ import annotations

import itertools
import math
import pickle
from collections import Counter

import pytest

from tokrate.errors import ConfigError
from tokrate.load.plan import PlannedRequest, ScenarioPlan, build_plan, shard, split_evenly
from tokrate.spec.config_file import load_spec
from tokrate.spec.types import RunSpec


def spec(**load: object) -> RunSpec:
    return load_spec(None, {f"load.{k}": v for k, v in load.items()})


def reqs(sc: ScenarioPlan, n: int | None = None) -> list[PlannedRequest]:
    return list(sc.requests() if n is None else itertools.islice(sc.requests(), n))


def ks_exponential(samples: list[float], rate: float) -> float:
    """Kolmogorov-Smirnov statistic of ``samples`` against Exp(rate)."""
    xs = sorted(samples)
    n = len(xs)
    d = 0.0
    for i, x in enumerate(xs, start=1):
        f = 1.0 - math.exp(-rate * x)
        d = max(d, i / n - f, f - (i - 1) / n)
    return d


def ks_critical(n: int, alpha: float = 0.01) -> float:
    """Asymptotic one-sample KS critical value: sqrt(-ln(alpha/2) / 2) / sqrt(n)."""
    return math.sqrt(-math.log(alpha / 2) / 2) / math.sqrt(n)


def test_closed_sweep_names_counts_and_warmup() -> None:
    plan = build_plan(spec(concurrency=(1, 4), requests=5, warmup_requests=2), 3, 2)
    assert [s.name for s in plan.scenarios] == ["c=1", "c=4"]
    sc = plan.scenarios[1]
    assert (sc.concurrency, sc.streams, sc.rate_rps) == (4, 8, None)
    got = reqs(sc)
    assert [r.index for r in got] == list(range(14))
    per_target = Counter(r.target_index for r in got)
    assert per_target == {0: 7, 1: 7}
    assert sum(r.warmup for r in got) == 4
    for t in (0, 1):
        mine = [r for r in got if r.target_index == t]
        assert [r.warmup for r in mine] == [True, True] + [False] * 5
        assert all(r.scheduled_s is None for r in mine)
    assert [r.index for r in sc.requests(target=1)] == [r.index for r in got if r.target_index == 1]


def test_same_seed_same_plan_and_other_seed_differs() -> None:
    def sample(seed: int) -> list[tuple[int, int, float | None]]:
        sc = build_plan(spec(rates=(3.0,), requests=50, seed=seed), 10, 3).scenarios[0]
        return [(r.target_index, r.prompt_index, r.scheduled_s) for r in sc.requests()]

    assert sample(1) == sample(1)
    assert sample(1) != sample(2)
    # Pickled shards (what workers receive) give the same sequence.
    sc = build_plan(spec(rates=(3.0,), requests=50, seed=1), 10, 3).scenarios[0]
    assert reqs(pickle.loads(pickle.dumps(sc))) == reqs(sc)


def test_prompt_order_is_shared_by_targets_and_covers_every_prompt() -> None:
    sc = build_plan(spec(concurrency=(2,), requests=20), 7, 3).scenarios[0]
    got = reqs(sc)
    orders = [[r.prompt_index for r in got if r.target_index == t] for t in range(3)]
    assert orders[0] == orders[1] == orders[2]
    first_pass, second_pass = orders[0][:7], orders[0][7:14]
    assert sorted(first_pass) == sorted(second_pass) == list(range(7))
    assert first_pass != list(range(7))  # shuffled, not file order
    # Every scenario of the sweep asks the same prompts in the same order.
    other = build_plan(spec(concurrency=(2, 8), requests=20), 7, 3).scenarios[1]
    assert [r.prompt_index for r in other.requests(target=0)] == orders[0]


def test_interleaved_mixes_targets_in_balanced_seeded_blocks() -> None:
    got = reqs(build_plan(spec(concurrency=(1,), requests=30), 5, 3).scenarios[0])
    targets = [r.target_index for r in got]
    for b in range(0, len(targets), 3):
        assert sorted(targets[b : b + 3]) == [0, 1, 2]
    assert len({tuple(targets[b : b + 3]) for b in range(0, 90, 3)}) > 1  # not round robin
    assert targets[:3] != [0, 1, 2] or targets[3:6] != [0, 1, 2]


def test_sequential_one_scenario_per_level_and_target() -> None:
    plan = build_plan(
        spec(concurrency=(1, 2), requests=3, targets="sequential"),
        4,
        2,
        target_names=["small", "large"],
    )
    assert [s.name for s in plan.scenarios] == [
        "c=1 [small]",
        "c=1 [large]",
        "c=2 [small]",
        "c=2 [large]",
    ]
    assert [r.target_index for r in plan.scenarios[1].requests()] == [1, 1, 1]
    unnamed = build_plan(spec(concurrency=(1,), targets="sequential"), 1, 2)
    assert [s.name for s in unnamed.scenarios] == ["c=1 [t0]", "c=1 [t1]"]


def test_open_loop_rate_names_and_warmup_seconds() -> None:
    plan = build_plan(
        spec(rates=(0.5, 2), requests=None, duration_s=10, warmup_s=2, arrival="constant"), 3, 1
    )
    assert [s.name for s in plan.scenarios] == ["rate=0.5/s", "rate=2/s"]
    sc = plan.scenarios[1]
    assert sc.duration_s == 12.0 and sc.total_rate_rps == 2.0
    got = reqs(sc)
    assert [r.scheduled_s for r in got] == [i * 0.5 for i in range(24)]
    assert [r.warmup for r in got] == [True] * 4 + [False] * 20


def test_duration_bound_closed_loop_is_lazy_and_unbounded() -> None:
    sc = build_plan(spec(concurrency=(4,), duration_s=5), 3, 2).scenarios[0]
    assert sc.requests_per_target is None and sc.planned_per_target is None
    got = reqs(sc, 10_000)
    assert len(got) == 10_000 and got[-1].index == 9_999


def test_parallel_open_loop_gives_each_target_its_own_schedule() -> None:
    sc = build_plan(spec(rates=(5.0,), requests=200, targets="parallel"), 4, 2).scenarios[0]
    got = reqs(sc)
    times = [r.scheduled_s or 0.0 for r in got]
    assert times == sorted(times) and [r.index for r in got] == list(range(400))
    t0 = [r.scheduled_s for r in got if r.target_index == 0]
    t1 = [r.scheduled_s for r in got if r.target_index == 1]
    assert len(t0) == len(t1) == 200 and t0 != t1
    for ts in (t0, t1):  # each its own ~5/s process
        assert 200 / 5 * 0.8 < (ts[-1] or 0) < 200 / 5 * 1.25


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_poisson_inter_arrivals_pass_ks(seed: int) -> None:
    rate = 4.0
    sc = build_plan(spec(rates=(rate,), requests=2000, seed=seed), 1, 1).scenarios[0]
    times = [r.scheduled_s or 0.0 for r in sc.requests()]
    gaps = [b - a for a, b in itertools.pairwise(times)]
    assert ks_exponential(gaps, rate) < ks_critical(len(gaps))
    # The test has power: constant arrivals at the same mean fail it.
    const = build_plan(spec(rates=(rate,), requests=2000, arrival="constant"), 1, 1).scenarios[0]
    ctimes = [r.scheduled_s or 0.0 for r in const.requests()]
    cgaps = [b - a for a, b in itertools.pairwise(ctimes)]
    assert ks_exponential(cgaps, rate) > ks_critical(len(cgaps))


@pytest.mark.parametrize("burstiness", [0.25, 1.0, 4.0])
def test_gamma_mean_and_burstiness(burstiness: float) -> None:
    sc = build_plan(
        spec(rates=(10.0,), requests=4000, arrival="gamma", burstiness=burstiness), 1, 1
    ).scenarios[0]
    times = [r.scheduled_s or 0.0 for r in sc.requests()]
    gaps = [b - a for a, b in itertools.pairwise(times)]
    mean = sum(gaps) / len(gaps)
    var = sum((g - mean) ** 2 for g in gaps) / (len(gaps) - 1)
    assert mean == pytest.approx(0.1, rel=0.1)
    assert var / mean**2 == pytest.approx(burstiness, rel=0.2)  # CV^2 = burstiness


def test_split_evenly() -> None:
    assert split_evenly(10, 3) == (4, 3, 3)
    assert split_evenly(2, 4) == (1, 1, 0, 0)
    assert sum(split_evenly(1001, 7)) == 1001


@pytest.mark.parametrize(("conc", "n"), [(10, 3), (4, 4), (1, 3), (7, 2)])
def test_closed_shards_split_concurrency_and_partition_requests(conc: int, n: int) -> None:
    sc = build_plan(spec(concurrency=(conc,), requests=37, warmup_requests=3), 5, 2).scenarios[0]
    parts = shard(sc, n)
    assert len(parts) == n
    assert tuple(p.concurrency for p in parts) == split_evenly(conc, n)
    assert [p.is_empty for p in parts] == [c == 0 for c in split_evenly(conc, n)]
    whole = {r.index: r for r in sc.requests()}
    seen: list[int] = []
    for p in parts:
        mine = reqs(p)
        seen += [r.index for r in mine]
        assert all(whole[r.index] == r for r in mine)  # same request, not a re-draw
        if p.concurrency and len(mine) > 0:
            share = len(mine) / len(whole)
            assert share == pytest.approx(p.concurrency / conc, abs=0.1)
    assert sorted(seen) == sorted(whole)  # disjoint and covering
    assert len({p.shard_seed for p in parts}) == n


@pytest.mark.parametrize("targets", ["interleaved", "parallel"])
def test_open_shards_split_rate_and_keep_the_schedule(targets: str) -> None:
    sc = build_plan(spec(rates=(6.0,), requests=100, targets=targets), 3, 2).scenarios[0]
    parts = shard(sc, 4)
    assert [p.rate_rps for p in parts] == [1.5] * 4
    union = sorted((r for p in parts for r in p.requests()), key=lambda r: r.index)
    assert union == reqs(sc)


def test_shard_whole_plan_and_unbounded_shards() -> None:
    plan = build_plan(spec(concurrency=(2, 6), duration_s=3), 2, 1)
    parts = shard(plan, 3)
    assert len(parts) == 3 and all(len(p.scenarios) == 2 for p in parts)
    assert [p.scenarios[1].concurrency for p in parts] == [2, 2, 2]
    assert reqs(parts[2].scenarios[0]) == []  # c=2 over 3 workers: the third is idle
    first = reqs(parts[0].scenarios[1], 100)
    assert len(first) == 100  # lazily unbounded, still filtered
    with pytest.raises(ValueError, match="already a shard"):
        shard(parts[0].scenarios[0], 2)
    with pytest.raises(ValueError):
        shard(plan, 0)


def test_build_plan_needs_prompts_and_targets() -> None:
    with pytest.raises(ConfigError, match="no prompts"):
        build_plan(RunSpec(), 0, 1)
    with pytest.raises(ConfigError, match="no targets"):
        build_plan(RunSpec(), 1, 0)
