"""`tokrate sim`: prints its base URL, serves, stops cleanly on SIGTERM/SIGINT."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from tokrate.cli import main


def _start(*args: str, env: dict[str, str] | None = None) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "tokrate", "sim", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **(env or {})},
    )
    assert proc.stdout is not None
    url = proc.stdout.readline().strip()
    return proc, url


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_cli_serves_until_signal(tmp_path: Path, sig: signal.Signals) -> None:
    log = tmp_path / "truth.jsonl"
    proc, url = _start(
        "--time-scale",
        "50",
        "--seed",
        "3",
        "--efficiency",
        "0.7",
        "--efficiency",
        "sim-70b=0.5",
        "--api-key",
        "SIM_TEST_KEY",
        "--truth-log",
        str(log),
        "--faults",
        "sim-1b:http_503=1",
        env={"SIM_TEST_KEY": "sk-canary-cli"},
    )
    try:
        assert url.startswith("http://127.0.0.1:") and url.endswith("/v1"), url
        auth = {"Authorization": "Bearer sk-canary-cli"}
        with httpx.Client(timeout=10, headers=auth) as c:
            models = {m["id"]: m["tokrate"] for m in c.get(f"{url}/models").json()["data"]}
            assert models["sim-70b"]["efficiency"] == 0.5 and models["sim-7b"]["efficiency"] == 0.7
            body = {
                "model": "sim-7b",
                "messages": [{"role": "user", "content": "hi"}],
                "max_tokens": 3,
            }
            assert (
                c.post(f"{url}/chat/completions", json=body).json()["usage"]["completion_tokens"]
                == 3
            )
            assert (
                c.post(f"{url}/chat/completions", json={**body, "model": "sim-1b"}).status_code
                == 503
            )
    finally:
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=15)
    assert proc.returncode == 0, err
    assert "sk-canary-cli" not in out + err
    assert err == ""
    rows = [json.loads(line) for line in log.read_text().splitlines()]
    assert [(r["model"], r["fault"]) for r in rows] == [("sim-7b", None), ("sim-1b", "http_503")]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--efficiency", "fast"], "--efficiency 'fast': not a number"),
        (["--efficiency", "sim-7b=1.5"], "must be in (0, 1]"),
        (["--hardware", "l4"], "do not fit"),
        (["--faults", "http_500=2"], "probability must be in [0, 1]"),
        (["--api-key", "TOKRATE_NO_SUCH_VAR"], "TOKRATE_NO_SUCH_VAR is not set"),
        (["--tiers", "/nonexistent/tiers.toml"], "tiers file not found"),
        (["--time-scale", "0"], "time_scale must be > 0"),
    ],
)
def test_cli_bad_input_is_one_line_exit_2(
    args: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["sim", *args]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err, err


def test_tiers_file(tmp_path: Path) -> None:
    from tokrate.errors import ConfigError
    from tokrate.sim.tiers import load_tiers_file

    path = tmp_path / "tiers.toml"
    path.write_text(
        'faults = "http_500=0.01"\n'
        '[hardware]\nname = "big"\nbandwidth_tb_s = 4.0\ntflops = 500\nmemory_gb = 192\n'
        '[[tier]]\nname = "sim-3b-int4"\nparams_b = 3\nbytes_per_param = 0.5\nefficiency = 0.6\n'
        'faults = "stall=0.1:seconds=1"\n'
        '[[tier]]\nname = "sim-fixed"\nparams_b = 1\nfixed_ttft_ms = 200\nfixed_itl_ms = 20\n'
        "output_tokens_min = 128\noutput_tokens_max = 128\n"
    )
    tf = load_tiers_file(path)
    assert [t.name for t in tf.tiers] == ["sim-3b-int4", "sim-fixed"]
    assert tf.tiers[0].active_params_b == 3.0 and tf.tiers[0].bytes_per_param == 0.5
    assert tf.hardware is not None and tf.hardware.bandwidth_bytes_per_s == 4e12
    assert tf.faults == "http_500=0.01"
    from tokrate.sim.server import SimConfig, build_state

    state = build_state(SimConfig(tiers_file=str(path)))
    assert state.timings["sim-3b-int4"].efficiency == 0.6
    assert [r.kind for r in state.faults.rules("sim-3b-int4")] == ["http_500", "stall"]
    for text, match in (
        ("[[tier]]\nname = 'x'\n", "missing required key 'params_b'"),
        ("[[tier]]\nname = 'x'\nparams_b = 'big'\n", r"tier\[0\]\.params_b: must be a number"),
        ("[[tier]]\nname = 'x'\nparams_b = 1\nwings = 2\n", r"tier\[0\]\.wings: unknown key"),
        ("tier = [\n", "invalid TOML"),
        ("include_defaults = true\nextra = 1\n", "unknown key 'extra'"),
        (
            "[[tier]]\nname = 'x'\nparams_b = 1\nfixed_itl_ms = 5\n",
            "both fixed_ttft_ms and fixed_itl_ms",
        ),
    ):
        path.write_text(text)
        with pytest.raises(ConfigError, match=match):
            load_tiers_file(path)
    path.write_text(
        "include_defaults = true\n[[tier]]\nname = 'sim-7b'\nparams_b = 7\nkv_heads = 8\n"
    )
    names = [t.name for t in load_tiers_file(path).tiers]
    assert names == ["sim-1b", "sim-13b", "sim-34b", "sim-70b", "sim-8x7b", "sim-7b"]


def test_simulator_process_carries_the_whole_config(tmp_path: Path) -> None:
    from tokrate.errors import SimulatorError
    from tokrate.sim.model import Tier
    from tokrate.sim.server import SimConfig, simulator_process

    log = tmp_path / "truth.jsonl"
    tier = Tier("sim-fixed", 7.0, 7.0, fixed_ttft_ms=0.0, fixed_itl_ms=0.0, faults="http_500=0")
    cfg = SimConfig(
        tiers=(tier,),
        api_key="sk-canary-proc",
        truth_log=str(log),
        seed=5,
        tier_efficiency={"sim-fixed": 0.5},
    )
    with simulator_process(cfg) as url, httpx.Client(timeout=10) as c:
        assert c.get(f"{url}/models").status_code == 401
        auth = {"Authorization": "Bearer sk-canary-proc"}
        models = c.get(f"{url}/models", headers=auth).json()["data"]
        assert [(m["id"], m["tokrate"]["efficiency"]) for m in models] == [("sim-fixed", 0.5)]
        body = {
            "model": "sim-fixed",
            "messages": [{"role": "user", "content": "hi"}],
            "max_tokens": 4,
        }
        r = c.post(f"{url}/chat/completions", json=body, headers=auth)
        assert r.json()["usage"]["completion_tokens"] == 4
    assert json.loads(log.read_text())["model"] == "sim-fixed"
    with pytest.raises(SimulatorError, match="do not fit"), simulator_process(hardware="l4"):
        pass  # pragma: no cover


def test_a_tiers_file_nested_too_deeply_is_one_line(tmp_path: Path) -> None:
    """The same TOML reader as configs: no RecursionError traceback from tomllib."""
    from tokrate.errors import ConfigError
    from tokrate.sim.tiers import load_tiers_file

    path = tmp_path / "deep.toml"
    path.write_text("x = " + "[" * 5000 + "]" * 5000 + "\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="nested too deeply") as info:
        load_tiers_file(path)
    assert "\n" not in str(info.value)
