"""A llama-server's own size facts (GET /v1/models meta: n_params, size, ftype; GET
/props model_ftype) become the model's size and bytes per parameter when the user gave
none, and the run says so; a configured size the server contradicts is a warning.

Against the hostile server's llama mode, which reports whatever the test puts in its
URL (good values, bad ones, none); the real llama-server's own figures are checked in
tests/real_servers/test_llama_sizes.py.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from helpers.hostile_server import HostileServer

from tokrate.cli import main
from tokrate.inputs.served_sizes import with_served_sizes
from tokrate.inputs.targets import Target
from tokrate.runfolder.served_model import ServedModel
from tokrate.spec.types import EndpointSpec, ModelSpec


@pytest.fixture(scope="module")
def hostile() -> Iterator[HostileServer]:
    with HostileServer() as s:
        yield s


def _run(
    out: Path, url: str, *extra: str, config: Path | None = None
) -> tuple[int, dict[str, Any]]:
    argv = [
        "run",
        "--output-dir",
        str(out),
        "--no-report",
        "--requests",
        "2",
        "--max-tokens",
        "4",
        "--run-id",
        "r",
        *extra,
    ]
    argv += ["-c", str(config)] if config else ["--base-url", url, "-m", "m"]
    code = main(argv)
    return code, orjson.loads((out / "r" / "run.json").read_bytes())


def test_the_servers_size_is_used_and_said(
    hostile: HostileServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = hostile.base_url("llama", tokens=4, n_params=23468544, size=46950400, ftype="F16")
    code, run = _run(tmp_path, url)
    err = capsys.readouterr().err
    assert code == 0, err
    (target,) = run["targets"]
    assert target["params_b"] == target["active_params_b"] == 23468544 / 1e9
    assert target["bytes_per_param"] == 2.001  # size / n_params, the file's own ratio
    assert (target["size_source"], target["bytes_source"]) == ("server", "server")
    assert target["served"] == {
        "context_tokens": 2048,
        "params": 23468544,
        "weight_bytes": 46950400,
        "weight_type": "F16",
        "source": "GET /models",
        "simulator": False,
    }
    host = url.split("/")[2]
    assert (
        f"note: size of {host}/m: the server reports 23,468,544 parameters, F16 weights"
        " (2.00 bytes per parameter) (GET /models); used for its size and bound"
    ) in err.splitlines()


def test_a_configured_size_wins_and_a_contradiction_warns(
    hostile: HostileServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = hostile.base_url("llama", tokens=4, n_params=23468544, size=46950400, ftype="F16")
    config = tmp_path / "bench.toml"
    config.write_text(
        f'[[endpoint]]\nname = "llama"\nbase_url = "{url}"\n\n'
        '[[model]]\nname = "m"\nparams_b = 8.0\nbytes_per_param = 2.0\n',
        encoding="utf-8",
    )
    code, run = _run(tmp_path, url, config=config)
    err = capsys.readouterr().err
    assert code == 0, err
    (target,) = run["targets"]
    assert (target["params_b"], target["size_source"], target["bytes_source"]) == (
        8.0,
        "config",
        "config",
    )
    line = (
        "target llama/m: params_b = 8 in the config, but the server reports 23,468,544"
        " parameters, F16 weights (2.00 bytes per parameter) (GET /models): charts place it"
        " at 8B as configured; check the config"
    )
    assert line in run["warnings"] and f"warning: {line}" in err.splitlines()
    assert not [w for w in run["warnings"] if "bytes_per_param" in w]  # 2.0 agrees


def test_props_names_the_weights_and_bad_values_are_ignored(
    hostile: HostileServer, tmp_path: Path
) -> None:
    url = hostile.base_url("llama", tokens=4, n_params=1000000, size=600000, props_ftype="Q4_K_M")
    code, run = _run(tmp_path / "a", url)
    assert code == 0
    served = run["targets"][0]["served"]
    assert (served["weight_type"], served["source"]) == ("Q4_K_M", "GET /models, GET /props")
    assert run["targets"][0]["bytes_per_param"] == 0.6
    # A negative count, a string size, a boolean type: nothing taken, the run goes on.
    url = hostile.base_url("llama", tokens=4, n_params=-5, size="big", ftype="true")
    code, run = _run(tmp_path / "b", url)
    (target,) = run["targets"]
    assert code == 0 and target["params_b"] is None and target["size_source"] is None
    assert target["served"] == {
        "context_tokens": 2048,
        "params": None,
        "weight_bytes": None,
        "weight_type": None,
        "source": "GET /models",
        "simulator": False,
    }


def test_a_mixture_of_experts_name_keeps_its_active_share() -> None:
    endpoint = EndpointSpec("e", "http://127.0.0.1:1/v1")
    moe = Target(
        endpoint,
        ModelSpec("e", "mixtral-8x7b", params_b=46.7, active_params_b=12.9),
        size_source="name",
        bytes_source=None,
    )
    served = ServedModel(params=46_702_792_704, weight_bytes=26_443_000_000, weight_type="Q4_K_M")
    (sized,), notes, warnings = with_served_sizes([moe], {"e/mixtral-8x7b": served})
    assert sized.model.params_b == pytest.approx(46.7028, abs=1e-4)
    assert sized.model.active_params_b == pytest.approx(46.7028 * 12.9 / 46.7, abs=1e-4)
    assert sized.model.bytes_per_param == 0.566 and warnings == [] and len(notes) == 1


def test_control_characters_from_models_metadata_are_never_stored() -> None:
    """A /models (or /props) weight type carrying an escape sequence (issue 41): what
    run.json keeps, and the report and terminal print, has no control character."""
    from tokrate.client.preflight import served_model

    meta = {"n_params": 1000, "size": 2000, "ftype": "\x1b[2J\x1b]0;pwned\x07Q4_K_M\r\n"}
    payload = orjson.dumps({"data": [{"id": "m", "meta": meta}]})
    served = served_model(payload, "m")
    assert served is not None and served.weight_type == "[2J]0;pwnedQ4_K_M"
    only_controls = orjson.dumps({"data": [{"id": "m", "meta": {"n_params": 9, "ftype": "\x1b"}}]})
    assert served_model(only_controls, "m") == ServedModel(params=9, source="GET /models")


def test_a_target_the_server_sizes_into_another_place_keeps_its_own_requests(
    hostile: HostileServer, tmp_path: Path
) -> None:
    """Sizes the server reports re-sort the targets (smallest first): the plan's
    scenarios, built before the pre-flight, must follow, so every request of
    "c=1 [a-unsized]" goes to a-unsized. Here z-big (configured 100B) came first while
    a-unsized had no size; the server then sizes a-unsized at 23M, ahead of it."""
    url = hostile.base_url(
        "llama", tokens=4, n_params=23468544, size=46950400, ftype="F16", ids="a-unsized:z-big"
    )
    config = tmp_path / "bench.toml"
    config.write_text(
        f'[load]\ntargets = "sequential"\n\n[[endpoint]]\nname = "llama"\nbase_url = "{url}"\n\n'
        '[[model]]\nname = "z-big"\nparams_b = 100.0\nbytes_per_param = 2.0\n\n'
        '[[model]]\nname = "a-unsized"\n',
        encoding="utf-8",
    )
    code, run = _run(tmp_path, url, config=config)
    assert code == 0
    assert [t["model"] for t in run["targets"]] == ["a-unsized", "z-big"]
    lines = (tmp_path / "r" / "records.jsonl").read_bytes().splitlines()
    records = [orjson.loads(line) for line in lines]
    assert len(records) == 4
    for record in records:
        assert record["scenario"].endswith(f"[{record['model']}]"), record["scenario"]
