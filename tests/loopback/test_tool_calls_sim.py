"""Tool calls and structured outputs end to end on the embedded simulator: the bundled
``tools`` and ``structured`` sets through Chat Completions, the Responses API and
Anthropic Messages; every record keeps its calls, the time of the first tool-call delta
and the calls' tokens; every verdict is the simulator's own draw (its task accuracy);
the new checks drive the pass rates, routing.json's pick and compare's pass-rate gate."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from helpers.specs import sim_spec

from tokrate.analysis.compare import compare_runs
from tokrate.analysis.tier_pick import min_requests
from tokrate.cli import main
from tokrate.inputs.prompts import load_prompts
from tokrate.load.run import run_benchmark
from tokrate.report.build import build_report
from tokrate.runfolder.loaded_run import load_run
from tokrate.sim.answers import Reference, answers_right
from tokrate.sim.model import default_tiers
from tokrate.spec.types import ClientSpec, PromptsSpec, SimulatorSpec, SloSpec

TIERS = {t.name: t for t in default_tiers()}
PROMPTS = {p.id: p for p in load_prompts(PromptsSpec(sets=("tools", "structured")))}
EXAMPLE = Path(__file__).parents[2] / "examples" / "tools.toml"


def _right(row: dict[str, Any]) -> bool:
    return answers_right(0, TIERS[row["model"]], Reference(None, row["task"], row["prompt_id"]))


def _check_tool_row(row: dict[str, Any]) -> None:
    expect = PROMPTS[row["prompt_id"]].expect
    assert expect is not None
    right = _right(row)
    assert row["check_passed"] is right, row
    calls = json.loads(row["tool_calls"]) if row["tool_calls"] else []
    if expect.kind == "no_tool_call":
        assert bool(calls) is not right
    elif right:
        assert [(c["index"], c["name"]) for c in calls] == [(0, expect.value["name"])]
        assert json.loads(calls[0]["arguments"]) == expect.value["arguments"]
    else:
        assert calls and (
            calls[0]["name"] != expect.value["name"]
            or json.loads(calls[0]["arguments"]) != expect.value["arguments"]
        )
    if calls:
        # The answer is the call: its first delta is the first content, its tokens the output.
        assert row["first_tool_call_s"] == row["ttft_s"] <= row["e2e_s"]
        assert row["tool_call_tokens"] == row["output_tokens"] > 0
        assert row["finish_reason"] == "tool_calls"
    else:
        assert row["first_tool_call_s"] is None and row["tool_call_tokens"] is None


def test_every_protocol_keeps_the_calls_and_the_checks_follow_the_simulator(
    tmp_path: Path,
) -> None:
    """examples/tools.toml (docs/quality.md), shortened: 36 requests per target, the
    simulator 20x faster."""
    argv = ["run", "-c", str(EXAMPLE), "--output-dir", str(tmp_path / "out"), "--no-report"]
    assert main([*argv, "--quiet", "--requests", "36", "--time-scale", "20"]) == 0
    (run_dir,) = (tmp_path / "out").iterdir()
    records = pl.read_parquet(run_dir / "records.parquet")
    assert records["status"].to_list() == ["ok"] * 4 * 36
    assert dict(records.group_by("endpoint").agg(pl.col("api").first()).iter_rows()) == {
        "chat": "chat",
        "resp": "responses",
        "claude": "anthropic",
    }
    for row in records.to_dicts():
        if row["task"] == "tools":
            _check_tool_row(row)
        else:
            # Structured output: the example's JSON when right, malformed when wrong.
            assert row["task"] == "structured"
            assert row["check_passed"] is _right(row), row
            assert row["tool_calls"] is None
    # Each protocol's pass rate on tools is the same simulator draw.
    seventy = records.filter((pl.col("model") == "sim-70b") & (pl.col("task") == "tools"))
    rates = seventy.group_by("endpoint").agg(pl.col("check_passed").mean())
    assert len(rates) == 3 and len(set(rates["check_passed"])) == 1
    # The report's answers view shows the calls beside the verdicts, wrong ones first.
    markdown = (build_report([run_dir], formats=("png",)) / "summary.md").read_text()
    view = markdown[markdown.index("### Answers") :]
    rows = [line for line in view.splitlines() if line.startswith("| chat/sim-7b | tools |")]
    assert rows
    verdicts = [line.split(" | ")[3] for line in rows]
    assert verdicts == sorted(verdicts, key=lambda v: v != "wrong")
    wrong = records.filter(
        (pl.col("model") == "sim-7b") & (pl.col("task") == "tools") & ~pl.col("check_passed")
    )
    for call in wrong["tool_calls"].drop_nulls():
        name = json.loads(call)[0]["name"]
        assert any(f"{name.replace('_', chr(92) + '_')}(" in line for line in rows), name


def _quality(run_dir: Path) -> dict[tuple[str, str], tuple[int, int]]:
    run = load_run(run_dir)
    assert run.summary is not None
    return {
        (g.model, t.task): (t.quality.n, t.quality.passed)
        for g in run.summary.groups
        for t in g.by_task
        if t.quality is not None
    }


def test_tool_and_schema_checks_drive_pass_rates_and_the_pick(tmp_path: Path) -> None:
    models = ["sim-1b", "sim-7b", "sim-34b", "sim-70b"]
    spec = sim_spec(
        None,
        tmp_path / "out",
        models=models,
        prompts=PromptsSpec(sets=("tools", "structured")),
        requests=36,
        concurrency=(4,),
        slo=SloSpec(min_pass_rate=0.9),
        simulator=SimulatorSpec(time_scale=20.0),
    )
    run_benchmark(spec)
    run_dir = tmp_path / "out" / "run"
    records = pl.read_parquet(run_dir / "records.parquet")
    quality = _quality(run_dir)
    rates: dict[tuple[str, str], float] = {}
    for model in models:
        for task in ("tools", "structured"):
            rows = records.filter((pl.col("model") == model) & (pl.col("task") == task)).to_dicts()
            passed = sum(1 for r in rows if r["check_passed"])
            assert quality[(model, task)] == (len(rows), passed)
            assert all(r["check_passed"] is _right(r) for r in rows)
            rates[(model, task)] = passed / len(rows)
    # Larger tiers call the right tool more often (the draws nest across tiers).
    assert rates[("sim-1b", "tools")] <= rates[("sim-7b", "tools")] <= rates[("sim-70b", "tools")]
    routing = json.loads((run_dir / "routing.json").read_text())
    assert set(routing["routes"]) == {"tools", "structured"}
    needed = min_requests(0.9)
    for task in ("tools", "structured"):
        clearing = [m for m in models if rates[(m, task)] >= 0.9]
        assert all(quality[(m, task)][0] >= needed for m in models)
        route = routing["routes"][task]
        assert (route and route["model"]) == (clearing[0] if clearing else None), rates


def test_compares_pass_rate_gate_flags_a_tier_that_calls_the_wrong_tools(tmp_path: Path) -> None:
    runs = []
    for name, accuracy in (("before", 0.97), ("after", 0.4)):
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
            prompts=PromptsSpec(sets=("tools",)),
            requests=60,
            concurrency=(4,),
            simulator=SimulatorSpec(tiers_file=str(tiers), time_scale=1.0),
        )
        run_benchmark(spec)
        runs.append(tmp_path / "out" / name)
    comparison = compare_runs(*runs)
    (row,) = [r for r in comparison.results if r.metric == "pass_rate"]
    assert row.verdict == "regressed", row
    assert row.ci_high is not None and row.ci_high < 0


@pytest.mark.parametrize(
    ("kind", "api"), [("openai", "chat"), ("openai", "responses"), ("httpx", "anthropic")]
)
def test_every_client_keeps_the_calls(tmp_path: Path, kind: str, api: str) -> None:
    spec = sim_spec(
        None,
        tmp_path / "out",
        models=["sim-70b"],
        prompts=PromptsSpec(sets=("tools",), limit=8),
        requests=8,
        concurrency=(4,),
        client=ClientSpec(kind=kind, api=api),  # type: ignore[arg-type]
        simulator=SimulatorSpec(time_scale=20.0),
    )
    run_benchmark(spec)
    records = pl.read_parquet(tmp_path / "out" / "run" / "records.parquet")
    assert set(records["client"]) == {kind} and set(records["api"]) == {api}
    for row in records.to_dicts():
        _check_tool_row(row)


def _production_file(path: Path) -> Path:
    """An OpenAI batch file as a product exports it: no checks, only request fields."""
    weather = {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
        "additionalProperties": False,
    }
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": weather}}]
    contact = {
        "type": "object",
        "properties": {"name": {"type": "string"}, "email": {"type": "string"}},
        "required": ["name", "email"],
        "additionalProperties": False,
    }
    bodies: dict[str, dict[str, Any]] = {
        "forced-1": {"tools": tools, "tool_choice": "required"},
        "forced-2": {"tools": tools, "tool_choice": "required"},
        "json-1": {
            "response_format": {
                "type": "json_schema",
                "json_schema": {"name": "contact", "strict": True, "schema": contact},
            }
        },
        "json-2": {"response_format": {"type": "json_object"}},
        "free": {"tools": tools, "tool_choice": "auto"},
    }
    lines = [
        json.dumps(
            {
                "custom_id": cid,
                "url": "/v1/chat/completions",
                "body": {
                    "model": "gpt-4.1-mini",
                    "messages": [{"role": "user", "content": f"Request {cid}"}],
                    "max_tokens": 64,
                    **body,
                },
            }
        )
        for cid, body in bodies.items()
    ]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_a_batch_file_without_checks_is_judged_on_what_its_bodies_ask(tmp_path: Path) -> None:
    """docs/quality.md "Checks a body implies": a forced call against the tool's
    parameters, JSON against the response_format's schema; a free choice unchecked."""
    models = ["sim-1b", "sim-70b"]
    spec = sim_spec(
        None,
        tmp_path / "out",
        models=models,
        prompts=PromptsSpec(paths=(str(_production_file(tmp_path / "prod.jsonl")),)),
        requests=20,
        concurrency=(4,),
        simulator=SimulatorSpec(time_scale=20.0),
    )
    run_benchmark(spec)
    run_dir = tmp_path / "out" / "run"
    records = pl.read_parquet(run_dir / "records.parquet")
    assert records["status"].to_list() == ["ok"] * 40
    for row in records.to_dicts():
        right = answers_right(0, TIERS[row["model"]], Reference(None, "prod", row["prompt_id"]))
        if row["prompt_id"] == "free":
            assert row["check_passed"] is None
        elif row["prompt_id"].startswith("forced"):
            assert row["check_passed"] is right, row
            (call,) = json.loads(row["tool_calls"])
            assert call["name"] == "get_weather"
            assert ("city" in json.loads(call["arguments"])) is right
        else:
            assert row["check_passed"] is right, row
            assert row["answer"] is not None and row["tool_calls"] is None
    quality = _quality(run_dir)
    for model in models:
        checked = records.filter((pl.col("model") == model) & (pl.col("prompt_id") != "free"))
        assert quality[(model, "prod")] == (len(checked), int(checked["check_passed"].sum()))
    assert quality[("sim-70b", "prod")][1] > quality[("sim-1b", "prod")][1]


def test_an_answer_longer_than_a_record_keeps_is_a_check_error(tmp_path: Path) -> None:
    """A right JSON answer of 10,009 characters, cut to the 8,192 a record keeps, would
    no longer parse: the record says how long it was and the check is not judged."""
    example = json.dumps({"a": "x y " * 2500})
    line = {
        "id": "long",
        "task": "long",
        "messages": [{"role": "user", "content": "A long JSON answer"}],
        "max_tokens": 4000,
        "expect": {"json_schema": {"type": "object"}, "example": example},
    }
    prompts = tmp_path / "long.jsonl"
    prompts.write_text(json.dumps(line) + "\n")
    spec = sim_spec(
        None,
        tmp_path / "out",
        models=["sim-70b"],
        prompts=PromptsSpec(paths=(str(prompts),)),
        requests=2,
        concurrency=(1,),
        simulator=SimulatorSpec(time_scale=50.0),
    )
    run_benchmark(spec)
    records = pl.read_parquet(tmp_path / "out" / "run" / "records.parquet").to_dicts()
    assert [r["status"] for r in records] == ["ok", "ok"]
    for row in records:
        assert len(row["answer"]) == 8192
        assert json.loads(row["extra"])["answer_chars"] == len(example)
        assert row["check_passed"] is None
        assert row["check_error"] == (
            f"the answer ({len(example):,} characters) is longer than the 8,192 a record"
            " keeps, so it was not judged"
        )
