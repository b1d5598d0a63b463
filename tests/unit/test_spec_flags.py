"""``tokrate run``'s target and mode flags on top of a config (tokrate.spec.command_line):
the spec is built in one pass, so ``load_spec`` runs once per CLI call, and each rule
of docs/running.md holds."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import tokrate.load.run
import tokrate.spec.config_file
from tokrate.cli import main
from tokrate.errors import ConfigError
from tokrate.spec.command_line import EMBEDDED_DEFAULTS, RunFlags
from tokrate.spec.config_file import load_spec
from tokrate.spec.types import CapacitySpec, ModelSpec, RunSpec

CONFIG = """
[[endpoint]]
name = "gw"
base_url = "http://127.0.0.1:9/v1"

[[endpoint]]
name = "other"
base_url = "http://127.0.0.1:10/v1"

[[model]]
endpoint = "gw"
name = "m1"
extra_body = { top_k = 4 }

[[model]]
endpoint = "other"
name = "m1"

[[model]]
endpoint = "gw"
name = "m2"

[slo]
ttft_s = 1.0
"""


class _Stop(Exception):
    """Raised by the stand-in run_benchmark: the test only wants the spec."""


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, Any]]:
    """Counts load_spec calls and captures the spec the CLI would run (nothing runs)."""
    seen: dict[str, Any] = {"load_spec": 0, "spec": None}

    def counting(*args: Any, **kwargs: Any) -> RunSpec:
        seen["load_spec"] += 1
        return load_spec(*args, **kwargs)

    def capture(spec: RunSpec, **_: Any) -> None:
        seen["spec"] = spec
        raise _Stop

    monkeypatch.setattr(tokrate.spec.config_file, "load_spec", counting)
    monkeypatch.setattr(tokrate.load.run, "run_benchmark", capture)
    yield seen


def _cli(*argv: str) -> None:
    with pytest.raises(_Stop):
        main(["run", *argv])


@pytest.mark.parametrize(
    "argv",
    [
        (),
        ("--rate", "1,2"),
        ("--base-url", "http://127.0.0.1:9/v1", "-m", "a", "--api-key-env", "KEY"),
        ("-m", "sim-7b", "--capacity", "--model-check", "off"),
    ],
)
def test_load_spec_runs_once_per_cli_call(argv: tuple[str, ...], calls: dict[str, Any]) -> None:
    _cli(*argv)
    assert calls["load_spec"] == 1
    assert isinstance(calls["spec"], RunSpec)


def test_every_flag_on_a_config_in_one_load(tmp_path: Path, calls: dict[str, Any]) -> None:
    config = tmp_path / "bench.toml"
    config.write_text(CONFIG)
    _cli(
        "-c",
        str(config),
        "-m",
        "m1",
        "-m",
        "new",
        "--api-key-env",
        "GW_KEY",
        "--model-check",
        "probe",
        "--capacity",
    )
    assert calls["load_spec"] == 1
    spec: RunSpec = calls["spec"]
    # A configured name keeps its tables on every endpoint; a new one goes to the first.
    assert [(m.endpoint, m.name) for m in spec.models] == [
        ("gw", "m1"),
        ("other", "m1"),
        ("gw", "new"),
    ]
    assert spec.models[0].extra_body == (("top_k", 4),)
    assert spec.models[2] == ModelSpec(endpoint="gw", name="new")
    assert {(e.api_key_env, e.model_check) for e in spec.endpoints} == {("GW_KEY", "probe")}
    assert spec.load.capacity == CapacitySpec()


def test_the_embedded_defaults_lie_under_every_flag() -> None:
    spec = load_spec(None, {"load.requests": 5}, RunFlags())
    assert (
        spec.load.requests == 5 and spec.load.concurrency == EMBEDDED_DEFAULTS["load.concurrency"]
    )
    assert spec.slo.ttft_s == EMBEDDED_DEFAULTS["slo.ttft_s"]
    # An open-loop run has no concurrency sweep.
    rates = load_spec(None, {"load.mode": "open", "load.rates": (1.0,)}, RunFlags())
    assert rates.load.mode == "open" and rates.load.concurrency == (1,)
    # A library call (no flags), or a --base-url, has no embedded defaults.
    assert load_spec(None, {}).slo.ttft_s is None
    assert (
        load_spec(None, {}, RunFlags(base_url="http://127.0.0.1:9/v1", models=("a",))).slo.ttft_s
        is None
    )


def test_a_config_capacity_table_wins_over_the_flag_default(tmp_path: Path) -> None:
    config = tmp_path / "bench.toml"
    config.write_text(CONFIG + "[load.capacity]\nstart = 2\n")
    assert load_spec(config, {}, RunFlags(capacity=True)).load.capacity == CapacitySpec(start=2)


def test_errors_name_the_file_or_the_command_line(tmp_path: Path) -> None:
    config = tmp_path / "bench.toml"
    config.write_text(CONFIG.replace("http://127.0.0.1:10/v1", "nowhere"))
    with pytest.raises(ConfigError, match=r"^.*bench\.toml: key 'endpoint\[1\]\.base_url'"):
        load_spec(config, {}, RunFlags(api_key_env="KEY"))
    config.write_text(CONFIG)
    with pytest.raises(ConfigError, match=r"^command line: key 'endpoint\[0\]\.api_key_env'"):
        load_spec(config, {}, RunFlags(api_key_env="sk-not-a-name"))
    with pytest.raises(ConfigError, match=r"^command line: key 'model\[1\]\.name': duplicate"):
        load_spec(None, {}, RunFlags(models=("sim-7b", "sim-7b")))
    no_slo = tmp_path / "no-slo.toml"
    no_slo.write_text(CONFIG.replace("[slo]\nttft_s = 1.0\n", ""))
    with pytest.raises(ConfigError, match=r"^command line: key 'load\.capacity'"):
        load_spec(no_slo, {}, RunFlags(capacity=True))


@pytest.mark.parametrize(
    ("url", "name"),
    [
        ("https://api.openai.com/v1", "api.openai.com"),
        ("http://127.0.0.1:8080/v1", "127.0.0.1:8080"),
        ("http://user:secret@gw.internal:4000/v1", "gw.internal:4000"),
        ("http://[::1]:8000/v1", "[::1]:8000"),
    ],
)
def test_base_url_endpoint_is_named_by_its_host(url: str, name: str) -> None:
    """Without a config the endpoint was called "endpoint" ("endpoint endpoint" in
    titles); its host says which server it is, never its credentials."""
    spec = load_spec(None, {}, RunFlags(base_url=url, models=("m",)))
    assert [e.name for e in spec.endpoints] == [name]
    assert [(m.endpoint, m.name) for m in spec.models] == [(name, "m")]


def test_base_url_keeps_the_configs_model_tables_of_the_named_models(tmp_path: Path) -> None:
    """issue 38: one config prices a provider and a stand-in alike. `--base-url URL -m
    NAME` on a config keeps the [[model]] table of NAME (its prices, sizes) on the URL's
    endpoint; a name the config does not define gets defaults; the config's other
    models and endpoints are dropped."""
    config = tmp_path / "pick.toml"
    config.write_text(
        '[[endpoint]]\nname = "openai"\nbase_url = "https://api.openai.com/v1"\n'
        '[[model]]\nname = "gpt-4.1-nano"\nprice_in_per_m = 0.1\nprice_out_per_m = 0.4\n'
        '[[model]]\nname = "gpt-4.1-mini"\nprice_in_per_m = 0.4\nprice_out_per_m = 1.6\n'
        "params_b = 8.0\n"
    )
    flags = RunFlags(base_url="http://127.0.0.1:8000/v1", models=("gpt-4.1-mini", "new"))
    spec = load_spec(config, {}, flags)
    assert [e.name for e in spec.endpoints] == ["127.0.0.1:8000"]
    mini, new = spec.models
    assert (mini.endpoint, mini.name, mini.price_in_per_m, mini.params_b) == (
        "127.0.0.1:8000",
        "gpt-4.1-mini",
        0.4,
        8.0,
    )
    assert (new.endpoint, new.name, new.price_in_per_m) == ("127.0.0.1:8000", "new", None)
