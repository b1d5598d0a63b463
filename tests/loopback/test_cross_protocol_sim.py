"""examples/cross-protocol.toml: three ``simulator = true`` endpoints, each in its own
protocol (chat, responses, anthropic), measured in one run on the embedded simulator;
records, run.json and the summary keep the three side by side."""

from __future__ import annotations

from pathlib import Path

import orjson
import polars as pl
import pytest

from tokrate.cli import main
from tokrate.spec.config_file import load_spec

EXAMPLE = Path(__file__).parents[2] / "examples" / "cross-protocol.toml"


def test_cross_protocol_example_runs_on_the_embedded_simulator(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["run", "-c", str(EXAMPLE), "--output-dir", str(tmp_path), "--no-report"]
    argv += ["--requests", "4", "--concurrency", "1", "--time-scale", "10"]
    assert main(argv) == 0
    out = capsys.readouterr()
    (run_dir,) = tmp_path.iterdir()
    records = pl.read_parquet(run_dir / "records.parquet")
    apis = {
        (e, m): a for e, m, a in records.select("endpoint", "model", "api").unique().iter_rows()
    }
    assert apis == {
        ("openai", "sim-7b"): "chat",
        ("openai-resp", "sim-7b"): "responses",
        ("anthropic", "sim-13b"): "anthropic",
    }
    assert records["status"].to_list() == ["ok"] * 12
    assert set(records["tokens_source"].to_list()) == {"usage"}
    # An unchecked prompt runs to the 16-token cap; a checked one (the bundled
    # classification set has an ``expect``) is answered by the simulator with its short,
    # right answer and a stop, so it ends earlier (docs/quality.md).
    unchecked = records.filter(pl.col("check_passed").is_null())
    checked = records.filter(pl.col("check_passed").is_not_null())
    assert len(unchecked) > 0
    assert (unchecked["output_tokens"] == 16).all()
    assert checked["check_passed"].all()
    assert (checked["output_tokens"] <= 16).all()
    run = orjson.loads((run_dir / "run.json").read_bytes())
    targets = [(t["endpoint"], t["api"], t["simulated"]) for t in run["targets"]]
    assert targets == [
        ("openai", "chat", True),
        ("openai-resp", "responses", True),
        ("anthropic", "anthropic", True),
    ]
    # One simulator, one server-metrics series (scraped on the first sim endpoint).
    assert [s["endpoint"] for s in run["server_metrics"]] == ["openai"]
    summary = orjson.loads((run_dir / "summary.json").read_bytes())
    groups = {(g["endpoint"], g["model"]) for g in summary["groups"]}
    assert groups == set(apis)
    # The terminal table: one row per protocol's target.
    rows = out.out.splitlines()
    for endpoint, model in apis:
        assert any(r.split()[:2] == [endpoint, model] for r in rows), out.out


@pytest.mark.parametrize(
    ("endpoint", "words"),
    [
        ('simulator = true\nbase_url = "http://127.0.0.1:1/v1"', "not with simulator = true"),
        ("", "base_url': required (or simulator = true"),
    ],
)
def test_a_simulator_endpoint_takes_no_base_url(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], endpoint: str, words: str
) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(f'[[endpoint]]\nname = "e"\n{endpoint}\n[[model]]\nname = "sim-1b"\n')
    assert main(["run", "-c", str(path), "--output-dir", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and words in err, err


def test_a_simulator_endpoint_model_must_be_a_tier(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "bad.toml"
    path.write_text('[[endpoint]]\nname = "e"\nsimulator = true\n[[model]]\nname = "gpt-x"\n')
    assert load_spec(path).uses_simulator
    assert main(["run", "-c", str(path), "--output-dir", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip()
    assert "model 'gpt-x' is not a simulator tier" in err, err


def _documented_block(doc: str, heading: str) -> str:
    text = (Path(__file__).parents[2] / doc).read_text()
    section = text[text.index(heading) :]
    start = section.index("```toml\n") + 8
    return section[start : section.index("\n```", start)]


@pytest.mark.parametrize(
    ("doc", "heading"),
    [
        ("docs/config.md", "## Protocols and provider knobs"),
    ],
)
def test_documented_three_provider_config_holds_on_the_simulator(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, doc: str, heading: str
) -> None:
    """The documented config, its URLs pointed at a simulator whose tiers carry the
    documented model names (two of them reasoning): every request ok (the Anthropic
    thinking budget fits max_tokens), each in its protocol, its knobs on the wire."""
    from tokrate.sim.model import Tier
    from tokrate.sim.server import SimConfig, simulator_process

    def tier(name: str, reasoning: int, itl_ms: float = 5.0) -> Tier:
        return Tier(
            name,
            7.0,
            7.0,
            fixed_ttft_ms=20.0,
            fixed_itl_ms=itl_ms,
            output_tokens_min=16,
            output_tokens_max=16,
            reasoning_tokens=reasoning,
        )

    # The self-hosted model has ignore_eos: all 2048 tokens, so a fast tier.
    local = tier("qwen2.5-7b-instruct-q4_k_m", 0, itl_ms=0.2)
    tiers = (tier("o4-mini", 6), tier("claude-sonnet-4-5", 6), local)
    log = tmp_path / "truth.jsonl"
    monkeypatch.setenv("OPENAI_API_KEY", "sk-doc-openai-0001")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-doc-anthropic-0001")
    block = _documented_block(doc, heading)
    with simulator_process(SimConfig(tiers=tiers, time_scale=1.0, truth_log=str(log))) as url:
        config = block.replace("requests = 50", "requests = 2").replace("[1, 4]", "[1]")
        for old in (
            "https://api.openai.com/v1",
            "https://api.anthropic.com/v1",
            "http://127.0.0.1:8080/v1",
        ):
            assert old in config
            config = config.replace(old, url)
        path = tmp_path / "three.toml"
        path.write_text(config)
        argv = ["run", "-c", str(path), "--output-dir", str(tmp_path / "out"), "--no-report"]
        assert main([*argv, "--quiet"]) == 0
    (run_dir,) = (tmp_path / "out").iterdir()
    records = pl.read_parquet(run_dir / "records.parquet")
    assert records["status"].to_list() == ["ok"] * 6
    by_model = {row["model"]: row for row in records.iter_rows(named=True)}
    assert {m: r["api"] for m, r in by_model.items()} == {
        "o4-mini": "responses",
        "claude-sonnet-4-5": "anthropic",
        "qwen2.5-7b-instruct-q4_k_m": "chat",
    }
    # Reasoning apart from the answer where the protocol streams it.
    for model in ("o4-mini", "claude-sonnet-4-5"):
        r = by_model[model]
        assert r["first_answer_s"] > r["ttft_s"] and r["output_tokens"] == 16, model
    assert by_model["o4-mini"]["reasoning_tokens"] == 6
    assert by_model[local.name]["output_tokens"] == 2048  # ignore_eos: exactly max_tokens
    truth = [orjson.loads(line) for line in log.read_bytes().splitlines()]
    sent = {row["model"]: row["request"] for row in truth if row["request"]["body"].get("stream")}
    openai, anthropic, self_hosted = (sent[t.name] for t in tiers)
    assert openai["body"]["reasoning"] == {"effort": "low", "summary": "auto"}
    assert openai["headers"]["authorization"] == "<redacted>"
    assert anthropic["body"]["thinking"] == {"type": "enabled", "budget_tokens": 1024}
    assert anthropic["body"]["max_tokens"] == 2048 and "x-api-key" in anthropic["headers"]
    body = self_hosted["body"]
    assert body["cache_prompt"] is False and body["ignore_eos"] is True
    assert "min_tokens" not in body and "authorization" not in self_hosted["headers"]
