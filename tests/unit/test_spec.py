"""Config loading: layout, defaults, overrides, one-line errors, secrets, size inference."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tokrate.errors import ConfigError
from tokrate.inputs.sizes import infer_bytes_per_param, infer_size
from tokrate.inputs.targets import resolve_targets
from tokrate.spec.config_file import load_spec, prompts_base_dir, spec_to_dict
from tokrate.spec.init_template import example_config
from tokrate.spec.types import EndpointSpec, LoadSpec, ModelSpec, RunSpec

FULL = """
baseline = "latest-good"

[[endpoint]]
name = "prod"
base_url = "https://api.example.test/v1"
api_key_env = "PROD_KEY"
headers = { "X-Team" = "perf", "Authorization" = "Bearer literal-header-secret" }

[[endpoint]]
name = "local"
base_url = "http://127.0.0.1:8000/v1"

[[model]]
endpoint = "prod"
name = "llama-3.1-70b-instruct"
price_in_per_m = 0.5
price_out_per_m = 1.5
extra_body = { temperature = 0.0, provider = { order = ["a", "b"] }, api_key = "body-secret" }

[[model]]
endpoint = "local"
name = "mixtral-8x7b"
params_b = 47.0
gpu_hourly_usd = 2.5
gpus = 2

[load]
rates = [0.5, 2]
arrival = "gamma"
burstiness = 2.0
duration_s = 30
warmup_s = 5
targets = "parallel"
seed = 7

[prompts]
sets = ["chat"]
paths = ["my.jsonl"]
max_tokens = 64

[prompts.synthetic]
count = 4
input_tokens = 100
distribution = "lognormal"
input_stddev = 20

[slo]
ttft_s = 1.5
tpot_s = 0.05

[output]
dir = "out"
formats = ["svg"]
hardware = "h100-sxm"

[client]
kind = "httpx"
api = "completions"
unique_prompts = false

[client.timeouts]
idle_s = 5

[client.retry]
max_attempts = 3
on = ["http_429"]

[simulator]
time_scale = 0.01

[distributed]
ray = "auto"
workers = 4
resources = { accel = 0.5 }
"""


def write(tmp_path: Path, text: str, name: str = "bench.toml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_defaults_without_file_are_the_dataclass_defaults() -> None:
    spec = load_spec(None, {})
    assert spec == RunSpec()
    assert spec.uses_simulator


def test_full_layout_loads_every_section(tmp_path: Path) -> None:
    spec = load_spec(write(tmp_path, FULL), {})
    assert [e.name for e in spec.endpoints] == ["prod", "local"]
    assert spec.endpoints[0].headers == (
        ("X-Team", "perf"),
        ("Authorization", "Bearer literal-header-secret"),
    )
    sized = {t.model.name: t.model for t in resolve_targets(spec)}
    big, moe = sized["llama-3.1-70b-instruct"], sized["mixtral-8x7b"]
    assert (big.params_b, big.active_params_b) == (70.0, 70.0)  # inferred, dense
    # user-given total wins; active keeps the inferred MoE ratio (12.9 / 46.7)
    assert moe.params_b == 47.0
    assert moe.active_params_b == pytest.approx(47.0 * 12.9 / 46.7, abs=1e-3)
    assert dict(big.extra_body)["provider"] == {"order": ["a", "b"]}
    load = spec.load
    assert (load.mode, load.rates, load.arrival, load.burstiness) == (
        "open",
        (0.5, 2.0),
        "gamma",
        2.0,
    )
    assert (load.requests, load.duration_s, load.warmup_s, load.targets) == (
        None,
        30.0,
        5.0,
        "parallel",
    )
    assert spec.prompts.synthetic is not None and spec.prompts.synthetic.distribution == "lognormal"
    assert spec.client.timeouts.idle_s == 5.0 and spec.client.timeouts.connect_s == 10.0
    assert spec.client.retry.on == ("http_429",)
    assert spec.distributed.resources == (("accel", 0.5),)
    assert spec.baseline == "latest-good"
    assert spec.source == str(tmp_path / "bench.toml")
    assert prompts_base_dir(spec) == tmp_path.resolve()
    assert not spec.uses_simulator


def test_overrides_win_over_the_file_and_take_typed_specs(tmp_path: Path) -> None:
    path = write(tmp_path, "[load]\nconcurrency = [1, 2]\nrequests = 5\n")
    ep = EndpointSpec("cli", "http://127.0.0.1:9/v1", api_key_env="K")
    spec = load_spec(
        path,
        {
            "load.concurrency": (4, 16),
            "client.kind": "openai",
            "endpoints": [ep],
            "models": [ModelSpec("cli", "qwen2.5-0.5b-instruct")],
        },
    )
    assert spec.load.concurrency == (4, 16) and spec.load.requests == 5
    assert spec.client.kind == "openai"
    assert spec.endpoints == (ep,)
    assert resolve_targets(spec)[0].model.params_b == 0.5


def test_model_endpoint_defaults_to_the_only_endpoint(tmp_path: Path) -> None:
    spec = load_spec(
        write(
            tmp_path,
            '[[endpoint]]\nname = "a"\nbase_url = "http://x/v1"\n[[model]]\nname = "m-7b"\n',
        ),
        {},
    )
    assert spec.models[0].endpoint == "a" and resolve_targets(spec)[0].model.params_b == 7.0


def test_simulator_models_use_endpoint_sim(tmp_path: Path) -> None:
    spec = load_spec(write(tmp_path, '[[model]]\nname = "sim-7b"\n'), {})
    assert spec.uses_simulator and spec.models[0].endpoint == "sim"


BAD = [
    (
        '[load]\nconcurrency = ["x"]',
        "key 'load.concurrency': expected list of positive integers, got 'x'",
    ),
    (
        "[load]\nconcurrency = [4, 0]",
        "key 'load.concurrency': expected list of positive integers, got 0",
    ),
    (
        "[load]\nconcurency = [1]",
        "key 'load.concurency': unknown key (did you mean 'concurrency'?)",
    ),
    ("[lod]\nx = 1", "key 'lod': unknown key (did you mean 'load'?)"),
    ('[load]\nmode = "open"', "key 'load.rates': required (non-empty) when load.mode = 'open'"),
    ('[load]\nmode = "closed"\nrates = [1.0]', "key 'load.rates': set, but load.mode is 'closed'"),
    (
        '[load]\narrival = "bursty"',
        "key 'load.arrival': expected one of 'constant', 'poisson', 'gamma', got 'bursty'",
    ),
    ("[load]\nrequests = true", "key 'load.requests': expected positive integer, got true"),
    ("[load]\nburstiness = inf", "key 'load.burstiness': expected positive number, got inf"),
    ("[load]\nconcurrency = [2, 2]", "key 'load.concurrency': duplicate level 2"),
    (
        '[[model]]\nname = "m"\nendpoint = "nope"',
        "key 'model[0].endpoint': no [[endpoint]] named 'nope'",
    ),
    (
        '[[endpoint]]\nname = "a"\nbase_url = "http://x"\n[[endpoint]]\nname = "b"\nbase_url = "http://y"\n[[model]]\nname = "m"',
        "key 'model[0].endpoint': required when several endpoints are defined ('a', 'b')",
    ),
    (
        '[[endpoint]]\nname = "a"\nbase_url = "ftp://x"',
        "key 'endpoint[0].base_url': expected an http:// or https:// URL, got 'ftp://x'",
    ),
    ('[[endpoint]]\nbase_url = "http://x"', "key 'endpoint[0].name': required but missing"),
    (
        '[[endpoint]]\nname = "a"\nbase_url = "http://x"\n[[endpoint]]\nname = "a"\nbase_url = "http://y"',
        "key 'endpoint[1].name': duplicate endpoint name 'a'",
    ),
    (
        '[[endpoint]]\nname = "a"\nbase_url = "http://x"\nheaders = { "X" = 1 }',
        "key 'endpoint[0].headers.X': expected string, got 1",
    ),
    (
        '[[endpoint]]\nname = "a"\nbase_url = "http://x"\n[[model]]\nname = "m"\nparams_b = -1',
        "key 'model[0].params_b': expected positive number, got -1",
    ),
    (
        '[[endpoint]]\nname = "a"\nbase_url = "http://x"\n[[model]]\nname = "m"\nparams_b = 7\nactive_params_b = 8',
        "key 'model[0].active_params_b': expected at most params_b (7), got 8",
    ),
    (
        '[[endpoint]]\nname = "a"\nbase_url = "http://x"\n[[model]]\nname = "m"\nextra_body = { stream = false }',
        "key 'model[0].extra_body.stream': reserved",
    ),
    (
        '[[endpoint]]\nname = "a"\nbase_url = "http://x"\n[[model]]\nname = "m"\n[[model]]\nname = "m"',
        "key 'model[1].name': duplicate model 'm' on 'a'",
    ),
    ('[output]\nhardware = "tpu"', "key 'output.hardware': unknown hardware profile 'tpu'"),
    (
        '[output]\nformats = ["gif"]',
        "key 'output.formats': expected values each one of 'png', 'svg', 'pdf', got 'gif'",
    ),
    ('[client.retry]\non = ["boom"]', "key 'client.retry.on': unknown error class 'boom'"),
    ("[client]\ntimeouts = 5", "key 'client.timeouts': expected a table, got 5"),
    (
        "[client.timeouts]\nidle_s = 0",
        "key 'client.timeouts.idle_s': expected positive number, got 0",
    ),
    ('[prompts]\nsets = ["nope"]', "key 'prompts.sets': no bundled set 'nope'"),
    (
        "[prompts.synthetic]\ncount = 0",
        "key 'prompts.synthetic.count': expected positive integer, got 0",
    ),
    (
        "[simulator]\nefficiency = 1.5",
        "key 'simulator.efficiency': expected number in (0, 1], got 1.5",
    ),
    ("baseline = 3", "key 'baseline': expected non-empty string, got 3"),
    ("load = 3", "key 'load': expected a table ([load]), got 3"),
    ("endpoint = 3", "key 'endpoint': expected an array of tables ([[endpoint]]), got 3"),
]


@pytest.mark.parametrize(("text", "message"), BAD, ids=[m.split("'")[1] for _, m in BAD])
def test_bad_values_give_one_line_naming_file_and_key(
    tmp_path: Path, text: str, message: str
) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        load_spec(path, {})
    text_err = str(info.value)
    assert "\n" not in text_err
    assert text_err.startswith(f"{path}: {message}"), text_err
    assert info.value.exit_code == 2


def test_file_level_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"missing\.toml: config file not found$"):
        load_spec(tmp_path / "missing.toml", {})
    with pytest.raises(ConfigError, match=r"bench\.toml: invalid TOML: "):
        load_spec(write(tmp_path, "[load\n"), {})
    bad = tmp_path / "latin1.toml"
    bad.write_bytes(b'[output]\ndir = "r\xe9ports"\n')
    with pytest.raises(ConfigError, match=r"latin1\.toml: line 2: not valid UTF-8$"):
        load_spec(bad, {})
    with pytest.raises(ConfigError, match="is a directory"):
        load_spec(tmp_path, {})


def test_override_errors_say_command_line(tmp_path: Path) -> None:
    path = write(tmp_path, "[load]\nrequests = 5\n")
    with pytest.raises(ConfigError) as info:
        load_spec(path, {"load.concurrency": ("x",)})
    assert str(info.value) == (
        "command line: key 'load.concurrency': expected list of positive integers, got 'x'"
    )
    with pytest.raises(ConfigError, match=r"^command line: key 'lode': unknown key"):
        load_spec(None, {"lode.requests": 1})


def test_api_key_in_the_env_field_is_never_echoed(tmp_path: Path) -> None:
    canary = "sk-canary-0123456789abcdef"
    path = write(
        tmp_path, f'[[endpoint]]\nname = "a"\nbase_url = "http://x"\napi_key_env = "{canary}"\n'
    )
    with pytest.raises(ConfigError) as info:
        load_spec(path, {})
    assert canary not in str(info.value)
    assert "api_key_env" in str(info.value)


def test_duration_without_requests_is_duration_bound(tmp_path: Path) -> None:
    spec = load_spec(write(tmp_path, "[load]\nduration_s = 10\n"), {})
    assert spec.load.requests is None and spec.load.duration_s == 10.0
    spec = load_spec(write(tmp_path, "[load]\nduration_s = 10\nrequests = 3\n"), {})
    assert spec.load.requests == 3
    with pytest.raises(ConfigError, match=r"set load\.requests or load\.duration_s"):
        load_spec(None, {"load.requests": None})


def test_spec_to_dict_is_json_and_secret_free(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PROD_KEY", "sk-env-canary-42")
    spec = load_spec(write(tmp_path, FULL), {})
    d = spec_to_dict(spec)
    text = json.dumps(d)
    assert "sk-env-canary-42" not in text
    assert "literal-header-secret" not in text and "body-secret" not in text
    assert d["endpoints"][0]["api_key_env"] == "PROD_KEY"  # the name stays
    assert d["endpoints"][0]["headers"] == {"X-Team": "perf", "Authorization": "<redacted>"}
    assert d["models"][0]["extra_body"]["api_key"] == "<redacted>"
    assert d["models"][0]["extra_body"]["temperature"] == 0.0
    assert d["load"]["rates"] == [0.5, 2.0]
    assert d["uses_simulator"] is False
    assert json.loads(text) == d


@pytest.mark.parametrize("with_endpoints", [False, True])
def test_example_config_loads(tmp_path: Path, with_endpoints: bool) -> None:
    spec = load_spec(write(tmp_path, example_config(with_endpoints=with_endpoints)), {})
    assert spec.load.concurrency == (1,)  # the template's active lines are the defaults
    assert spec.uses_simulator is not with_endpoints
    if with_endpoints:
        assert [t.model.active_params_b for t in resolve_targets(spec)] == [8.0, 12.9]
    # The top-level example, uncommented with the blocks above it, stays top level.
    text = example_config(with_endpoints=with_endpoints).replace(
        '# baseline = "latest-good"', 'baseline = "latest-good"'
    )
    assert load_spec(write(tmp_path, text), {}).baseline == "latest-good"


def test_the_example_config_says_truthfully_what_it_runs(tmp_path: Path) -> None:
    """issue 38: every active line is the default (the file runs what an empty config
    runs), and its comment names the demo a config-less `tokrate run` runs instead."""
    from dataclasses import replace

    from tokrate.spec.command_line import EMBEDDED_DEFAULTS, RunFlags

    template = load_spec(write(tmp_path, example_config()), {}, RunFlags())
    empty = tmp_path / "empty.toml"
    empty.write_text("")
    assert replace(template, source=None) == replace(load_spec(empty, {}, RunFlags()), source=None)
    demo = load_spec(None, {}, RunFlags())
    assert demo.load.concurrency == EMBEDDED_DEFAULTS["load.concurrency"] != (1,)
    text = example_config()
    assert "#   concurrency 1,8; 30 requests per target and level; 16 output tokens;" in text


def test_loadspec_defaults_unchanged() -> None:
    # Others rely on these defaults (embedded run, docs/config.md).
    assert LoadSpec().requests == 32 and LoadSpec().concurrency == (1,)


SIZES = [
    ("llama-3.1-8b-instruct", (8.0, 8.0)),
    ("meta-llama/Llama-3.1-405B", (405.0, 405.0)),
    ("Qwen2.5-0.5B-Instruct", (0.5, 0.5)),
    ("70B-instruct", (70.0, 70.0)),
    ("mixtral-8x7b-instruct-v0.1", (46.7, 12.9)),
    ("Mixtral-8x22B", (140.6, 39.1)),
    ("acme-8x7b", (46.7, 12.8)),
    ("qwen3-30b-a3b", (30.5, 3.3)),
    ("foo-100b-a10b", (100.0, 10.0)),
    ("smollm-135m", (0.135, 0.135)),
    ("mistral-7b-v0.3", (7.0, 7.0)),
    ("gpt-4o", None),
    ("llama-3.1", None),
    ("claude-sonnet", None),
]


@pytest.mark.parametrize(("name", "expected"), SIZES)
def test_infer_size(name: str, expected: tuple[float, float] | None) -> None:
    assert infer_size(name) == expected


def test_user_given_size_always_wins(tmp_path: Path) -> None:
    spec = load_spec(
        write(
            tmp_path,
            '[[model]]\nname = "llama-70b-fp8"\nparams_b = 69.0\nactive_params_b = 60.0\nbytes_per_param = 2.0\n',
        ),
        {},
    )
    m = spec.models[0]
    assert (m.params_b, m.active_params_b, m.bytes_per_param) == (69.0, 60.0, 2.0)
    assert infer_bytes_per_param("llama-70b-fp8") == 1.0
    assert infer_bytes_per_param("qwen-7b-awq") == 0.5
    assert infer_bytes_per_param("llama-7b") is None


def test_cli_config_error_is_one_line_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from tokrate.cli import main

    path = write(tmp_path, '[load]\nconcurrency = ["x"]\n')
    assert main(["run", "-c", str(path)]) == 2
    err = capsys.readouterr().err
    assert err == (
        f"tokrate: error: {path}: key 'load.concurrency': expected list of positive integers, got 'x'\n"
    )


def test_command_line_rates_replace_a_file_concurrency_sweep(tmp_path: Path) -> None:
    path = write(tmp_path, "[load]\nconcurrency = [1, 4]\n")
    spec = load_spec(path, {"load.rates": (2.0,), "load.mode": "open"})
    assert (spec.load.mode, spec.load.rates, spec.load.concurrency) == ("open", (2.0,), (1,))
    spec = load_spec(
        write(tmp_path, "[load]\nrates = [1.0]\n"),
        {"load.concurrency": (8,), "load.mode": "closed", "load.rates": ()},
    )
    assert (spec.load.mode, spec.load.concurrency) == ("closed", (8,))


def test_typed_section_overrides() -> None:
    from tokrate.spec.types import ClientSpec, SyntheticSpec, TimeoutsSpec

    client = ClientSpec(kind="httpx", timeouts=TimeoutsSpec(idle_s=3.0))
    spec = load_spec(None, {"client": client, "prompts.synthetic": SyntheticSpec(count=2)})
    assert spec.client == client
    assert spec.prompts.synthetic == SyntheticSpec(count=2)


def test_compare_thresholds_load_and_bad_ones_name_their_index(tmp_path: Path) -> None:
    from tokrate.errors import ConfigError
    from tokrate.spec.config_file import load_spec

    path = tmp_path / "bench.toml"
    path.write_text('[compare]\nthresholds = ["ttft_p95=+20%", "e2e_p95=off"]\n', encoding="utf-8")
    assert load_spec(path, {}).compare.thresholds == ("ttft_p95=+20%", "e2e_p95=off")
    path.write_text('[compare]\nthresholds = ["ttft_p95=+20%", "tpot_p50=-5%"]\n', encoding="utf-8")
    with pytest.raises(ConfigError, match=r"key 'compare.thresholds\[1\]': tpot_p50 gets worse"):
        load_spec(path, {})


# --- protocols and provider knobs (issue 16) ------------------------------------------


def _spec_from(tmp_path: Path, text: str) -> RunSpec:
    path = tmp_path / "bench.toml"
    path.write_text(text)
    return load_spec(path)


def test_protocol_and_knob_keys_load(tmp_path: Path) -> None:
    spec = _spec_from(
        tmp_path,
        """
[client]
api = "responses"
extra_body = { temperature = 0.0 }
headers = { "X-Run" = "1" }
[[endpoint]]
name = "az"
base_url = "https://r.openai.azure.com"
api_version = "2024-10-21"
api = "chat"
extra_body = { top_p = 0.9 }
[[model]]
name = "o3"
headers = { "X-Model" = "m" }
ignore_eos = false
max_tokens_field = "max_completion_tokens"
""",
    )
    (ep,) = spec.endpoints
    assert ep.kind == "azure" and ep.api == "chat" and ep.extra_body == (("top_p", 0.9),)
    (m,) = spec.models
    assert m.headers == (("X-Model", "m"),) and m.ignore_eos is False
    assert m.max_tokens_field == "max_completion_tokens"
    assert spec.client.api == "responses" and spec.client.headers == (("X-Run", "1"),)


@pytest.mark.parametrize(
    ("text", "words"),
    [
        (
            '[[endpoint]]\nname = "a"\nbase_url = "http://x"\nkind = "azure"',
            "key 'endpoint[0].api_version': required when kind = 'azure'",
        ),
        (
            '[[endpoint]]\nname = "a"\nbase_url = "http://x"\napi = "gemini"',
            "key 'endpoint[0].api': expected one of 'chat', 'completions', 'responses',"
            " 'anthropic'",
        ),
        (
            '[[endpoint]]\nname = "a"\nbase_url = "http://x"\nextra_body = { input = "x" }',
            "key 'endpoint[0].extra_body.input': reserved",
        ),
        (
            '[[endpoint]]\nname = "a"\nbase_url = "http://x"\n[[model]]\nname = "m"\n'
            'headers = { "Bad Name" = "x" }',
            "key 'model[0].headers': invalid header name 'Bad Name'",
        ),
        (
            '[[endpoint]]\nname = "a"\nbase_url = "http://x"\n[[model]]\nname = "m"\n'
            "extra_body = { when = 1979-05-27 }",
            "key 'model[0].extra_body.when': expected JSON-compatible value",
        ),
        ("[client]\nextra_body = { stream = false }", "key 'client.extra_body.stream': reserved"),
        (
            '[client]\nkind = "openai"\n[[endpoint]]\nname = "a"\nbase_url = "http://x"\n'
            'api = "anthropic"',
            "key 'endpoint[0].api': endpoint 'a' speaks 'anthropic', which the openai SDK",
        ),
    ],
)
def test_protocol_and_knob_errors_are_one_line(tmp_path: Path, text: str, words: str) -> None:
    with pytest.raises(ConfigError) as err:
        _spec_from(tmp_path, text)
    message = str(err.value)
    assert "\n" not in message and words in message, message


def test_simulator_models_keep_their_knobs(tmp_path: Path) -> None:
    from tokrate.sim.model import default_tiers

    spec = _spec_from(
        tmp_path,
        '[[model]]\nname = "sim-7b"\nextra_body = { top_k = 5 }\nignore_eos = true\n'
        'headers = { "X-A" = "1" }',
    )
    (target,) = resolve_targets(spec, ("http://127.0.0.1:1/v1", default_tiers()))
    assert target.simulated and target.model.params_b == 7.0
    assert target.model.extra_body == (("top_k", 5),) and target.model.ignore_eos is True
    assert target.model.headers == (("X-A", "1"),)
