"""Provider knobs end to end through ``tokrate run``: body fields and headers per run,
endpoint and model (and ``--body``), per-model ignore_eos, the max_completion_tokens
memory; every claim checked on what reached the server.

The layering runs on the real simulator (its truth log's ``request`` capture is what
the server received). The rest needs shapes the simulator does not produce, so it runs
on tests/helpers/protocol_server.py: a ``strict`` server answering HTTP 422 to any
field outside the protocol's basic set (transformers serve; the simulator ignores
unknown fields) and one refusing ``max_tokens`` with OpenAI's o-series 400 (recorded
from the real API). Three protocols in one run and the documented config:
tests/loopback/test_cross_protocol_sim.py."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from helpers.protocol_server import ProtocolServer

from tokrate.cli import main
from tokrate.sim.model import Tier
from tokrate.sim.server import SimConfig, simulator_process

SECRET = "tok-very-secret-header-value"


@pytest.fixture(scope="module")
def server() -> Iterator[ProtocolServer]:
    with ProtocolServer(itl_ms=1) as s:
        yield s


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """The simulator with tiers m1 and m2, its truth log capturing each request."""
    log = tmp_path_factory.mktemp("sim") / "truth.jsonl"
    tiers = tuple(
        Tier(name, 1.0, 1.0, fixed_ttft_ms=5.0, fixed_itl_ms=1.0) for name in ("m1", "m2")
    )
    with simulator_process(SimConfig(tiers=tiers, time_scale=1.0, truth_log=str(log))) as url:
        yield url, log


def _captured(log: Path, start: int) -> list[dict[str, Any]]:
    """The streamed requests' captures (body fields, headers) from line ``start`` on."""
    rows = [orjson.loads(line) for line in log.read_bytes().splitlines()[start:]]
    return [r["request"] for r in rows if r["request"]["body"].get("stream")]


def _lines(log: Path) -> int:
    return len(log.read_bytes().splitlines()) if log.exists() else 0


def _run(tmp_path: Path, config: str, *extra: str) -> int:
    path = tmp_path / "bench.toml"
    path.write_text(config)
    argv = ["run", "-c", str(path), "--output-dir", str(tmp_path / "out"), "--no-report"]
    return main([*argv, "--quiet", *extra])


def _sent(server: ProtocolServer, start: int) -> list[dict[str, Any]]:
    return [r for r in server.requests[start:] if r["method"] == "POST" and r["body"].get("stream")]


def _run_dir(tmp_path: Path) -> Path:
    (run_dir,) = (tmp_path / "out").iterdir()
    return run_dir


def _knobs_config(url: str) -> str:
    return f"""
[client]
extra_body = {{ temperature = 0.1, top_k = 1, seed = 1 }}
headers = {{ "X-Run" = "run", "X-Layer" = "run" }}
[[endpoint]]
name = "hosted"
base_url = "{url}"
extra_body = {{ top_k = 2, reasoning = {{ effort = "low" }} }}
headers = {{ "X-Layer" = "endpoint", "X-Secret-Token" = "{SECRET}" }}
model_check = "off"
[[model]]
name = "m1"
extra_body = {{ top_k = 3, cache_prompt = false }}
headers = {{ "x-layer" = "model" }}
[load]
requests = 2
[prompts]
max_tokens = 4
"""


def test_body_and_headers_layer_per_run_endpoint_model_and_command_line(
    sim: tuple[str, Path], tmp_path: Path
) -> None:
    url, log = sim
    start = _lines(log)
    code = _run(tmp_path, _knobs_config(url), "--body", "seed=42", "--body", 'user="me"')
    assert code == 0
    sent = _captured(log, start)
    assert len(sent) == 2
    for request in sent:
        body, headers = request["body"], request["headers"]
        assert body["temperature"] == 0.1  # run-wide
        assert body["reasoning"] == {"effort": "low"}  # endpoint
        assert body["top_k"] == 3 and body["cache_prompt"] is False  # model wins
        assert body["seed"] == 42 and body["user"] == "me"  # --body wins over all
        assert headers["x-run"] == "run" and headers["x-layer"] == "model"
        assert headers["x-secret-token"] == "<redacted>"  # arrived; the log keeps no value
    # run.json records the knobs, the secret header's value removed everywhere.
    run_dir = _run_dir(tmp_path)
    config = orjson.loads((run_dir / "run.json").read_bytes())["config"]
    assert config["client"]["body_overrides"] == {"seed": 42, "user": "me"}
    assert config["endpoints"][0]["extra_body"]["reasoning"] == {"effort": "low"}
    assert config["endpoints"][0]["headers"]["X-Secret-Token"] == "<redacted>"
    assert config["models"][0]["headers"] == {"x-layer": "model"}
    for path in run_dir.rglob("*"):
        if path.is_file():
            assert SECRET.encode() not in path.read_bytes(), path


def test_dash_m_keeps_the_configured_models_knobs(sim: tuple[str, Path], tmp_path: Path) -> None:
    url, log = sim
    start = _lines(log)
    assert _run(tmp_path, _knobs_config(url), "-m", "m1", "-m", "m2") == 0
    by_model: dict[str, list[dict[str, Any]]] = {}
    for request in _captured(log, start):
        by_model.setdefault(request["body"]["model"], []).append(request["body"])
    assert set(by_model) == {"m1", "m2"}
    assert all(b["top_k"] == 3 and b["cache_prompt"] is False for b in by_model["m1"])
    # A model the config does not define gets the endpoint's knobs, not m1's.
    assert all(b["top_k"] == 2 and "cache_prompt" not in b for b in by_model["m2"])


def test_ignore_eos_per_model_sends_only_what_that_model_wants(
    server: ProtocolServer, tmp_path: Path
) -> None:
    config = f"""
[[endpoint]]
name = "vllm"
base_url = "{server.url("ok")}"
model_check = "off"
[[endpoint]]
name = "llamacpp"
base_url = "{server.url("ok")}"
model_check = "off"
[[endpoint]]
name = "transformers"
base_url = "{server.url("strict")}"
model_check = "off"
[[model]]
endpoint = "vllm"
name = "a"
[[model]]
endpoint = "llamacpp"
name = "b"
ignore_eos = true
[[model]]
endpoint = "transformers"
name = "c"
ignore_eos = false
[load]
requests = 2
ignore_eos = true
[client]
include_usage = false
[prompts]
max_tokens = 4
"""
    start = len(server.requests)
    assert _run(tmp_path, config) == 0
    bodies = {r["body"]["model"]: r["body"] for r in _sent(server, start)}
    assert bodies["a"]["ignore_eos"] is True and bodies["a"]["min_tokens"] == 4
    assert bodies["b"]["ignore_eos"] is True and "min_tokens" not in bodies["b"]
    assert "ignore_eos" not in bodies["c"] and "min_tokens" not in bodies["c"]


def test_a_run_whose_every_request_was_refused_exits_1(
    server: ProtocolServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = f"""
[[endpoint]]
name = "transformers"
base_url = "{server.url("strict")}"
model_check = "off"
[[model]]
name = "c"
[load]
requests = 2
ignore_eos = true
[prompts]
max_tokens = 4
"""
    assert _run(tmp_path, config) == 1
    err = capsys.readouterr().err
    assert "got 0 ok requests of 2 (http_4xx 2)" in err and "Unexpected fields" in err


def test_max_completion_tokens_is_learned_once_per_target(
    server: ProtocolServer, tmp_path: Path
) -> None:
    config = f"""
[[endpoint]]
name = "o"
base_url = "{server.url("reject_max_tokens")}"
model_check = "off"
[[model]]
name = "o3"
[load]
requests = 4
[prompts]
sets = ["chat"]
max_tokens = 4
"""
    start = len(server.requests)
    assert _run(tmp_path, config) == 0
    sent = _sent(server, start)
    # Only the chat set: a checked prompt keeps its own larger limit (docs/quality.md).
    # One refused request, then every request (its resend included) names the new field.
    assert ["max_tokens" in r["body"] for r in sent] == [True] + [False] * 4
    assert all(r["body"]["max_completion_tokens"] == 4 for r in sent[1:])


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["--client", "openai", "--api", "anthropic"], "openai SDK client cannot send"),
        (["--body", "top_k"], "--body 'top_k': expected KEY=JSON"),
        (["--body", "user=me"], "--body user: the value is not JSON"),
        (
            ["--body", "stream=false"],
            "tokrate run: --body stream: reserved key, tokrate always streams",
        ),
        # Said before the value is parsed: "x" is not JSON, but that is not the problem.
        (
            ["--body", "model=x"],
            "tokrate run: --body model: reserved key, tokrate sets it from the target (choose models with -m NAME or [[model]] name)",
        ),
        (
            ["--body", "messages=[]"],
            "--body messages: reserved key, tokrate sets it from the prompts",
        ),
    ],
)
def test_bad_knobs_are_one_line_exit_2(
    server: ProtocolServer,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    argv: list[str],
    words: str,
) -> None:
    assert _run(tmp_path, _knobs_config(server.url("ok")), *argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and words in err, err
    assert "Traceback" not in err
