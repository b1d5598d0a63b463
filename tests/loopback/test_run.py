"""run_benchmark and `tokrate run` end to end against a real loopback server."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest
from helpers.hostile_server import HostileServer, hostile_server
from helpers.specs import sim_spec

from tokrate.cli import main
from tokrate.errors import EndpointUnreachable, OutputError
from tokrate.load.run import run_benchmark
from tokrate.runfolder.jsondoc import to_json
from tokrate.runfolder.loaded_run import load_run
from tokrate.runfolder.summary import SUMMARY_SCHEMA_VERSION
from tokrate.spec.types import PromptsSpec, RunSpec

CANARY = "sk-canary-7f3e9b1d2c4a6e8f0a1b"


@pytest.fixture(scope="module")
def server() -> Iterator[HostileServer]:
    with hostile_server() as srv:
        yield srv


@pytest.fixture()
def prompts_file(tmp_path: Path) -> Path:
    path = tmp_path / "p.jsonl"
    lines = [
        orjson.dumps({"id": f"q{i}", "task": "chat", "prompt": f"question {i}"}) for i in range(3)
    ]
    path.write_bytes(b"\n".join(lines) + b"\n")
    return path


def _spec(url: str, out: Path, prompts: Path, **load: object) -> RunSpec:
    return sim_spec(
        url,
        out,
        models=("small-7b", "large-70b"),
        run_id="run1",
        endpoint="ep",
        prompts=PromptsSpec(paths=(str(prompts),)),
        **{"concurrency": (1, 2), "requests": 3, **load},
    )


def _posts(server: HostileServer) -> int:
    return sum(1 for r in server.requests if r["path"].endswith("/completions"))


def test_run_benchmark_writes_a_complete_folder(
    server: HostileServer, tmp_path: Path, prompts_file: Path
) -> None:
    url = server.base_url("ok", tokens=4, itl_ms=1)
    result = run_benchmark(_spec(url, tmp_path, prompts_file))
    assert result.exit_code == 0 and not result.interrupted
    assert result.run_dir == tmp_path / "run1"
    loaded = load_run(result.run_dir)
    assert to_json(loaded.info)["status"] == "complete" and not loaded.interrupted
    assert loaded.records.height == 2 * 2 * 3  # targets x levels x requests
    assert to_json(loaded.info)["counts"] == {
        "scheduled": 12,
        "ok": 12,
        "error": 0,
        "cancelled": 0,
    }
    assert [s["name"] for s in to_json(loaded.info)["scenarios"]] == ["c=1", "c=2"]
    sizes = {t["model"]: t["params_b"] for t in to_json(loaded.info)["targets"]}
    assert sizes == {"small-7b": 7.0, "large-70b": 70.0}
    assert to_json(loaded.info)["loop_lag"]["threshold_ms"] == 5.0
    # The client's own lag per scenario: what compare's run-health rule reads.
    lags = loaded.info.loop_lag.scenarios if loaded.info.loop_lag else ()
    assert [lag.scenario for lag in lags] == ["c=1", "c=2"]
    assert all(lag.samples >= 0 and lag.max_ms >= lag.p99_ms >= 0 for lag in lags)
    assert (result.run_dir / "records.parquet").exists()
    assert (result.run_dir / "summary.json").exists() and result.summary is not None
    with pytest.raises(OutputError, match="already exists"):
        run_benchmark(_spec(url, tmp_path, prompts_file))


def test_unwritable_output_fails_before_any_load(
    server: HostileServer, tmp_path: Path, prompts_file: Path
) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("x")
    before = len(server.requests)
    with pytest.raises(OutputError) as info:
        run_benchmark(_spec(server.base_url("ok"), blocker, prompts_file))
    assert "\n" not in str(info.value) and str(blocker) in str(info.value)
    assert len(server.requests) == before  # not even the readiness check


def test_unreachable_endpoint_fails_before_load_and_leaves_no_folder(
    tmp_path: Path, prompts_file: Path
) -> None:
    spec = _spec("http://tokrate-test.invalid/v1", tmp_path, prompts_file)
    with pytest.raises(EndpointUnreachable, match="nothing was sent"):
        run_benchmark(spec)
    assert not (tmp_path / "run1").exists()


def test_cli_unreachable_exit_2_one_line(
    tmp_path: Path, prompts_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    rc = main(
        [
            "run",
            "--base-url",
            f"http://127.0.0.1:{port}/v1",
            "-m",
            "x",
            "--prompts",
            str(prompts_file),
            "--output-dir",
            str(tmp_path),
        ]
    )
    err = capsys.readouterr().err.strip()
    assert rc == 2
    assert err.startswith(f"tokrate: error: endpoint '127.0.0.1:{port}'") and "unreachable" in err
    assert "\n" not in err and "Traceback" not in err


def test_cli_config_error_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = tmp_path / "bench.toml"
    cfg.write_text('[load]\nconcurrency = "lots"\n')
    rc = main(["run", "-c", str(cfg), "--output-dir", str(tmp_path / "out")])
    err = capsys.readouterr().err.strip()
    assert rc == 2
    assert err.startswith(f"tokrate: error: {cfg}") and "load.concurrency" in err
    assert "\n" not in err
    assert not (tmp_path / "out").exists()


def test_cli_bad_flag_values_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "--concurrency", "1,x"]) == 2
    assert "--concurrency" in capsys.readouterr().err
    assert main(["run", "--duration", "soon"]) == 2
    assert "--duration" in capsys.readouterr().err


def test_cli_json_and_canary_key_never_leaks(
    server: HostileServer,
    tmp_path: Path,
    prompts_file: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TOKRATE_TEST_CANARY", CANARY)
    rc = main(
        [
            "run",
            "--base-url",
            server.base_url("ok", tokens=3),
            "--api-key-env",
            "TOKRATE_TEST_CANARY",
            "-m",
            "m-7b",
            "--prompts",
            str(prompts_file),
            "--concurrency",
            "2",
            "--requests",
            "4",
            "--output-dir",
            str(tmp_path),
            "--run-id",
            "canary",
            "--json",
            "--no-report",
        ]
    )
    out, err = capsys.readouterr()
    assert rc == 0, err
    summary = orjson.loads(out)
    assert summary["schema_version"] == SUMMARY_SCHEMA_VERSION
    # The key did reach the server (so it was really used) ...
    assert any(r["headers"].get("authorization") == f"Bearer {CANARY}" for r in server.requests)
    # ... and appears in no output: terminal, or any file of the run folder.
    assert CANARY not in out and CANARY not in err
    files = [p for p in (tmp_path / "canary").rglob("*") if p.is_file()]
    assert {p.name for p in files} >= {"run.json", "records.jsonl", "records.parquet"}
    for p in files:
        assert CANARY.encode() not in p.read_bytes(), p
    run = orjson.loads((tmp_path / "canary" / "run.json").read_bytes())
    assert run["config"]["endpoints"][0]["api_key_env"] == "TOKRATE_TEST_CANARY"


def test_missing_key_env_var_is_a_config_error(
    tmp_path: Path, prompts_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    os.environ.pop("TOKRATE_TEST_UNSET", None)
    rc = main(
        [
            "run",
            "--base-url",
            "http://127.0.0.1:9/v1",
            "--api-key-env",
            "TOKRATE_TEST_UNSET",
            "-m",
            "x",
            "--prompts",
            str(prompts_file),
            "--output-dir",
            str(tmp_path),
        ]
    )
    assert rc == 2
    assert "TOKRATE_TEST_UNSET" in capsys.readouterr().err
