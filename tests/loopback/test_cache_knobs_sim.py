"""Issue 27: caching exercised on purpose, per model, against the real simulator over
127.0.0.1. Anthropic caches only what a cache_control breakpoint marks, and reports
writes apart from reads; OpenAI's prompt_cache_key reaches the wire; run.json, the
summary and the report say which mode each target used. Token counts, not timings."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import polars as pl
from helpers.specs import sim_spec

from tokrate.load.run import run_benchmark
from tokrate.runfolder.loaded_run import load_run
from tokrate.spec.types import ClientSpec, ModelSpec, PromptsSpec, SharedPrefixSpec
from tokrate.textfmt import md_escape

PROMPTS = PromptsSpec(
    shared_prefix=SharedPrefixSpec(prefix_tokens=512, input_tokens=32, output_tokens=4, count=4)
)


def _run(url: str, out: Path, api: str, models: list[ModelSpec], name: str) -> Any:
    spec = sim_spec(
        url,
        out,
        run_id=name,
        models=models,
        prompts=PROMPTS,
        client=ClientSpec(api=api),  # type: ignore[arg-type]
        concurrency=(1,),
        requests=8,
        report=True,
    )
    return load_run(Path(run_benchmark(spec, quiet=True).run_dir))


def test_anthropic_caches_only_with_breakpoints_and_reports_writes(
    start_sim: Any, tmp_path: Path
) -> None:
    url = start_sim(prefix_cache=True, time_scale=4.0)
    models = [ModelSpec("sim", "sim-1b", cache_control=True), ModelSpec("sim", "sim-7b")]
    run = _run(url, tmp_path, "anthropic", models, "anthropic")
    records = run.records.filter(pl.col("task") == "shared-prefix").sort("request_index")
    marked = records.filter(pl.col("model") == "sim-1b")
    plain = records.filter(pl.col("model") == "sim-7b")
    # Without a breakpoint Anthropic caches nothing: reads and writes are 0.
    assert (plain["cached_tokens"] == 0).all() and (plain["cache_write_tokens"] == 0).all()
    # With one: the first request wrote the shared prefix, the others read it.
    assert marked["cache_write_tokens"][0] >= 512 - 16 and marked["cached_tokens"][0] == 0
    assert (marked["cached_tokens"][1:] >= 512 - 16).all()
    assert (marked["cache_write_tokens"][1:] == 0).all()
    assert all(
        r["input_tokens"] > r["cached_tokens"] + r["cache_write_tokens"]
        for r in marked.iter_rows(named=True)
    )
    assert run.summary is not None
    caches = {g.model: g.cache for g in run.summary.groups}
    assert caches["sim-1b"] is not None and caches["sim-1b"].write_tokens
    assert caches["sim-7b"] is not None and caches["sim-7b"].hit_rate == 0.0
    modes = {t.model: t.prompt_cache for t in run.info.targets}
    assert modes == {"sim-1b": "unique-prefix+cache_control", "sim-7b": "unique-prefix"}
    md = (run.path / "summary.md").read_text(encoding="utf-8")
    assert "prompt caching" in md and "sim-1b: " in md
    assert md_escape("Anthropic cache_control breakpoints") in md


def test_prompt_cache_key_reaches_the_wire(start_sim: Any, tmp_path: Path) -> None:
    log = tmp_path / "truth.jsonl"
    url = start_sim(prefix_cache=True, truth_log=str(log), time_scale=4.0)
    models = [ModelSpec("sim", "sim-1b", prompt_cache_key="tokrate-docs")]
    run = _run(url, tmp_path, "chat", models, "chat")
    bodies = [orjson.loads(line)["request"]["body"] for line in log.read_bytes().splitlines()]
    sent = [b for b in bodies if b.get("stream")]
    assert sent and all(b["prompt_cache_key"] == "tokrate-docs" for b in sent)
    (target,) = run.info.targets
    assert target.prompt_cache == "unique-prefix+prompt_cache_key"
    html = (run.path / "report.html").read_text(encoding="utf-8")
    assert "prompt caching" in html and "prompt_cache_key" in html
