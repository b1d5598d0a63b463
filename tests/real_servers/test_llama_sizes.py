"""A real llama-server reports its model's parameters and weights (GET /v1/models
``meta.n_params``, ``meta.size``, ``meta.ftype``): tokrate takes them for the size and
bytes per parameter of a model the user did not size, says so, and warns when a
configured size contradicts them (``params_b = 8.0`` on a 3 M model).

One llama-server on the smallest random-weight model (its parameter count is known
exactly: ``ModelShape.params``), a few short requests per run.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from real_servers import harness
from real_servers import models as model_files
from real_servers.paths import ServerMissing, cache_dir, missing
from real_servers.servers import Server, llama_server
from tokrate.cli import main

pytestmark = pytest.mark.real_server

SHAPE = next(s for s in model_files.GGUF_SHAPES if s.name == "rand-3m")


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    logs = cache_dir() / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    with contextlib.ExitStack() as stack:
        try:
            path = model_files.gguf_model(SHAPE)
            srv = stack.enter_context(llama_server(path, SHAPE.name, logs / "llama-sizes.log"))
        except ServerMissing as exc:
            missing(str(exc))
        yield srv


def _run(tmp_path: Path, run_id: str, *target: str) -> tuple[int, dict[str, Any]]:
    prompts = harness.distinct_length_prompts(tmp_path / "p.jsonl", 2)
    code = main(
        [
            "run",
            *target,
            "--prompts",
            str(prompts),
            "--requests",
            "2",
            "--max-tokens",
            "8",
            "--output-dir",
            str(tmp_path),
            "--run-id",
            run_id,
            "--no-report",
        ]
    )
    return code, orjson.loads((tmp_path / run_id / "run.json").read_bytes())


def test_the_servers_own_size_sizes_an_unsized_model(
    server: Server, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, run = _run(tmp_path, "plain", "--base-url", server.base_url, "-m", SHAPE.name)
    err = capsys.readouterr().err
    assert code == 0, err
    (target,) = run["targets"]
    served = target["served"]
    assert served["params"] == SHAPE.params and served["weight_type"] == "F16"
    assert target["params_b"] == SHAPE.params / 1e9  # not the name's "3m"
    assert 1.99 <= target["bytes_per_param"] <= 2.01  # F16 (its few F32 norms aside)
    assert (target["size_source"], target["bytes_source"]) == ("server", "server")
    assert f"the server reports {SHAPE.params:,} parameters, F16 weights" in err


def test_a_configured_size_the_server_contradicts_is_a_warning(
    server: Server, tmp_path: Path
) -> None:
    config = tmp_path / "bench.toml"
    config.write_text(
        f'[[endpoint]]\nname = "llama"\nbase_url = "{server.base_url}"\n\n'
        f'[[model]]\nname = "{SHAPE.name}"\nparams_b = 8.0\n',
        encoding="utf-8",
    )
    code, run = _run(tmp_path, "config", "-c", str(config))
    assert code == 0
    (target,) = run["targets"]
    assert target["params_b"] == 8.0 and target["size_source"] == "config"
    assert target["bytes_source"] == "server"  # the config said nothing about the weights
    (line,) = [w for w in run["warnings"] if "params_b = 8 in the config" in w]
    assert f"the server reports {SHAPE.params:,} parameters" in line
