"""Pre-flight before any load (issue 11): an unknown model, a server without /models, a
wrong key, the opt-out, and a run in which a target got no ok request at all.

Real loopback servers: the simulator (its /models lists its tiers) and the hostile
server (any status, any body, on every path).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from helpers.hostile_server import HostileServer

from tokrate.cli import main


@pytest.fixture(scope="module")
def hostile() -> Iterator[HostileServer]:
    with HostileServer() as s:
        yield s


def _run(out: Path, url: str, *models: str, extra: tuple[str, ...] = ()) -> int:
    argv = ["run", "--base-url", url, "--output-dir", str(out), "--no-report"]
    for m in models:
        argv += ["-m", m]
    argv += ["--concurrency", "2", "--requests", "4", "--max-tokens", "4", *extra]
    return main(argv)


def _error_line(err: str) -> str:
    lines = [ln for ln in err.splitlines() if ln.startswith("tokrate: error:")]
    assert len(lines) == 1, err
    return lines[0]


def test_unknown_model_exits_2_naming_it_with_a_suggestion(
    sim_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = _run(tmp_path, sim_url, "sim-7b", "sim-70x")
    line = _error_line(capsys.readouterr().err)
    assert code == 2
    assert "does not serve model 'sim-70x'" in line
    assert "did you mean 'sim-70b'" in line and "nothing was sent" in line
    assert not any(tmp_path.iterdir())  # no run folder: nothing was measured


def test_no_suggestion_lists_what_it_serves(
    sim_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _run(tmp_path, sim_url, "gpt-4o") == 2
    line = _error_line(capsys.readouterr().err)
    assert "it serves 'sim-1b', 'sim-7b'" in line and "and 1 more" in line


def test_without_models_list_a_probe_per_model_decides(
    hostile: HostileServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # /models answers an event stream (no list): one tiny request per model instead,
    # and the hostile server answers it fine, so the run goes ahead.
    assert _run(tmp_path, hostile.base_url("ok", tokens=3), "any-model") == 0
    probes = [r for r in hostile.requests if r["body"].get("max_tokens") == 1]
    assert probes and probes[-1]["body"]["model"] == "any-model"
    assert probes[-1]["body"]["stream"] is False


def test_probe_failure_shows_the_servers_status_and_body(
    hostile: HostileServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = hostile.base_url("status", code=404, body="The_model_x_does_not_exist")
    assert _run(tmp_path, url, "x") == 2
    line = _error_line(capsys.readouterr().err)
    assert "a one-token request to model 'x' failed (HTTP 404" in line
    assert "The model x does not exist" in line


def test_wrong_key_through_a_gateway_shows_the_reply_not_base_url(
    hostile: HostileServer,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    key = "sk-canary-0123456789abcdef"
    monkeypatch.setenv("GATEWAY_KEY", key)
    # The gateway answers 400 (not 401) to a bad key.
    url = hostile.base_url("status", code=400, body="invalid_api_key")
    code = _run(tmp_path, url, "m", extra=("--api-key-env", "GATEWAY_KEY"))
    err = capsys.readouterr().err
    line = _error_line(err)
    assert code == 2
    assert "(HTTP 400 Bad Request: " in line and "invalid api key" in line
    assert "check base_url" not in line and key not in err


def test_the_reply_line_is_redacted() -> None:
    from types import SimpleNamespace

    from tokrate.client.preflight import _reply

    key = "not-a-bearer-shape-key-1234"
    body = f'{{"error": "bad key {key}, Bearer abc.def and sk-abcdefghijk"}}\nsecond line'.encode()
    text = _reply(SimpleNamespace(status_code=400, reason_phrase="Bad Request", content=body), key)
    assert text.startswith("HTTP 400 Bad Request: {")
    assert key not in text and "abc.def" not in text and "sk-abcdefghijk" not in text
    assert "second line" not in text  # the first line only


def test_401_says_check_the_key(
    hostile: HostileServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = hostile.base_url("status", code=401, body="Incorrect_API_key_provided")
    assert _run(tmp_path, url, "m") == 2
    line = _error_line(capsys.readouterr().err)
    assert "answered HTTP 401" in line and "Incorrect API key provided" in line
    assert "API key" in line.split(";")[-2]


def test_model_check_off_skips_it_and_a_target_with_no_ok_request_exits_1(
    hostile: HostileServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = hostile.base_url("status", code=404, body="no_such_model")
    code = _run(tmp_path, url, "ghost", extra=("--model-check", "off"))
    err = capsys.readouterr().err
    assert code == 1, err
    (line,) = [ln for ln in err.splitlines() if ln.startswith("error: target")]
    host = url.split("/")[2]  # --base-url's endpoint is named by its host and port
    assert line.startswith(f"error: target {host}/ghost got 0 ok requests of 4 (http_4xx 4)")
    assert "HTTP 404" in line and "no such model" in line
    (run_dir,) = tmp_path.iterdir()
    import orjson

    run = orjson.loads((run_dir / "run.json").read_bytes())
    assert any(w.startswith(f"target {host}/ghost got 0 ok") for w in run["warnings"])


def test_one_failing_target_among_good_ones_exits_1_and_names_it(
    start_sim: Callable[..., str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = start_sim(faults="sim-70b:http_500=1.0")
    code = _run(tmp_path, url, "sim-1b", "sim-70b")
    err = capsys.readouterr().err
    assert code == 1, err
    failed = [ln for ln in err.splitlines() if ln.startswith("error: target")]
    host = url.split("/")[2]
    assert len(failed) == 1 and f"{host}/sim-70b got 0 ok requests of 4 (http_5xx 4)" in failed[0]


def test_probe_mode_checks_by_request_even_with_a_models_list(
    sim_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = _run(tmp_path, sim_url, "sim-1b", extra=("--model-check", "probe"))
    assert code == 0, capsys.readouterr().err


def test_401_from_a_keyed_simulator_keeps_its_words(
    start_sim: Callable[..., str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The simulator's 401 says "Missing bearer authentication in header."; the
    redactor takes a credential's shape after "bearer", never the server's own words."""
    url = start_sim(api_key="sk-sim-secret-0123456789")
    assert _run(tmp_path, url, "sim-1b") == 2
    line = _error_line(capsys.readouterr().err)
    assert "answered HTTP 401 Unauthorized:" in line
    assert "Missing bearer authentication in header." in line and "<redacted>" not in line
    assert line.endswith("; it wants an API key (api_key_env); nothing was sent")


def test_a_base_url_without_v1_gets_a_did_you_mean(
    sim_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base = sim_url.removesuffix("/v1")
    assert _run(tmp_path, base, "sim-1b") == 2
    line = _error_line(capsys.readouterr().err)
    assert "a one-token request to model 'sim-1b' failed (HTTP 404 Not Found" in line
    assert line.endswith(
        f"; did you mean base_url {base}/v1? (GET {base}/v1/models lists models); nothing was sent"
    )
    assert not any(tmp_path.iterdir())


def _checked_within(
    url: str, seconds: float, timeout_s: float = 1.5, *, warnings: bool = False
) -> dict[str, object]:
    """check_targets on ``url`` in a thread that must end within ``seconds`` (the old
    pre-flight read an endless /models answer for ever: a hang, not a failure);
    ``warnings``: collect the probe's warning lines in ``outcome["warnings"]``."""
    from tokrate.client.preflight import check_targets
    from tokrate.inputs.targets import Target
    from tokrate.spec.types import EndpointSpec, ModelSpec

    target = Target(EndpointSpec("e", url), ModelSpec("e", "m"))
    outcome: dict[str, object] = {}

    def work() -> None:
        try:
            said: list[str] | None = [] if warnings else None
            outcome["served"] = check_targets([target], {}, timeout_s=timeout_s, warnings=said)
            outcome["warnings"] = said
        except Exception as exc:  # the assertion below shows it
            outcome["error"] = exc

    thread = threading.Thread(target=work, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), "the pre-flight did not end"
    return outcome


@pytest.mark.parametrize("mode", ["models_huge", "models_drip", "models_odd"])
def test_a_models_answer_with_no_usable_list_falls_back_to_the_probe(
    hostile: HostileServer, mode: str
) -> None:
    """An endless list (read up to 16 MiB, not gigabytes), one that drips a byte every
    0.2 s (read for the pre-flight's timeout in all, not per read) and one whose entries
    are no models are each "no usable list": the one-token probe decides, and passes."""
    before = len(hostile.requests)
    outcome = _checked_within(hostile.base_url(mode), seconds=30)
    assert "error" not in outcome, outcome
    probes = [r for r in hostile.requests[before:] if r["body"].get("max_tokens") == 1]
    assert len(probes) == 1 and probes[0]["body"]["model"] == "m"


def test_served_models_needs_string_ids() -> None:
    from tokrate.client.preflight import served_models

    assert served_models(b'{"data": [{"id": 5}, null, "x"]}') is None
    assert served_models(b'[{"id": "a"}, {"id": "b"}]') == ["a", "b"]
    assert served_models(b'{"data": []}') is None


def test_a_5xx_probe_is_retried_then_a_warning_and_the_others_are_measured(
    start_sim: Callable[..., str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """One model of two answers 500 to everything: its pre-flight probe is tried three
    times, then the run goes on with a warning; the good model is measured, the bad
    one's failures are its records (exit 1: a target with no ok request), not exit 2
    with nothing sent."""
    url = start_sim(faults="sim-70b:http_500=1.0")
    code = _run(tmp_path, url, "sim-1b", "sim-70b", extra=("--model-check", "probe"))
    err = capsys.readouterr().err
    assert code == 1, err
    assert "failed 3 times (last: HTTP 500" in " ".join(err.split()), err
    (run_dir,) = tmp_path.iterdir()
    import polars as pl

    records = pl.read_parquet(run_dir / "records.parquet")
    by_model = dict(records.group_by("model").agg(pl.col("status").unique()).iter_rows())
    assert by_model == {"sim-1b": ["ok"], "sim-70b": ["error"]}, by_model


def test_a_4xx_probe_still_stops_the_run(
    hostile: HostileServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = len(hostile.requests)
    assert _run(tmp_path, hostile.base_url("status", code=400, body="bad"), "m") == 2
    assert len([r for r in hostile.requests[before:] if r["body"].get("max_tokens") == 1]) == 1


#: The hostile probe answers and the words of the warning each gives (issue 41, item 1).
_HOSTILE_PROBES = {
    "probe_drip": "an answer not complete within 10 s",
    "probe_endless": "an answer over 4,096 bytes",
    "probe_gzip": "an answer over 4,096 bytes",
    "probe_429": "HTTP 429",
}


@pytest.mark.parametrize("mode", list(_HOSTILE_PROBES))
def test_a_hostile_probe_answer_is_read_within_its_bound_then_warned(
    hostile: HostileServer, mode: str
) -> None:
    """/models gives no list, so the one-token probe decides, and its answer drips a
    byte a second, never ends, inflates a 256 KB gzip body to 256 MB, or is a 429: the
    pre-flight reads at most 4 KiB of it (decoded) and 10 s in all (the old one read the
    drip for ever, the endless body into gigabytes, the bomb whole, and stopped the run
    on the 429), then warns and lets the model be measured."""
    import tracemalloc

    url = hostile.base_url(mode)
    tracemalloc.start()
    try:
        outcome = _checked_within(url, seconds=45, warnings=True)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert "error" not in outcome, outcome
    (line,) = outcome["warnings"]  # type: ignore[misc]
    assert "a one-token request to model 'm' failed" in line
    assert _HOSTILE_PROBES[mode] in line and line.endswith(
        "measuring it anyway, its failures are its records"
    )
    assert peak < 16 << 20, peak  # the bomb's 256 MB never existed here


def test_a_slow_pre_flight_says_it_is_running_and_the_run_measures(
    hostile: HostileServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A pre-flight that takes more than a second says so (the terminal stayed silent
    for 120 s); the dripping probe ends in a warning and the model is measured."""
    code = _run(tmp_path, hostile.base_url("probe_drip", tokens=3), "m")
    err = " ".join(capsys.readouterr().err.split())
    assert code == 0, err
    assert "pre-flight: checking 1 endpoint before any load" in err
    assert "an answer not complete within 10 s" in err
    (run_dir,) = tmp_path.iterdir()
    import orjson

    assert orjson.loads((run_dir / "run.json").read_bytes())["counts"]["ok"] == 4
