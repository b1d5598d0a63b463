"""Capacity search end to end over the real simulator (embedded, loopback).

Three dense tiers (2B, 4B, 8B parameters) whose KV cache is large per token, so each
extra stream lengthens every decode step by ~1 ms and the TPOT SLO binds at 10-20
streams: small enough for two shared cores, yet whole-stream resolution stays under
the 15% the issue asks for. The simulator's own answer comes from
:func:`tokrate.sim.capacity.closed_loop_capacity` (a replay of its batching engine) with
the prompt lengths the simulator counted. Goodput 0.8: the simulator's answer is the
same at 0.8 and 0.9 (its requests all meet or all miss, asserted below), while a
shared machine's scheduling hiccups make a few requests miss by a fraction of a
millisecond; 48 output tokens keep one late chunk from moving a TPOT by more than
1/47 of its lateness.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from tokrate.capacityinfo import CapacityResult
from tokrate.cli import main
from tokrate.run import RunResult, run_benchmark
from tokrate.sim.capacity import closed_loop_capacity
from tokrate.sim.server import SimConfig, build_state
from tokrate.spec import load_spec
from tokrate.store import load_run

pytestmark = pytest.mark.slow

TPOT_SLO_S = 0.020
OUTPUT_TOKENS = 48
SIZES = {"cap-2b": 2.0, "cap-4b": 4.0, "cap-8b": 8.0}

TIER = """
[[tier]]
name = "{name}"
params_b = {size}
layers = 200
kv_heads = 128
head_dim = 256
context_tokens = 256
"""

CONFIG = f"""
[load]
capacity = {{ start = 4, max_level = 64, verify = true, goodput = 0.8, confidence = 0.9 }}
[slo]
tpot_s = {TPOT_SLO_S}
[prompts]
max_tokens = {OUTPUT_TOKENS}
synthetic = {{ count = 8, input_tokens = 32 }}
[simulator]
tiers_file = "{{tiers}}"
[output]
formats = ["png"]
"""


@pytest.fixture(scope="module")
def searched(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[RunResult, Path]]:
    folder = tmp_path_factory.mktemp("capacity")
    tiers = "".join(TIER.format(name=n, size=s) for n, s in SIZES.items())
    (folder / "tiers.toml").write_text(tiers)
    (folder / "bench.toml").write_text(CONFIG.replace("{tiers}", str(folder / "tiers.toml")))
    spec = load_spec(folder / "bench.toml", {"output.dir": str(folder / "reports")})
    yield run_benchmark(spec), folder


def _sim_answers(folder: Path, input_tokens: int) -> dict[str, int]:
    timings = build_state(SimConfig(tiers_file=str(folder / "tiers.toml"))).timings
    out = {}
    for name, timing in timings.items():
        slo = {"tpot_s": TPOT_SLO_S}
        answer = closed_loop_capacity(timing, input_tokens, OUTPUT_TOKENS, slo, goodput=0.8)
        assert answer == closed_loop_capacity(timing, input_tokens, OUTPUT_TOKENS, slo)
        out[name] = answer
    return out


def test_found_capacity_is_the_simulators_own_answer_and_falls_with_size(
    searched: tuple[RunResult, Path],
) -> None:
    result, folder = searched
    assert result.exit_code == 0 and result.summary is not None
    capacity = result.summary.capacity
    assert capacity is not None and capacity.mode == "closed"
    run = load_run(result.run_dir)
    (input_tokens,) = set(run.records["input_tokens"].to_list())
    answers = _sim_answers(folder, int(input_tokens))
    found = {t.model: t for t in capacity.targets}
    for name, answer in answers.items():
        t = found[name]
        assert t.verdict == "found", (name, t.note)
        assert t.capacity is not None
        assert abs(t.capacity - answer) <= 0.15 * answer, (name, t.capacity, answer)
        assert t.limiting_slo == "tpot_s"
    by_size = [found[n].capacity or 0 for n in sorted(SIZES, key=SIZES.__getitem__)]
    assert by_size == sorted(by_size, reverse=True) and len(set(by_size)) == len(by_size)


def test_verification_meets_at_the_capacity_and_misses_at_twice_it(
    searched: tuple[RunResult, Path],
) -> None:
    result, _ = searched
    assert result.summary is not None and result.summary.capacity is not None
    for t in result.summary.capacity.targets:
        verify = [p for p in t.probes if p.phase == "verify"]
        assert [p.level for p in verify] == [t.capacity, 2 * (t.capacity or 0)]
        assert [p.verdict for p in verify] == ["meets", "misses"], (t.model, verify)
        at_capacity, at_twice = verify
        assert at_capacity.interval is not None and at_capacity.interval[0] >= 0.8
        assert at_twice.interval is not None and at_twice.interval[1] < 0.8
        # The limiting metric's percentiles say why: TPOT p50 over the SLO at twice.
        assert (at_twice.percentiles["p50"] or 0) > TPOT_SLO_S


def test_probes_are_scenarios_of_the_run_and_capacity_json_matches_the_summary(
    searched: tuple[RunResult, Path],
) -> None:
    result, _ = searched
    document = orjson.loads((result.run_dir / "capacity.json").read_bytes())
    summary_json = orjson.loads((result.run_dir / "summary.json").read_bytes())
    assert summary_json["capacity"] == document
    capacity = CapacityResult.from_dict(document)
    run = load_run(result.run_dir)
    probes = [p for t in capacity.targets for p in t.probes]
    assert [s.name for s in run.info.scenarios] == [p.scenario for p in probes]
    assert run.summary is not None
    for t in capacity.targets:
        for p in t.probes:
            group = run.summary.group(t.endpoint, t.model, p.scenario)
            assert group is not None and group.concurrency == p.level
            # Adaptive: a probe stops once decided, so a missing level sends few requests.
            assert 1 <= p.requests <= 400
    misses = [p.requests for p in probes if p.verdict == "misses"]
    meets = [p.requests for p in probes if p.verdict == "meets"]
    assert max(misses) < min(meets)


def test_report_shows_capacity_chart_and_cheapest_tier_table(
    searched: tuple[RunResult, Path],
) -> None:
    result, _ = searched
    md = (result.run_dir / "summary.md").read_text()
    assert "### Capacity" in md and "### Which tier serves N users at the SLO cheapest" in md
    assert (result.run_dir / "charts" / "capacity_vs_size.png").stat().st_size > 1000
    html = (result.run_dir / "report.html").read_text()
    assert "Capacity vs model size" in html


def _scaled_copy(run_dir: Path, dest: Path, factor: float) -> Path:
    """The run folder with every capacity multiplied by ``factor`` (a doctored baseline)."""
    shutil.copytree(run_dir, dest)
    data: dict[str, Any] = orjson.loads((dest / "summary.json").read_bytes())
    for t in data["capacity"]["targets"]:
        t["capacity"] = t["capacity"] * factor
    (dest / "summary.json").write_bytes(orjson.dumps(data))
    return dest


def test_compare_gates_on_a_capacity_drop(
    searched: tuple[RunResult, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    result, _ = searched
    run = str(result.run_dir)
    assert main(["compare", run, run, "--threshold", "capacity=-10%"]) == 0
    out = capsys.readouterr().out
    assert "3 unchanged" in out and "capacity" in out
    higher = _scaled_copy(result.run_dir, tmp_path / "higher", 1.5)
    assert main(["compare", str(higher), run, "--threshold", "capacity=-10%"]) == 1
    out = capsys.readouterr().out
    assert "REGRESSION" in out and "3 regressed" in out
    assert main(["compare", str(higher), run, "--threshold", "capacity=-50%"]) == 0
