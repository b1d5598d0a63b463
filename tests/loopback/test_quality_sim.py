"""Answer quality end to end on the embedded simulator (docs/quality.md): prompts with
expect checks, answers kept and redacted in the records, judged after the load, each
verdict equal to the simulator's own (its declared per-task accuracy, drawn per prompt);
a user check and a JSON Schema check through the real client and the run folder."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from helpers.specs import sim_spec

from tokrate.analysis.checks import JUDGED_NOW_NOTE, with_verdicts
from tokrate.analysis.compare import compare_runs
from tokrate.analysis.tier_pick import min_requests
from tokrate.load.run import run_benchmark
from tokrate.report.build import build_report
from tokrate.runfolder.checks_file import read_checks
from tokrate.runfolder.loaded_run import load_run
from tokrate.runfolder.routing import ROUTING_LAYOUT
from tokrate.sim.answers import Reference, answers_right
from tokrate.sim.model import default_tiers
from tokrate.spec.types import PromptsSpec, SimulatorSpec, SloSpec

SCHEMA = {"type": "object", "required": ["vendor"], "properties": {"vendor": {"type": "string"}}}


def _prompts(folder: Path) -> Path:
    (folder / "qa_checks_lb.py").write_text(
        "def vendor(prompt, answer):\n"
        "    assert prompt['task'] == 'extraction'\n"
        "    return 1.0 if 'Northwind' in answer else 0.0\n"
    )
    lines = [
        {
            "id": f"c{i}",
            "task": "classification",
            "prompt": f"ticket {i}: billing or shipping?",
            "max_tokens": 8,
            "expect": {
                "one_of": ["billing", "shipping"],
                "example": "billing" if i % 2 else "shipping",
            },
        }
        for i in range(10)
    ] + [
        {
            "id": "e1",
            "task": "extraction",
            "prompt": "Vendor of: Northwind invoice",
            "max_tokens": 64,
            "expect": {"json_schema": SCHEMA, "example": '{"vendor": "Northwind"}'},
        },
        {
            "id": "e2",
            "task": "extraction",
            "prompt": "Who sold it? Northwind",
            "max_tokens": 64,
            "expect": {"check": "qa_checks_lb:vendor", "example": "Northwind Ltd"},
        },
        {"id": "free", "task": "chat", "prompt": "Say anything", "max_tokens": 8},
    ]
    path = folder / "checked.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def test_verdicts_match_the_simulators_declared_accuracy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every ok request of a checked prompt has an answer and a verdict; the verdict is
    exactly what the simulator decided (tokrate.sim.answers.answers_right with the run's
    seed), so a pass rate computed from the records is the simulator's truth."""
    # The user's check module is importable here and in the analysis child after the
    # load, as a user's would be from PYTHONPATH (or the working directory).
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    prompts = PromptsSpec(paths=(str(_prompts(tmp_path)),))
    models = ["sim-1b", "sim-13b", "sim-70b"]
    run_benchmark(
        sim_spec(
            None,
            tmp_path / "out",
            models=models,
            prompts=prompts,
            requests=26,
            concurrency=(4,),
            simulator=SimulatorSpec(time_scale=20.0),
        )
    )
    run = load_run(tmp_path / "out" / "run")
    assert {e.prompt_id for e in read_checks(run.path)} == {f"c{i}" for i in range(10)} | {
        "e1",
        "e2",
    }
    rows = run.records.filter(run.records["status"] == "ok").to_dicts()
    assert len(rows) == 3 * 26
    tiers = {t.name: t for t in default_tiers()}
    examples = {f"c{i}": "billing" if i % 2 else "shipping" for i in range(10)}
    examples |= {"e1": '{"vendor": "Northwind"}', "e2": "Northwind Ltd"}
    for row in rows:
        if row["prompt_id"] == "free":
            assert row["answer"] is None and row["check_passed"] is None
            continue
        ref = Reference(examples[row["prompt_id"]], row["task"], row["prompt_id"])
        right = answers_right(0, tiers[row["model"]], ref)
        assert row["check_passed"] is right, row
        assert row["check_error"] is None
        assert (row["answer"] == ref.text) is right
    passed = {m: sum(1 for r in rows if r["model"] == m and r["check_passed"]) for m in models}
    assert passed["sim-1b"] <= passed["sim-13b"] <= passed["sim-70b"]


def test_summary_quality_and_routing_follow_the_records(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """summary.json's quality per model x task equals the records' counts with a Wilson
    interval around the rate; routing.json names per task the smallest tier whose rate
    reaches the bar (here 0.9) on enough answers to decide it (10), computed from the
    simulator's own verdicts, and leaves a task of too few answers unrouted, saying so."""
    # The user's check module is importable here and in the analysis child after the
    # load, as a user's would be from PYTHONPATH (or the working directory).
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    prompts = PromptsSpec(paths=(str(_prompts(tmp_path)),))
    models = ["sim-1b", "sim-7b", "sim-13b", "sim-70b"]
    spec = sim_spec(
        None,
        tmp_path / "out",
        models=models,
        prompts=prompts,
        # 26 per tier: 20 classification answers decide a 90% bar, 4 extraction ones
        # cannot; the latency of 26 requests (all tasks together) can be judged.
        requests=26,
        concurrency=(4,),
        slo=SloSpec(min_pass_rate=0.9),
        simulator=SimulatorSpec(time_scale=20.0),
    )
    run_benchmark(spec)
    run = load_run(tmp_path / "out" / "run")
    assert run.summary is not None
    tiers = {t.name: t for t in default_tiers()}
    seen_rates: dict[tuple[str, str], float] = {}
    answers: dict[tuple[str, str], int] = {}
    for g in run.summary.groups:
        for t in g.by_task:
            if t.task == "chat":
                assert t.quality is None
                continue
            rows = run.records.filter(
                (run.records["model"] == g.model) & (run.records["task"] == t.task)
            ).to_dicts()
            passed = sum(1 for r in rows if r["check_passed"])
            assert t.quality is not None
            assert (t.quality.n, t.quality.passed) == (len(rows), passed)
            lo, hi = t.quality.rate_ci or (0, 0)
            assert lo <= passed / len(rows) <= hi
            seen_rates[(g.model, t.task)] = passed / len(rows)
            answers[(g.model, t.task)] = len(rows)
            # the simulator's truth: each prompt is right or wrong for this tier
            for r in rows:
                ref = Reference("x", r["task"], r["prompt_id"])
                assert r["check_passed"] is answers_right(0, tiers[g.model], ref)
    # The report shows the same numbers: its quality and routing tables, the chart.
    folder = build_report([run.path], formats=("png",))
    markdown = (folder / "summary.md").read_text()
    assert "### Answer quality" in markdown and "### Routing table" in markdown
    assert (folder / "charts" / "quality_vs_size.png").stat().st_size > 0
    routing = json.loads((run.path / "routing.json").read_text())
    assert routing["layout"] == ROUTING_LAYOUT
    assert routing["bar"] == {"default": 0.9, "by_task": {}, "source": "config"}
    assert set(routing["routes"]) == {"classification", "extraction"}  # chat is unchecked
    assert run.records.filter(run.records["status"] != "ok").height == 0
    needed = min_requests(0.9)
    for task, route in routing["routes"].items():
        clearing = [
            m for m in models if answers[(m, task)] >= needed and seen_rates[(m, task)] >= 0.9
        ]
        assert (route and route["model"]) == (clearing[0] if clearing else None), seen_rates
    assert routing["routes"]["classification"] is not None
    fewest = min(answers[(m, "extraction")] for m in models)
    assert fewest < needed
    assert routing["unrouted"]["extraction"] == {
        "why": "too_few_answers",
        "reason": f"too few checked answers to decide: as few as {fewest} per model, and a "
        f"90% pass-rate bar needs at least {needed}",
        "answers": fewest,
        "answers_needed": needed,
    }
    # The verdict names the same route, and the report's routing table shows it.
    picked = routing["routes"]["classification"]["model"]
    assert f"For classification pick {picked}:" in markdown
    assert "For extraction there are too few checked answers at c=4 to decide" in markdown
    assert f"| classification | 90% | {picked} |" in markdown
    assert "| extraction | 90% | no route | too few checked answers to decide" in markdown


def test_compare_flags_a_swapped_smaller_model(tmp_path: Path) -> None:
    """The same model name answered by a worse tier in the second run (a provider's
    silent swap): compare's pass_rate row is regressed, with Newcombe's interval of the
    difference below 0, even though the swapped tier is no slower."""
    lines = [
        {
            "id": f"q{i}",
            "task": "arith",
            "prompt": f"{i} + {i}?",
            "max_tokens": 8,
            "expect": {"number": 2 * i},
        }
        for i in range(60)
    ]
    path = tmp_path / "arith.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    runs = []
    for name, accuracy in (("before", 0.97), ("after", 0.5)):
        tiers = tmp_path / f"{name}.toml"
        tiers.write_text(
            '[[tier]]\nname = "prod"\nparams_b = 70\nfixed_ttft_ms = 1\nfixed_itl_ms = 1\n'
            f"accuracy = {accuracy}\n"
        )
        spec = sim_spec(
            None,
            tmp_path / "out",
            models=["prod"],
            run_id=name,
            prompts=PromptsSpec(paths=(str(path),)),
            requests=60,
            concurrency=(4,),
            simulator=SimulatorSpec(tiers_file=str(tiers)),
        )
        run_benchmark(spec)
        runs.append(tmp_path / "out" / name)
    comparison = compare_runs(*runs)
    (row,) = [r for r in comparison.results if r.metric == "pass_rate"]
    assert row.verdict == "regressed", row
    assert row.baseline is not None and row.current is not None
    assert row.current < row.baseline
    assert row.ci_high is not None and row.ci_high < 0
    unchecked = compare_runs(runs[0], runs[0])
    (same,) = [r for r in unchecked.results if r.metric == "pass_rate"]
    assert same.verdict == "unchanged"


def test_an_interrupted_or_killed_run_shows_the_quality_it_has(tmp_path: Path) -> None:
    """A run stopped by Ctrl-C went through its finishing step: its records.parquet holds
    the verdicts, and the report and compare read them from there. A killed run never
    did: its records.jsonl holds the answers without verdicts, so the report and
    compare judge them from checks.json, and say so."""
    lines = [
        {
            "id": f"q{i}",
            "task": "arith",
            "prompt": f"{i} + {i}?",
            "max_tokens": 8,
            "expect": {"number": 2 * i},
        }
        for i in range(24)
    ]
    path = tmp_path / "arith.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    tiers = tmp_path / "tiers.toml"
    tiers.write_text(
        '[[tier]]\nname = "prod"\nparams_b = 7\nfixed_ttft_ms = 1\nfixed_itl_ms = 1\n'
        "accuracy = 0.7\n"
    )
    spec = sim_spec(
        None,
        tmp_path / "out",
        models=["prod"],
        run_id="whole",
        prompts=PromptsSpec(paths=(str(path),)),
        requests=24,
        concurrency=(4,),
        simulator=SimulatorSpec(tiers_file=str(tiers)),
    )
    run_benchmark(spec)
    whole = tmp_path / "out" / "whole"
    truth = load_run(whole).records.select("request_index", "check_passed").sort("request_index")
    assert truth["check_passed"].null_count() == 0
    passed = int(truth["check_passed"].sum())
    assert 0 < passed < 24  # a 0.7-accurate tier: some right, some wrong

    def stopped(name: str, status: str, *, finished: bool) -> Path:
        folder = tmp_path / name
        shutil.copytree(whole, folder)
        info = json.loads((folder / "run.json").read_text())
        (folder / "run.json").write_text(json.dumps({**info, "status": status}))
        if not finished:  # killed: no finishing step, so no parquet, summary, routing
            for file in ("records.parquet", "summary.json", "routing.json"):
                (folder / file).unlink()
        return folder

    interrupted = stopped("interrupted", "interrupted", finished=True)
    killed = stopped("killed", "running", finished=False)
    # Interrupted: load_run reads the parquet, verdicts and all.
    run = load_run(interrupted)
    assert run.records.select("request_index", "check_passed").sort("request_index").equals(truth)
    # Killed: records.jsonl has answers, no verdicts; with_verdicts judges them.
    raw = load_run(killed)
    assert raw.records["check_passed"].null_count() == 24
    judged = with_verdicts(raw)
    assert judged.notes == (JUDGED_NOW_NOTE,)
    got = judged.records.select("request_index", "check_passed").sort("request_index")
    assert got.equals(truth)
    # Both reports show the quality, the killed one saying why it was judged late.
    for folder in (interrupted, killed):
        report = build_report([folder], formats=("png",))
        markdown = (report / "summary.md").read_text()
        assert "### Answer quality" in markdown, folder.name
        assert f"prod pass rate {passed / 24:.0%} (95% CI" in markdown, folder.name
        assert (JUDGED_NOW_NOTE in markdown) is (folder is killed)
        # compare sees the same pass rate as the whole run's.
        (row,) = [r for r in compare_runs(whole, folder).results if r.metric == "pass_rate"]
        assert row.verdict == "unchanged" and row.baseline == row.current == passed / 24
    # A killed run whose user check no longer imports (its module gone from the path
    # when the report runs): every answer is that check's error, and the notes say which
    # check and what to do, instead of a quality table of check errors alone.
    gone = stopped("gone", "running", finished=False)
    document = json.loads((gone / "checks.json").read_text())
    for entry in document["checks"]:
        entry["expect"] = {"check": "tokrate_gone_checks:arith"}
    (gone / "checks.json").write_text(json.dumps(document))
    judged = with_verdicts(load_run(gone))
    assert judged.records["check_passed"].null_count() == 24
    assert judged.records["check_error"].null_count() == 0
    note = judged.notes[-1]
    assert note == (
        "the checks of 24 prompts did not load now, so their answers count as check "
        "errors, not as right or wrong: expect: 'check' 'tokrate_gone_checks:arith': "
        "cannot import 'tokrate_gone_checks' (No module named 'tokrate_gone_checks'). "
        "Make the check's module importable (PYTHONPATH or the working "
        "directory) and run tokrate report again"
    )
    markdown = (build_report([gone], formats=("png",)) / "summary.md").read_text()
    assert note in markdown.replace("\\", "")  # the warning, unescaped
