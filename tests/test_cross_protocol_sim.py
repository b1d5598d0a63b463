"""examples/cross-protocol.toml: three ``simulator = true`` endpoints, each in its own
protocol (chat, responses, anthropic), measured in one run on the embedded simulator;
records, run.json and the summary keep the three side by side."""

from __future__ import annotations

from pathlib import Path

import orjson
import polars as pl
import pytest

from tokrate.cli import main
from tokrate.spec import load_spec

EXAMPLE = Path(__file__).parent.parent / "examples" / "cross-protocol.toml"


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
    assert (records["output_tokens"] == 16).all()
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
