"""Capacity search pieces without load: the bracket/bisect search driven by a known
answer, the config, the result types' JSON, comparing capacities, the simulator's own
answer, and the open-loop ramp-up and in-flight cap settings."""

from __future__ import annotations

import dataclasses
import itertools
from pathlib import Path

import pytest

from tokrate.analysis.capacity_compare import compare_capacities
from tokrate.cli import main
from tokrate.errors import ConfigError, RunFolderError
from tokrate.load.capacity_search import ProbeFn, _note, search, verify_capacity
from tokrate.load.plan import build_plan
from tokrate.runfolder.capacity_result import (
    CapacityProbe,
    CapacityResult,
    ProbePhase,
    TargetCapacity,
    capacity_from_json,
)
from tokrate.runfolder.jsondoc import to_json
from tokrate.runfolder.proportions import wilson_interval
from tokrate.runfolder.summary import Summary, summary_from_json
from tokrate.sim.capacity_answer import closed_loop_capacity, replay_closed_loop
from tokrate.sim.server import SimConfig, build_state
from tokrate.spec.config_file import load_spec
from tokrate.spec.thresholds import parse_threshold
from tokrate.spec.types import CapacitySpec, LoadSpec, RunSpec


def _oracle(limit: float, verdicts: dict[float, str] | None = None) -> tuple[ProbeFn, list[float]]:
    """A probe that meets at or below ``limit``; ``verdicts`` overrides some levels."""
    asked: list[float] = []

    def probe(level: float, phase: ProbePhase) -> CapacityProbe:
        asked.append(level)
        verdict = (verdicts or {}).get(level) or ("meets" if level <= limit else "misses")
        return CapacityProbe(level, phase, f"c={level:g}", 40, 40, (0.9, 1.0), verdict)

    return probe, asked


def _always() -> bool:
    return True


def test_closed_loop_search_brackets_by_doubling_then_bisects_to_one_stream() -> None:
    probe, asked = _oracle(13)
    found = search(probe, CapacitySpec(), "closed", _always)
    assert (found.capacity, found.verdict, found.bracket) == (13, "found", (13, 14))
    assert asked == [1, 2, 4, 8, 16, 12, 14, 13]
    assert [p.phase for p in found.probes] == ["bracket"] * 5 + ["bisect"] * 3


def test_search_verdicts_at_the_edges() -> None:
    at_max = search(_oracle(1e9)[0], CapacitySpec(max_level=8), "closed", _always)
    assert (at_max.capacity, at_max.verdict, at_max.bracket) == (8, "at_max", None)
    none = search(_oracle(0)[0], CapacitySpec(), "closed", _always)
    assert (none.capacity, none.verdict) == (None, "none")
    below_start = search(_oracle(5)[0], CapacitySpec(start=16), "closed", _always)
    assert (below_start.capacity, below_start.verdict) == (5, "found")


def test_an_undecided_bound_is_never_counted_as_meeting() -> None:
    probe, _ = _oracle(13, {14.0: "undecided", 16.0: "undecided"})
    found = search(probe, CapacitySpec(), "closed", _always)
    assert (found.capacity, found.verdict, found.bracket) == (13, "undecided", (13, 14))


def test_a_client_bound_probe_stops_the_search_with_a_lower_bound() -> None:
    probe, asked = _oracle(100, {16.0: "client_bound"})
    found = search(probe, CapacitySpec(), "closed", _always)
    assert (found.capacity, found.verdict) == (8, "client_bound")
    assert asked[-1] == 16


def test_the_budget_stops_the_search() -> None:
    probe, asked = _oracle(100)
    budget = iter([True, True, True, False])
    found = search(probe, CapacitySpec(), "closed", lambda: next(budget))
    assert (found.capacity, found.verdict, len(asked)) == (4, "budget", 3)


def test_open_loop_search_bisects_the_rate_to_the_resolution() -> None:
    probe, _ = _oracle(7.3)
    found = search(probe, CapacitySpec(resolution=0.05), "open", _always)
    assert found.verdict == "found" and found.bracket is not None
    lo, hi = found.bracket
    assert lo <= 7.3 < hi and (hi - lo) <= 0.05 * lo
    assert found.capacity == lo


def test_closed_loop_bisects_to_the_resolution_above_twenty_streams() -> None:
    probe, asked = _oracle(232)
    found = search(probe, CapacitySpec(resolution=0.05), "closed", _always)
    assert (found.capacity, found.verdict, found.bracket) == (232, "found", (232, 240))
    assert asked[-4:] == [192, 224, 240, 232]  # stops when 240 - 232 <= 5% of 232
    exact = search(_oracle(232)[0], CapacitySpec(resolution=0.001), "closed", _always)
    assert (exact.capacity, exact.bracket) == (232, (232, 233))


def _verifying(limit: float, misses_at: set[float]) -> tuple[ProbeFn, list[float]]:
    """An oracle whose verification probes at ``misses_at`` miss (noise at the edge)."""
    asked: list[float] = []

    def probe(level: float, phase: ProbePhase) -> CapacityProbe:
        asked.append(level)
        ok = level <= limit and not (phase == "verify" and level in misses_at)
        return CapacityProbe(
            level, phase, f"c={level:g}", 40, 40, (0.9, 1.0), "meets" if ok else "misses"
        )

    return probe, asked


def test_a_capacity_that_misses_its_verification_drops_to_the_next_level_that_met() -> None:
    probe, asked = _verifying(232, {232.0})
    found = verify_capacity(probe, search(probe, CapacitySpec(), "closed", _always), True)
    assert (found.capacity, found.verdict, found.bracket) == (224, "found", (224, 232))
    assert asked[-3:] == [232, 224, 448]
    assert [p.verdict for p in found.probes if p.phase == "verify"] == [
        "misses",
        "meets",
        "misses",
    ]
    assert "did not meet at c=232, so the capacity is c=224" in _note(found, "c")
    never = _verifying(232, {232.0, 224.0, 192.0})[0]
    unverified = verify_capacity(never, search(never, CapacitySpec(), "closed", _always), True)
    assert (unverified.capacity, unverified.verdict) == (192, "unverified")
    assert [p.level for p in unverified.probes if p.phase == "verify"] == [232, 224, 192]


def test_wilson_interval_decides_at_the_sample_sizes_the_docs_quote() -> None:
    # 35 of 35 meeting shows >= 90% at 95% confidence; 34 do not yet.
    assert wilson_interval(35, 35)[0] >= 0.9 > wilson_interval(34, 34)[0]
    assert wilson_interval(0, 10)[1] < 0.9


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "bench.toml"
    path.write_text(text)
    return path


def test_capacity_config_and_its_errors(tmp_path: Path) -> None:
    spec = load_spec(
        _write(tmp_path, "[load]\ncapacity = { goodput = 0.8, verify = true }\n[slo]\nttft_s = 1\n")
    )
    assert spec.load.capacity == CapacitySpec(goodput=0.8, verify=True)
    cases = {
        "[load]\ncapacity = {}\n": "needs at least one \\[slo\\] limit",
        "[load]\ncapacity = { goodput = 2 }\n[slo]\nttft_s = 1\n": "load.capacity.goodput",
        "[load]\ncapacity = { min_requests = 50, max_requests = 10 }\n[slo]\nttft_s = 1\n": (
            "min_requests"
        ),
        "[load]\ncapacity = { start = 1.5 }\n[slo]\nttft_s = 1\n": "whole number",
        "[load]\nramp_up_s = 5\n": "open loop only",
        "[load]\nmax_in_flight = 0\n": "load.max_in_flight",
    }
    for text, message in cases.items():
        with pytest.raises(ConfigError, match=message):
            load_spec(_write(tmp_path, text))


def test_capacity_without_slo_is_one_line_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = _write(tmp_path, "[prompts]\nmax_tokens = 4\n")
    assert main(["run", "-c", str(config), "--capacity", "--output-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "needs at least one [slo] limit" in err[0]


def _result(capacity: float | None, verdict: str = "found") -> CapacityResult:
    probe = CapacityProbe(
        4.0,
        "bisect",
        "c=4 [m]",
        40,
        39,
        (0.87, 0.99),
        "meets",
        "tpot_s",
        {"tpot_s": 0.975},
        {"p50": 0.01, "p90": 0.012, "p99": None},
    )
    target = TargetCapacity(
        "sim", "m", capacity, verdict, "tpot_s", (4.0, 5.0), "n", probes=(probe,)
    )
    return CapacityResult("closed", 0.9, 0.95, {"tpot_s": 0.02, "ttft_s": None}, (target,))


def test_capacity_result_round_trips_and_old_summaries_still_load() -> None:
    result = _result(4.0)
    assert capacity_from_json(to_json(result)) == result
    summary = Summary("r", (), capacity=result)
    assert summary_from_json(to_json(summary)) == summary
    old = {"schema_version": summary.schema_version, "run_id": "r", "groups": []}
    assert summary_from_json(old).capacity is None
    bad = to_json(result) | {"mode": "sideways"}
    with pytest.raises(
        RunFolderError, match=r"mode must be one of 'closed', 'open', got 'sideways'"
    ):
        capacity_from_json(bad)
    bad = to_json(result)
    bad["targets"][0]["probes"][0]["verdict"] = "maybe"
    with pytest.raises(RunFolderError, match=r"targets\[0\]: probes\[0\]: verdict 'maybe'"):
        capacity_from_json(bad)


def test_compare_capacities_gates_on_the_threshold() -> None:
    limit = 0.10
    assert [c.verdict for c in compare_capacities(_result(10), _result(8.9), limit)] == [
        "regressed"
    ]
    assert [c.verdict for c in compare_capacities(_result(10), _result(9.5), limit)] == [
        "unchanged"
    ]
    assert [c.verdict for c in compare_capacities(_result(10), _result(12), limit)] == ["improved"]
    bound = compare_capacities(_result(10), _result(12, "client_bound"), limit)[0]
    assert bound.verdict == "not_comparable" and "lower bound" in bound.reason
    other_slo = dataclasses.replace(_result(10), slo={"tpot_s": 0.05})
    assert compare_capacities(other_slo, _result(10), limit)[0].reason == "other SLOs"
    assert compare_capacities(None, None, limit) == []
    threshold = parse_threshold("capacity=-10%")
    assert not isinstance(threshold, str) and threshold.limit == pytest.approx(0.10)


def test_the_simulators_answer_follows_its_batching_model() -> None:
    timing = build_state(SimConfig()).timings["sim-7b"]
    # c = 1: the step is one decode of the weights alone (plus the KV of 48 tokens).
    (one,) = replay_closed_loop(timing, 1, 32, 16, requests=1)
    assert one.tpot_s == pytest.approx(timing.decode_step_s(1, 32 + 8), rel=0.02)
    assert one.ttft_s == pytest.approx(timing.prefill_s(32) + timing.decode_step_s(1, 32))
    c = closed_loop_capacity(timing, 32, 16, {"tpot_s": 0.0095})
    slow = replay_closed_loop(timing, c + 1, 32, 16, requests=13 * (c + 1))[c + 1 :]
    fast = replay_closed_loop(timing, c, 32, 16, requests=13 * c)[c:]
    assert all((r.tpot_s or 0) <= 0.0095 for r in fast)
    assert not all((r.tpot_s or 0) <= 0.0095 for r in slow)


def test_open_loop_ramp_up_climbs_to_the_rate_and_is_warm_up() -> None:
    load = LoadSpec(mode="open", rates=(10.0,), arrival="constant", requests=60, ramp_up_s=4.0)
    (scenario,) = build_plan(RunSpec(load=load), 4, 1).scenarios
    times = [(pr.scheduled_s or 0.0, pr.warmup) for pr in scenario.requests()]
    ramp = [t for t, _ in times if t < 4.0]
    # A linear ramp from 0 to 10/s over 4 s holds 10 x 4 / 2 = 20 arrivals.
    assert len(ramp) == 20
    assert all(w for t, w in times if t < 4.0) and not any(w for t, w in times if t >= 4.0)
    gaps = [b - a for (a, _), (b, _) in itertools.pairwise(times[20:])]
    assert gaps == pytest.approx([0.1] * len(gaps))
    assert times[1][0] - times[0][0] > 0.5  # the first gaps are long: the rate starts near 0


def test_a_capacity_whose_double_meets_too_is_non_monotone() -> None:
    probe, asked = _oracle(13, {26.0: "meets"})
    found = verify_capacity(probe, search(probe, CapacitySpec(), "closed", _always), True)
    assert (found.capacity, found.verdict) == (13, "non_monotone")
    assert asked[-2:] == [13, 26]
    assert "c=26 met too" in _note(found, "c")
    for verdict in ("non_monotone", "unverified"):
        (row,) = compare_capacities(_result(13), _result(13, verdict), 0.1)
        assert row.verdict == "not_comparable", verdict
