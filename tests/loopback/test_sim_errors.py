"""Bad requests get OpenAI-style error objects; the server keeps serving."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tokrate.errors import ConfigError, SimulatorError
from tokrate.sim.model import Tier
from tokrate.sim.server import SimConfig, build_state, running_simulator

MSG = [{"role": "user", "content": "hi"}]


@pytest.fixture
def client() -> Iterator[httpx.Client]:
    with httpx.Client(timeout=10) as c:
        yield c


def _error(r: httpx.Response, status: int) -> dict[str, Any]:
    assert r.status_code == status, r.text
    assert r.headers["content-type"] == "application/json"
    err = r.json()["error"]
    assert set(err) == {"message", "type", "param", "code"}
    assert isinstance(err["message"], str) and err["message"]
    return err


@pytest.mark.parametrize(
    ("body", "status", "param", "code"),
    [
        ({"model": "sim-1b", "messages": MSG, "n": 2}, 400, "n", "unsupported_parameter"),
        (
            {"model": "sim-1b", "messages": MSG, "best_of": 3},
            400,
            "best_of",
            "unsupported_parameter",
        ),
        (
            {"model": "sim-1b", "messages": MSG, "logprobs": True},
            400,
            "logprobs",
            "unsupported_parameter",
        ),
        ({"model": "nope", "messages": MSG}, 404, "model", "model_not_found"),
        ({"messages": MSG}, 400, "model", None),
        ({"model": "sim-1b"}, 400, "messages", None),
        ({"model": "sim-1b", "messages": ["x"]}, 400, "messages[0]", None),
        ({"model": "sim-1b", "messages": MSG, "max_tokens": 0}, 400, "max_tokens", None),
        ({"model": "sim-1b", "messages": MSG, "max_tokens": "9"}, 400, "max_tokens", None),
        (
            {"model": "sim-1b", "messages": MSG, "stream_options": {"include_usage": True}},
            400,
            "stream_options",
            None,
        ),
        (
            {"model": "sim-7b", "messages": [{"role": "user", "content": "x" * 17000}]},
            400,
            "messages",
            "context_length_exceeded",
        ),
        (
            {"model": "sim-7b", "messages": MSG, "max_tokens": 5000},
            400,
            "messages",
            "context_length_exceeded",
        ),
    ],
)
def test_bad_chat_requests(
    sim_url: str,
    client: httpx.Client,
    body: dict[str, Any],
    status: int,
    param: str,
    code: str | None,
) -> None:
    err = _error(client.post(f"{sim_url}/chat/completions", json=body), status)
    assert (err["param"], err["code"]) == (param, code)
    if param == "n":
        assert "'n'" in err["message"]


def test_invalid_json_and_wrong_routes(sim_url: str, client: httpx.Client) -> None:
    assert (
        _error(client.post(f"{sim_url}/chat/completions", content=b"{not json"), 400)["type"]
        == "invalid_request_error"
    )
    _error(client.post(f"{sim_url}/chat/completions", content=b"[1, 2]"), 400)
    _error(
        client.post(f"{sim_url}/completions", json={"model": "sim-1b", "prompt": ["a", "b"]}), 400
    )
    _error(client.get(f"{sim_url}/chat/completions"), 405)
    _error(client.get(f"{sim_url}/nothing-here"), 404)
    _error(client.get(f"{sim_url}/models/nope"), 404)
    # still serving
    r = client.post(
        f"{sim_url}/chat/completions", json={"model": "sim-1b", "messages": MSG, "max_tokens": 1}
    )
    assert r.status_code == 200


def test_api_key_required_when_set(start_sim: Any, client: httpx.Client) -> None:
    key = "sk-canary-0123456789"
    url = start_sim(api_key=key)
    body = {"model": "sim-1b", "messages": MSG, "max_tokens": 1}
    missing = client.post(f"{url}/chat/completions", json=body)
    wrong = client.post(
        f"{url}/chat/completions", json=body, headers={"Authorization": "Bearer sk-wrong"}
    )
    for r in (missing, wrong):
        assert _error(r, 401)["code"] == "invalid_api_key"
        assert key not in r.text and "sk-wrong" not in r.text
    assert client.get(f"{url}/models").status_code == 401
    ok = client.post(
        f"{url}/chat/completions", json=body, headers={"Authorization": f"Bearer {key}"}
    )
    assert ok.status_code == 200
    assert client.get(url.removesuffix("/v1") + "/health").status_code == 200
    assert key not in repr(SimConfig(api_key=key))


def test_tiers_that_do_not_fit_are_refused_before_start() -> None:
    with pytest.raises(SimulatorError, match=r"tier 'sim-13b'.*do not fit 1 x l4"):
        build_state(SimConfig(hardware="l4"))
    with (
        pytest.raises(SimulatorError, match="sim-70b"),
        running_simulator(SimConfig(tiers=(Tier("sim-70b", 70, 70, gpus=1),))),
    ):
        pass  # pragma: no cover
    with pytest.raises(ConfigError, match="unknown tier 'sim-x'"):
        build_state(SimConfig(tier_efficiency={"sim-x": 0.5}))
    with pytest.raises(ConfigError, match="unknown hardware profile"):
        build_state(SimConfig(hardware="tpu"))
