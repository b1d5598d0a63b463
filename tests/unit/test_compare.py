"""compare_runs / check_baseline / `tokrate compare` on synthetic run folders.

The folders are built from seeded lognormal records (tests/helpers/runfolders.py), so
every planted change is known exactly. The simulator-based done-when tests live in
tests/loopback/test_compare_sim.py.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from helpers.runfolders import make_records, write_run

from tokrate.analysis.compare import compare_runs
from tokrate.analysis.stats import newcombe_interval
from tokrate.cli import main
from tokrate.errors import UsageError
from tokrate.finish.baseline import check_baseline
from tokrate.report.terminal.comparison_text import render_json, render_markdown
from tokrate.runfolder.comparison import COMPARISON_SCHEMA_VERSION, Comparison
from tokrate.runfolder.store import LATEST_GOOD
from tokrate.spec.thresholds import (
    DEFAULT_COMPARE_THRESHOLDS,
    Threshold,
    merge_thresholds,
    parse_threshold,
)


def _pair(tmp_path: Path, **current: object) -> tuple[Path, Path]:
    base = write_run(tmp_path, "base", make_records("base", seed=1))
    cur = write_run(tmp_path, "cur", make_records("cur", seed=2, **current))  # type: ignore[arg-type]
    return base, cur


def _verdicts(c: Comparison) -> dict[tuple[str, str], str]:
    return {(r.model, r.metric): r.verdict for r in c.results}


def test_planted_slowdown_flags_that_tier_only(tmp_path: Path) -> None:
    base, cur = _pair(tmp_path, slow={"sim-70b": 1.2})
    c = compare_runs(base, cur)
    v = _verdicts(c)
    for metric in ("tpot_p50", "e2e_p95", "decode_tps_p50"):
        assert v[("sim-70b", metric)] == "regressed", metric
    assert all(verdict != "regressed" for (model, _), verdict in v.items() if model == "sim-7b")
    assert c.regressed and c.exit_code == 1 and c.verdict == "regressed"
    tpot = next(r for r in c.results if r.model == "sim-70b" and r.metric == "tpot_p50")
    assert tpot.change == pytest.approx(0.2, abs=0.04)
    assert tpot.ci_low is not None and tpot.ci_high is not None and tpot.change is not None
    assert 0 < tpot.ci_low < tpot.change < tpot.ci_high


def test_speedup_is_improved_and_throughput_direction(tmp_path: Path) -> None:
    base, cur = _pair(tmp_path, slow={"sim-7b": 0.8})
    c = compare_runs(base, cur)
    v = _verdicts(c)
    assert v[("sim-7b", "tpot_p50")] == "improved"
    assert v[("sim-7b", "decode_tps_p50")] == "improved"
    tps = next(r for r in c.results if r.model == "sim-7b" and r.metric == "decode_tps_p50")
    assert tps.change is not None and tps.change > 0.2  # 1/0.8 - 1 = +25%
    assert not c.regressed and c.exit_code == 0


def test_identical_runs_give_no_false_alarm(tmp_path: Path) -> None:
    """Ten pairs with different seeds, same distributions: at most one false alarm."""
    alarms = 0
    for i in range(10):
        pair = tmp_path / str(i)
        base = write_run(pair, "a", make_records("a", seed=100 + i))
        cur = write_run(pair, "b", make_records("b", seed=200 + i))
        alarms += sum(r.verdict == "regressed" for r in compare_runs(base, cur).results)
    assert alarms <= 1


def test_missing_model_is_not_comparable(tmp_path: Path) -> None:
    base = write_run(tmp_path, "base", make_records("base", models=("sim-7b",), seed=1))
    cur = write_run(tmp_path, "cur", make_records("cur", seed=2))
    c = compare_runs(base, cur)
    rows = [r for r in c.results if r.model == "sim-70b"]
    assert rows and all(r.verdict == "not_comparable" for r in rows)
    assert all(r.reason == "model missing in baseline" for r in rows)
    assert rows[0].current is not None and rows[0].baseline is None
    assert c.exit_code == 0
    assert "sim-70b c=4: not comparable (model missing in baseline)" in render_markdown(c)
    # And the other way round.
    c2 = compare_runs(cur, base)
    assert {r.reason for r in c2.results if r.model == "sim-70b"} == {
        "model missing in current run"
    }


def test_different_load_and_prompts_are_not_comparable(tmp_path: Path) -> None:
    base = write_run(tmp_path, "base", make_records("base", seed=1))
    other_load = write_run(
        tmp_path, "c8", make_records("c8", seed=2, scenarios={"c=4": 8}), scenarios={"c=4": 8}
    )
    reasons = {r.reason for r in compare_runs(base, other_load).results}
    assert reasons == {"different load (scenario definition)"}
    other_prompts = write_run(tmp_path, "q", make_records("q", seed=2, prompt_prefix="q"))
    reasons = {r.reason for r in compare_runs(base, other_prompts).results}
    assert len(reasons) == 1 and reasons.pop().startswith("different prompts")
    cfg = {"load": {"mode": "open", "burstiness": 1.0}, "prompts": {"sets": ["chat"]}}
    open_loop = write_run(tmp_path, "o", make_records("o", seed=2), config=cfg)
    assert {r.reason for r in compare_runs(base, open_loop).results} == {
        "different load settings (load.mode: 'closed' vs 'open')"
    }
    c = compare_runs(base, open_loop)
    assert c.verdict == "not_comparable" and c.exit_code == 2  # nothing comparable


def test_too_few_samples(tmp_path: Path) -> None:
    """Every row needs its statistic's samples (a p95 MLPerf LoadGen's early-stopping
    minimum at 99%, 130); a 3x slowdown measured on 5 requests is inconclusive, never regressed: exit 3."""
    base = write_run(tmp_path, "base", make_records("base", seed=1, n=5))
    cur = write_run(tmp_path, "cur", make_records("cur", seed=2, n=5, slow={"sim-7b": 3.0}))
    c = compare_runs(base, cur)
    assert {r.verdict for r in c.results} == {"inconclusive"}
    assert all(r.reason.startswith("too few samples") for r in c.results)
    assert (c.verdict, c.exit_code) == ("inconclusive", 3)
    # 60 requests: the medians are judged, the p95s are not.
    base = write_run(tmp_path, "b60", make_records("b60", seed=1, n=60))
    cur = write_run(tmp_path, "c60", make_records("c60", seed=2, n=60, slow={"sim-7b": 3.0}))
    rows = {(r.model, r.metric): r for r in compare_runs(base, cur).results}
    assert rows[("sim-7b", "tpot_p50")].verdict == "regressed"
    p95 = rows[("sim-7b", "ttft_p95")]
    assert p95.verdict == "inconclusive"
    assert p95.reason == "too few samples (baseline 60, current 60; a p95 needs 130)"
    # 140 requests, 5 of them failed: the p95 of the 135 ok ones is judged.
    base = write_run(tmp_path, "b140", make_records("b140", seed=1, n=140))
    slow_failing = make_records(
        "c140", seed=2, n=140, slow={"sim-7b": 3.0}, error_every={"sim-7b": 28}
    )
    cur = write_run(tmp_path, "c140", slow_failing)
    rows = {(r.model, r.metric): r for r in compare_runs(base, cur).results}
    p95 = rows[("sim-7b", "ttft_p95")]
    assert (p95.n_current, p95.verdict) == (135, "regressed")
    assert p95.current_es is not None and p95.current_es >= p95.current


def test_error_rate_regression(tmp_path: Path) -> None:
    base, cur = _pair(tmp_path, error_every={"sim-7b": 6})
    c = compare_runs(base, cur)
    row = next(r for r in c.results if r.model == "sim-7b" and r.metric == "error_rate")
    assert row.verdict == "regressed"
    assert row.current == pytest.approx(34 / 200)
    assert row.change == pytest.approx(34 / 200)
    assert "sim-7b c=4 error_rate: +17.0pp [" in render_markdown(c)
    assert _verdicts(c)[("sim-70b", "error_rate")] == "unchanged"


def test_requests_the_client_never_sent_are_not_the_servers_error_rate(tmp_path: Path) -> None:
    """34 of sim-7b's 200 requests never left the client (``not_sent``): the server's
    error rate is unchanged, and history reads the same rate from records and summary."""
    from dataclasses import replace

    from tokrate.analysis.points import _from_records
    from tokrate.runfolder.loaded_run import load_run

    base = write_run(tmp_path, "base", make_records("base", seed=1))
    records = make_records("cur", seed=2, error_every={"sim-7b": 6})
    unsent = [
        replace(r, error_class="not_sent", http_status=None) if r.error_class == "http_5xx" else r
        for r in records
    ]
    cur = write_run(tmp_path, "cur", unsent)
    row = next(
        r
        for r in compare_runs(base, cur).results
        if r.model == "sim-7b" and r.metric == "error_rate"
    )
    assert (row.current, row.n_current, row.verdict) == (0.0, 200 - 34, "unchanged")
    rates = {
        (model, value)
        for _, model, _, metric, value, _ in _from_records(load_run(cur), ["error_rate"])
    }
    assert ("sim-7b", 0.0) in rates


def test_newcombe_matches_published_example() -> None:
    # Newcombe (1998), Stat Med 17:873, example (a): 56/70 vs 48/80 -> [0.0524, 0.3339].
    lo, hi = newcombe_interval(48, 80, 56, 70)
    assert lo == pytest.approx(0.0524, abs=1e-4)
    assert hi == pytest.approx(0.3339, abs=1e-4)
    lo, hi = newcombe_interval(0, 50, 0, 50)
    assert lo < 0 < hi


def test_seeded_and_reproducible(tmp_path: Path) -> None:
    base, cur = _pair(tmp_path, slow={"sim-70b": 1.05})
    assert render_json(compare_runs(base, cur)) == render_json(compare_runs(base, cur))


def test_markdown_verdict_line_first_and_json_schema(tmp_path: Path) -> None:
    base, cur = _pair(tmp_path, slow={"sim-70b": 1.2})
    c = compare_runs(base, cur)
    md = render_markdown(c).splitlines()
    assert md[0].startswith("### ❌ tokrate compare: REGRESSION (")
    line = next(x for x in md if x.startswith("- sim-70b c=4 tpot_p50: "))
    assert re.fullmatch(
        r"- sim-70b c=4 tpot_p50: 1\.[12]\dx slower \[1\.\d\d, 1\.\d\d\], regressed", line
    ), line
    # Regressions are listed before everything else.
    assert md[2].endswith(", regressed")
    doc = json.loads(render_json(c))
    assert doc["schema_version"] == COMPARISON_SCHEMA_VERSION
    assert doc["kind"] == "tokrate-comparison" and doc["verdict"] == "regressed"
    assert doc["counts"]["regressed"] >= 3
    row = doc["results"][0]
    assert set(row) == {
        "endpoint",
        "model",
        "scenario",
        "label",
        "metric",
        "unit",
        "direction",
        "baseline",
        "current",
        "change",
        "change_kind",
        "ci",
        "threshold",
        "threshold_source",
        "n_baseline",
        "n_current",
        "verdict",
        "reason",
        "confirmation",
        "baseline_es",
        "current_es",
        "noise_nights",
        "noise_limit",
        "baseline_runs",
    }
    assert doc["unconfirmed"] == [{"endpoint": "sim", "model": "sim-70b", "scenario": "c=4"}]
    assert doc["confirmed"] is False and doc["noise"] is None
    assert doc["baseline"]["warnings"] == [] and doc["current"]["warnings"] == []
    assert doc["settings"]["tail_confidence"] == 0.99


def test_parse_threshold() -> None:
    assert parse_threshold("ttft_p95=+20%") == Threshold("ttft_p95", 0.20, 0.001)
    assert parse_threshold("decode_tps_p50=-3%") == Threshold("decode_tps_p50", 0.03)
    assert parse_threshold("decode_tps_p50=3%") == Threshold("decode_tps_p50", 0.03)
    assert parse_threshold("error_rate=+2pp") == Threshold("error_rate", 0.02)
    assert parse_threshold("ttft_p99=off") == "ttft_p99"
    for bad in ("ttft_p95=-10%", "decode_tps_p50=+5%", "nope=+1%", "ttft_p95=10", "ttft_p95"):
        with pytest.raises(UsageError):
            parse_threshold(bad)
    merged = merge_thresholds([parse_threshold("ttft_p95=off"), parse_threshold("tpot_p99=+8%")])
    names = [t.metric for t in merged]
    assert "ttft_p95" not in names and "tpot_p99" in names
    assert len(merged) == len(DEFAULT_COMPARE_THRESHOLDS)


def test_thresholds_as_mapping(tmp_path: Path) -> None:
    base, cur = _pair(tmp_path, slow={"sim-70b": 1.2})
    c = compare_runs(base, cur, {"tpot_p50": "+50%", "ttft_p95": "off"})
    assert [t.metric for t in c.thresholds] == [
        "tpot_p50",
        "e2e_p95",
        "decode_tps_p50",
        "error_rate",
        "capacity",
    ]
    assert _verdicts(c)[("sim-70b", "tpot_p50")] == "unchanged"


def test_cli_exit_codes_and_formats(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base, cur = _pair(tmp_path, slow={"sim-70b": 1.2})
    assert main(["compare", str(base), str(base), "--format", "md"]) == 0
    assert capsys.readouterr().out.startswith("### ✅ tokrate compare: no regression")
    assert main(["compare", str(base), str(cur), "--format", "json"]) == 1
    assert json.loads(capsys.readouterr().out)["verdict"] == "regressed"
    out = tmp_path / "cmp.txt"
    assert main(["compare", str(base), str(cur), "-o", str(out)]) == 1
    assert out.read_text().startswith("tokrate compare: REGRESSION")
    # Loosened thresholds: the slowdown no longer counts.
    loose = ["--threshold", "tpot_p50=+50%", "--threshold", "e2e_p95=+50%"]
    loose += ["--threshold", "ttft_p95=+50%", "--threshold", "decode_tps_p50=-50%"]
    assert main(["compare", str(base), str(cur), "--format", "md", *loose]) == 0
    capsys.readouterr()
    assert main(["compare", str(base), str(cur), "--threshold", "ttft_p95=-5%"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "ttft_p95 gets worse when it goes +" in err
    assert main(["compare", str(tmp_path / "nope"), str(cur)]) == 2
    assert "not a run folder" in capsys.readouterr().err


def test_check_baseline_latest_good_pointer(tmp_path: Path) -> None:
    root = tmp_path / "reports"
    first = write_run(root, "r1", make_records("r1", seed=1))
    assert check_baseline(first, LATEST_GOOD, root) == 0
    pointer = root / LATEST_GOOD
    assert pointer.read_text() == "r1\n"
    assert "no baseline yet" in (first / "comparison.md").read_text()

    ok = write_run(root, "r2", make_records("r2", seed=2))
    assert check_baseline(ok, LATEST_GOOD, root) == 0
    assert pointer.read_text() == "r2\n"
    assert json.loads((ok / "comparison.json").read_text())["baseline"]["run_id"] == "r1"

    bad = write_run(root, "r3", make_records("r3", seed=3, slow={"sim-70b": 1.3}))
    assert check_baseline(bad, LATEST_GOOD, root) == 1
    assert pointer.read_text() == "r2\n"  # a failing run never becomes latest-good
    assert (bad / "comparison.md").read_text().startswith("### ❌")

    interrupted = write_run(root, "r4", make_records("r4", seed=4), status="interrupted")
    assert check_baseline(interrupted, LATEST_GOOD, root) == 0
    assert pointer.read_text() == "r2\n"  # nor does an interrupted one

    # An explicit folder: compared, pointer untouched.
    assert check_baseline(bad, str(first), root) == 1
    assert pointer.read_text() == "r2\n"

    # The check judges against the benchmark's history, not the pointer: a pointer
    # naming a folder that is gone is repaired by the next good night.
    pointer.write_text("gone\n")
    assert check_baseline(ok, LATEST_GOOD, root) == 0
    assert pointer.read_text() == "r2\n"


def test_both_conditions_are_needed(tmp_path: Path) -> None:
    # Past the threshold but a wide interval (very noisy requests): not significant.
    base = write_run(tmp_path, "b", make_records("b", seed=1, noise=0.8))
    cur = write_run(tmp_path, "c", make_records("c", seed=2, noise=0.8, slow={"sim-7b": 1.15}))
    row = next(
        r for r in compare_runs(base, cur).results if (r.model, r.metric) == ("sim-7b", "ttft_p95")
    )
    assert row.change is not None and row.change > 0.10
    assert row.ci_low is not None and row.ci_low < 0
    assert (row.verdict, row.reason) == (
        "unchanged",
        "worse than the threshold but not significant",
    )
    # Significant (the interval excludes 0) but within the threshold: unchanged.
    base = write_run(tmp_path, "b2", make_records("b2", seed=1))
    cur = write_run(tmp_path, "c2", make_records("c2", seed=2, slow={"sim-7b": 1.03}))
    row = next(
        r for r in compare_runs(base, cur).results if (r.model, r.metric) == ("sim-7b", "e2e_p95")
    )
    assert row.ci_low is not None and row.ci_low > 0
    assert (row.verdict, row.reason) == ("unchanged", "within +10%")


def test_block_bootstrap_keeps_a_shared_stall_together() -> None:
    """Four neighbouring requests (in flight together at c=4) hit by one stall: the
    block bootstrap sees one event, so its p95 interval is wider than the i.i.d. one,
    and every replicate keeps the block's values (circular, so no value is dropped)."""
    import numpy as np

    from tokrate.analysis.stats import block_bootstrap as _bootstrap_stats

    values = np.full(60, 0.030) + np.linspace(0, 0.003, 60)
    values[20:24] = 0.090
    spread = {}
    for block in (1, 4):
        reps = _bootstrap_stats(values, 0.95, 4000, block, np.random.default_rng(7))
        lo, hi = np.quantile(reps, [0.025, 0.975])
        spread[block] = (lo, hi)
    assert spread[4][0] < spread[1][0]  # more replicates without the stall
    assert spread[4][1] == pytest.approx(0.090)


@pytest.mark.parametrize("q", [0.5, 0.95, 0.99, 0.0, 1.0, None])
def test_block_bootstrap_replicates_are_numpys_statistic_of_the_drawn_blocks(
    q: float | None,
) -> None:
    """Each replicate is, bit for bit, numpy's quantile (or mean) of the values its
    blocks drew: circular runs of ``block`` neighbours from the same random starts,
    whatever path computes it (ranks sorted, or numpy's own for ties, a NaN, an inf,
    a single value or too many values to rank)."""
    import numpy as np

    from tokrate.analysis.stats import block_bootstrap

    rng = np.random.default_rng(3)
    samples = {
        "lognormal": rng.lognormal(size=203),
        "ties": rng.integers(0, 4, size=57).astype(float),
        "one": np.array([0.25]),
        "nan": np.array([0.1, np.nan, 0.3, 0.2, 0.5]),
        "inf": np.array([0.1, np.inf, 0.3, 0.2, 0.5, 0.4]),
        "over 16 bits": rng.lognormal(size=40_000),
    }
    for name, values in samples.items():
        n = values.size
        for block in (1, 4):
            resamples = 3 if n > 1000 else 500
            draw = np.random.default_rng(9)
            blk = min(block, n)
            n_blocks = -(-n // blk)
            starts = draw.integers(0, n, size=(resamples, n_blocks, 1))
            idx = ((starts + np.arange(blk)) % n).reshape(resamples, -1)[:, :n]
            # inf - inf between two drawn infs: NaN, in numpy as in the bootstrap.
            with np.errstate(invalid="ignore"):
                got = block_bootstrap(values, q, resamples, block, np.random.default_rng(9))
                want = (
                    values[idx].mean(axis=1) if q is None else np.quantile(values[idx], q, axis=1)
                )
            assert np.array_equal(got, want, equal_nan=True), (name, block, q)


def test_exact_markdown_and_table(tmp_path: Path) -> None:
    """Noise-free records (every request identical) make every interval exact."""
    import io

    from rich.console import Console

    from tokrate.report.terminal.comparison_text import render_table

    one = {"models": ("sim-70b",), "n": 200, "noise": 0.0}
    base = write_run(tmp_path, "base", make_records("base", **one))  # type: ignore[arg-type]
    cur = write_run(tmp_path, "cur", make_records("cur", slow={"sim-70b": 1.25}, **one))  # type: ignore[arg-type]
    c = compare_runs(base, cur)
    assert render_markdown(c) == (
        "### ❌ tokrate compare: REGRESSION (4 regressed, 0 improved, 1 unchanged, 0 "
        "inconclusive, 0 not comparable) — cur vs baseline base\n"
        "\n"
        "- sim-70b c=4 ttft_p95: 1.25x slower [1.25, 1.25], regressed\n"
        "- sim-70b c=4 tpot_p50: 1.25x slower [1.25, 1.25], regressed\n"
        "- sim-70b c=4 e2e_p95: 1.25x slower [1.25, 1.25], regressed\n"
        "- sim-70b c=4 decode_tps_p50: 1.25x slower [1.25, 1.25], regressed\n"
        "\n"
        "| target | metric | baseline | current | change [95% CI] | threshold | verdict"
        " | early-stopping estimate (99%) |\n"
        "|---|---|---:|---:|---|---:|---|---:|\n"
        "| sim-70b c=4 | ttft_p95 | 120 ms | 150 ms | 1.25x slower [1.25, 1.25] | +10% | regressed | 120 → 150 ms |\n"
        "| sim-70b c=4 | tpot_p50 | 45.0 ms | 56.2 ms | 1.25x slower [1.25, 1.25] | +5% | regressed | — |\n"
        "| sim-70b c=4 | e2e_p95 | 1,515 ms | 1,894 ms | 1.25x slower [1.25, 1.25] | +10% | regressed | 1,515 → 1,894 ms |\n"
        "| sim-70b c=4 | decode_tps_p50 | 22.2 tok/s | 17.8 tok/s | 1.25x slower [1.25, 1.25] | -5% | regressed | — |\n"
        "| sim-70b c=4 | error_rate | 0.0% | 0.0% | +0.0pp [-1.9, +1.9] | +1pp | unchanged | — |\n"
        "\n"
        "Changes are ratios of current to baseline, turned to read ≥ 1 with the word that"
        ' says which way ("1.25x slower", "1.10x faster"), with their 95% bootstrap'
        " interval in the same form ([1.20, 1.31]; 2000 resamples, seed 0); rates are"
        " differences in percentage points with Newcombe's 95% interval. A regression"
        ' reads "slower" (a rate: higher errors, lower passes), with the change past its'
        " threshold and the whole interval above 1 (above 0 points for a rate).\n"
    )
    buf = io.StringIO()
    render_table(c, Console(file=buf, width=80, color_system=None))
    assert buf.getvalue() == (
        "tokrate compare: REGRESSION — cur vs baseline base\n"
        "4 regressed, 0 improved, 1 unchanged, 0 inconclusive, 0 not comparable\n"
        "thresholds: ttft_p95 +10%, tpot_p50 +5%, e2e_p95 +10%, decode_tps_p50 -5%, \n"
        "error_rate +1pp\n"
        "target / metric   baseline → current  change [95% CI]            verdict  \n"
        "──────────────────────────────────────────────────────────────────────────\n"
        "sim-70b c=4                                                               \n"
        "  ttft_p95              120 → 150 ms  1.25x slower [1.25, 1.25]  regressed\n"
        "  tpot_p50            45.0 → 56.2 ms  1.25x slower [1.25, 1.25]  regressed\n"
        "  e2e_p95           1,515 → 1,894 ms  1.25x slower [1.25, 1.25]  regressed\n"
        "  decode_tps_p50   22.2 → 17.8 tok/s  1.25x slower [1.25, 1.25]  regressed\n"
        "  error_rate             0.0% → 0.0%  +0.0pp [-1.9, +1.9]        unchanged\n"
        "early-stopping estimates (99%): sim-70b c=4 ttft_p95 120 → 150 ms; sim-70b c=4 \n"
        "e2e_p95 1,515 → 1,894 ms\n"
    ), buf.getvalue()


def test_zero_values_render_without_a_ratio(tmp_path: Path) -> None:
    """A TPOT of 0 (every token in one chunk) has no finite ratio: plain change shown."""
    import dataclasses

    from tokrate.report.terminal.comparison_text import describe_change

    base = write_run(tmp_path, "b", make_records("b", seed=1, models=("sim-7b",)))
    zero = [
        dataclasses.replace(r, tpot_s=0.0) for r in make_records("c", seed=2, models=("sim-7b",))
    ]
    cur = write_run(tmp_path, "c", zero)
    c = compare_runs(base, cur)
    row = next(r for r in c.results if r.metric == "tpot_p50")
    assert describe_change(row).startswith("-100% [")
    assert "tpot_p50" in render_markdown(c)


def test_embedded_simulator_clock_must_match(tmp_path: Path) -> None:
    def sim_run(name: str, time_scale: float) -> Path:
        folder = write_run(tmp_path, name, make_records(name, seed=len(name)))
        run = json.loads((folder / "run.json").read_text())
        run["config"]["simulator"] = {"time_scale": time_scale}
        for target in run["targets"]:
            target["simulated"] = True
        (folder / "run.json").write_text(json.dumps(run))
        return folder

    base, same, faster = sim_run("a", 5.0), sim_run("bb", 5.0), sim_run("ccc", 20.0)
    assert compare_runs(base, same).verdict == "ok"
    assert {r.reason for r in compare_runs(base, faster).results} == {
        "different load settings (simulator.time_scale: 5.0 vs 20.0)"
    }


def test_identical_values_read_as_no_change(tmp_path: Path) -> None:
    """The same records twice: every ratio prints 1.00, which has no direction, so
    no row reads "1.00x slower" or "1.00x faster" (issue 44)."""
    from tokrate.report.terminal.comparison_text import describe_change

    records = make_records("b", seed=1, models=("sim-7b",))
    base = write_run(tmp_path, "b", records)
    cur = write_run(tmp_path, "c", make_records("b", seed=1, models=("sim-7b",)))
    c = compare_runs(base, cur)
    shown = [
        describe_change(r)
        for r in c.results
        if r.change is not None and r.ci_low is not None and r.metric != "error_rate"
    ]
    assert shown and all(s.startswith("1.00x, no change to two digits [") for s in shown), shown
