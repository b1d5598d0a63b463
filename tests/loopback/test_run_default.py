"""The embedded default: `tokrate run` with nothing else, at real time, runs clean."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from helpers.default_run import DefaultRun

from tokrate.cli import main
from tokrate.load.worker.looplag import MAX_THRESHOLD_MS, P99_THRESHOLD_MS
from tokrate.runfolder.jsondoc import to_json
from tokrate.runfolder.loaded_run import load_run
from tokrate.runfolder.routing import ROUTING_LAYOUT
from tokrate.sim.model import default_tiers


@pytest.mark.slow  # the real default run: six tiers at c=1 and c=8 in real time (~40 s)
def test_embedded_default_benchmarks_every_tier_cleanly(shared_default_run: DefaultRun) -> None:
    # The run is shared with the Chromium checks of its report (helpers.default_run).
    default = shared_default_run
    rc, out, err, run_dir = default.exit_code, default.out, default.err, default.run_dir
    stalls, waits = default.stalls, default.waits
    assert rc == 0, err
    assert len(default.started) == 1  # the simulator ran in its own process
    run = load_run(run_dir)
    tiers = {tier.name for tier in default_tiers()}
    assert set(run.records["model"].unique().to_list()) == tiers
    assert set(run.records["scenario"].unique().to_list()) == {"c=1", "c=8"}
    assert to_json(run.info)["status"] == "complete" and to_json(run.info)["counts"]["error"] == 0
    assert to_json(run.info)["config"]["simulator"]["time_scale"] == 1.0  # honest real time
    assert all(t["simulated"] for t in to_json(run.info)["targets"])
    assert (run_dir / "report.html").exists()
    # The default report shows the simulator's own queue (its /metrics, scraped).
    (scrape,) = run.info.server_metrics
    assert scrape.endpoint == "sim" and scrape.failures == 0 and scrape.samples > 0
    assert run.server_metrics is not None and (run_dir / "charts" / "server_load.png").exists()
    # Clean: no warning in the terminal, run.json or the report about its own design.
    # An event-loop lag warning is a fact about the machine, not the design: on a
    # machine that other processes keep busy (load average at or above one core) the
    # client may honestly be late, and saying so is right; on a quiet one it must not be.
    # A quiet machine still has moments that are not: a stall past the max threshold
    # (52.5 ms once, in a fresh clone's full suite with the load average under one; the
    # usual worst is 2-3 ms) is the machine's when the kernel counted the run and its
    # simulator waiting for a CPU inside it for all but the threshold: the loop could
    # not run then, whatever its design.
    warnings = list(to_json(run.info)["warnings"])
    weighed = [((woke - due) / 1e6, waits.within(due, woke) / 1e6) for due, woke in stalls]
    unexplained = [
        f"{lag:.1f} ms (CPU wait inside it {wait:.1f} ms)"
        for lag, wait in weighed
        if lag - wait > MAX_THRESHOLD_MS
    ]
    # Only the max criterion is weighed so: a p99 over its threshold is lag on one
    # wake-up in a hundred, which a stall or two cannot make.
    scenarios = to_json(run.info)["loop_lag"]["scenarios"]
    by_stalls_alone = all(s["p99_ms"] <= P99_THRESHOLD_MS for s in scenarios if s["exceeded"])
    machine_made = bool(stalls) and not unexplained and by_stalls_alone
    if os.getloadavg()[0] >= 1.0 or machine_made:
        warnings = [w for w in warnings if "event-loop lag" not in w]
        err = "\n".join(line for line in err.splitlines() if "event-loop lag" not in line)
    assert "warning" not in err, f"loop stalls not explained by CPU waits: {unexplained}"
    assert warnings == [], f"loop stalls not explained by CPU waits: {unexplained}"
    summary_md = (run_dir / "summary.md").read_text()
    if not to_json(run.info)["warnings"]:
        assert "**Warnings**" not in summary_md
    # Demo SLOs: the tier pick is a real decision (the big tiers miss, small ones pass).
    assert to_json(run.info)["slo"]["ttft_s"] == 0.5 and to_json(run.info)["slo"]["tpot_s"] == 0.03
    # One verdict (issue 24 + 28): the tier pick holds each checked task to the pass-rate
    # bar, so it ends the terminal output and opens summary.md, and nothing else picks.
    # Deterministic by design: the answers are the simulator's seeded draws, and the
    # task mix per model and level is the seeded shuffle of the bundled sets, so only
    # the latency parts could move with the machine's load (the small tiers' margin to
    # the demo SLOs is wide).
    head = " ".join(summary_md.split("\n- **run**")[0].replace("\\", "").split())
    verdict = out[out.index("At c=8 each model") :]
    flat = " ".join(verdict.split())
    # 30 requests per model and level cannot decide per task: said once, with the count.
    assert flat.count("as few as 4 requests of a task") == 1
    assert "(--requests 150)" in flat
    sentences = [" ".join(s.split()) for s in verdict.split("\nFor ")[1:]]
    by_task = {s.split(" pick ")[0].split(" there ")[0].split(" no tier")[0]: s for s in sentences}
    assert set(by_task) == {"chat, code and summarization", "classification", "extraction"}
    # No checks: the smallest tier fast enough, on all tasks' requests together.
    assert by_task["chat, code and summarization"].startswith(
        "chat, code and summarization pick sim-1b: meets TTFT ≤ 500 ms and TPOT ≤ 30 ms "
        "at c=8 in 30/30 requests of all tasks"
    )
    # Classification: sim-1b and sim-7b answer 5 and 6 of 11 right, below the 90% bar:
    # never picked, and the sentence gives their pass rates with intervals.
    cls = by_task["classification"]
    assert " pick sim-1b" not in cls and " pick sim-7b" not in cls
    assert "pass rate 45%" in cls and "95% CI 21–72%" in cls
    assert "pass rate 55%" in cls and "95% CI 28–79%" in cls
    # Extraction: 4 checked answers per tier cannot show 90%.
    assert by_task["extraction"].startswith(
        "extraction there are too few checked answers at c=8 to decide: as few as 4 per tier"
    )
    # routing.json is the same decision: classification routed to the model its
    # sentence picks, extraction unrouted for the reason its sentence gives, in numbers.
    routing = json.loads((run_dir / "routing.json").read_text())
    assert routing["layout"] == ROUTING_LAYOUT and routing["level"] == "c=8"
    assert set(routing["routes"]) == {"classification", "extraction"}
    route = routing["routes"]["classification"]
    if route is None:
        assert " pick " not in cls and "classification" in routing["unrouted"]
    else:
        assert cls.startswith(f"classification pick {route['model']}:")
    assert routing["routes"]["extraction"] is None
    assert routing["unrouted"]["extraction"] == {
        "why": "too_few_answers",
        "reason": "too few checked answers to decide: as few as 4 per model, and a 90% "
        "pass-rate bar needs at least 10",
        "answers": 4,
        "answers_needed": 10,
    }
    # The same sentences open summary.md, and the terminal prints no second verdict.
    for sentence in sentences:
        assert sentence in head
    assert "routing at" not in out and "smallest to clear" not in out
    # The verdict ends the output: after the quality table, and no table after it.
    assert out.index("answer quality") < out.index("At c=8 each model")
    assert "─" not in verdict and len(sentences) == 3
    # Rows by model size: 8x7b (12.9B active) sits between 7b and 13b.
    table = out.split("answer quality", 1)[0]
    assert table.splitlines()[1].split()[:2] == ["SLO", "goodput"]  # decision columns first
    rows = [line.split()[0] for line in table.splitlines() if line.startswith("sim-")]
    assert rows == [
        m for m in ("sim-1b", "sim-7b", "sim-8x7b", "sim-13b", "sim-34b", "sim-70b") for _ in (1, 8)
    ]
    assert max(len(line) for line in out.splitlines()) <= 80
    assert f"run complete: {run_dir}" in err.replace("\n", "")


def test_label_names_the_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(
        [
            "run",
            "-m",
            "sim-1b",
            "--concurrency",
            "2",
            "--requests",
            "4",
            "--max-tokens",
            "4",
            "--time-scale",
            "20",
            "--output-dir",
            str(tmp_path),
            "--no-report",
            "--label",
            "nightly a100 [fp8]",
        ]
    )
    out, err = capsys.readouterr()
    assert rc == 0, err
    (run_dir,) = list(tmp_path.iterdir())
    run = load_run(run_dir)
    assert to_json(run.info)["label"] == "nightly a100 [fp8]"
    assert to_json(run.info)["config"]["output"]["label"] == "nightly a100 [fp8]"
    assert out.splitlines()[0].startswith("tokrate run nightly a100 [fp8] · ")
    assert err.rstrip().endswith(f"run complete: {run_dir} (nightly a100 [fp8])")
    # Without a label run.json still has the key, set to null.
    rc = main(
        [
            "run",
            "-m",
            "sim-1b",
            "--requests",
            "2",
            "--max-tokens",
            "2",
            "--time-scale",
            "20",
            "--output-dir",
            str(tmp_path / "b"),
            "--no-report",
            "--quiet",
        ]
    )
    assert rc == 0
    (other,) = list((tmp_path / "b").iterdir())
    assert to_json(load_run(other).info)["label"] is None
