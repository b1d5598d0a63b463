"""Issue 12: built-in profiles, custom ``bandwidth=...`` strings and TOML files for the
bound line, with one-line errors at config load and on the CLI."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.synthetic import synthetic_run

from tokrate.errors import ConfigError
from tokrate.hardware import (
    CUSTOM_DEFAULT_MEMORY_BYTES,
    CUSTOM_FLOPS_PER_BYTE,
    HARDWARE_PROFILES,
    get_hardware,
)
from tokrate.report.build import build_report
from tokrate.spec.config_file import load_spec

NEW = (
    "h100-pcie",
    "h20",
    "b200",
    "mi300x",
    "l40s",
    "a10g",
    "m2-ultra",
    "m3-max",
    "m4-max",
    "cpu-ddr5-2ch",
    "cpu-ddr5-8ch",
    "cpu-ddr5-12ch",
)


def test_every_builtin_profile_is_sane() -> None:
    for key, p in HARDWARE_PROFILES.items():
        assert key == p.name == p.name.lower() and " " not in p.name
        assert p.bandwidth_bytes_per_s > 0 and p.flops_per_s > 0 and p.memory_bytes > 0
        assert p.description.strip()
        # A datasheet slip of 1000x shows as an absurd FLOP-per-byte ratio.
        assert 1 < p.flops_per_s / p.bandwidth_bytes_per_s < 1000, p.name
    descriptions = [p.description for p in HARDWARE_PROFILES.values()]
    assert len(set(descriptions)) == len(descriptions)


@pytest.mark.parametrize("name", NEW)
def test_new_names_resolve(name: str) -> None:
    assert get_hardware(name) is HARDWARE_PROFILES[name]


def test_datasheet_figures() -> None:
    assert get_hardware("h100-pcie").bandwidth_bytes_per_s == 2.0e12
    assert get_hardware("b200").flops_per_s == pytest.approx(2.25e15)
    assert get_hardware("mi300x").memory_bytes == 192e9
    assert get_hardware("l40s").bandwidth_bytes_per_s == pytest.approx(864e9)
    assert get_hardware("m4-max").bandwidth_bytes_per_s == pytest.approx(546e9)
    assert get_hardware("cpu-ddr5-8ch").bandwidth_bytes_per_s == pytest.approx(8 * 4800e6 * 8)


@pytest.mark.parametrize(
    ("spec", "bw", "flops", "mem"),
    [
        ("bandwidth=900GB/s", 9e11, None, None),
        ("bandwidth=900 GB/s", 9e11, None, None),
        ("bandwidth=2TB/s,flops=300TFLOPS,memory=48GB", 2e12, 3e14, 48e9),
        ("bandwidth=512MB/s,flops=2.5PFLOPS,memory=1TB", 512e6, 2.5e15, 1e12),
        ("bandwidth=100KB/s,flops=500GFLOPS,memory=16GiB", 1e5, 5e11, 16 * 2**30),
        ("bandwidth=1e9B/s,flops=1e12FLOPS", 1e9, 1e12, None),
        ("bandwidth=1.5tb/s", 1.5e12, None, None),
    ],
)
def test_custom_strings_parse_to_exact_values(
    spec: str, bw: float, flops: float | None, mem: float | None
) -> None:
    p = get_hardware(spec)
    assert p.bandwidth_bytes_per_s == pytest.approx(bw, rel=1e-12)
    assert p.flops_per_s == pytest.approx(flops or bw * CUSTOM_FLOPS_PER_BYTE, rel=1e-12)
    assert p.memory_bytes == pytest.approx(mem or CUSTOM_DEFAULT_MEMORY_BYTES, rel=1e-12)
    assert p.name == "custom"


def test_custom_description_names_the_numbers_and_the_defaults() -> None:
    p = get_hardware("bandwidth=900GB/s")
    assert p.bandwidth_bytes_per_s == 9e11
    assert p.description.startswith("custom: 900 GB/s")
    assert p.description.count("(default)") == 2
    named = get_hardware("bandwidth=900GB/s,flops=300TFLOPS,memory=48GB,name=my-gpu")
    assert named.name == "my-gpu" and "(default)" not in named.description
    assert named.scaled(2).name == "2xmy-gpu"


def test_toml_file(tmp_path: Path) -> None:
    f = tmp_path / "gpu.toml"
    f.write_text(
        'name = "lab-card"\nbandwidth_gb_s = 1200\nflops_tflops = 250\nmemory_gb = 64\n',
        encoding="utf-8",
    )
    p = get_hardware(str(f))
    assert (p.name, p.bandwidth_bytes_per_s, p.flops_per_s, p.memory_bytes) == (
        "lab-card",
        1.2e12,
        2.5e14,
        64e9,
    )
    assert "1200 GB/s" in p.description
    only_bw = tmp_path / "Other.TOML"
    only_bw.write_text("bandwidth_gb_s = 100\n", encoding="utf-8")
    q = get_hardware(str(only_bw))
    assert q.name == "Other" and q.flops_per_s == pytest.approx(100e9 * CUSTOM_FLOPS_PER_BYTE)


def _one_line_error(value: str, match: str) -> str:
    """The message of the ConfigError ``value`` raises (matching ``match``)."""
    with pytest.raises(ConfigError, match=match) as info:
        get_hardware(value)
    return str(info.value)


@pytest.mark.parametrize(
    ("value", "match"),
    [
        ("bandwidth=fast", r"^hardware 'bandwidth=fast': expected bandwidth=<number><unit> like "),
        ("bandwidth=900", r"expected bandwidth=<number><unit> like 900GB/s \(units: B/s, KB/s"),
        ("bandwidth=900GB", r"expected bandwidth="),
        ("bandwidth=900Gbit/s", r"expected bandwidth="),
        ("bandwidth=0GB/s", r"bandwidth must be > 0"),
        ("bandwidth=1e999GB/s", r"bandwidth must be > 0"),
        ("bandwidth=-1GB/s", r"expected bandwidth="),
        ("bandwidth=nanGB/s", r"expected bandwidth="),
        ("bandwidth=1GB/s,flops=fast", r"expected flops=<number><unit> like 300TFLOPS"),
        ("bandwidth=1GB/s,memory=48", r"expected memory=<number><unit> like 48GB"),
        ("bandwidth=1GB/s,bandwidth=2GB/s", r"bandwidth given twice"),
        ("bw=1GB/s", r"keys bandwidth, flops, memory, name, got 'bw=1GB/s'"),
        ("flops=1TFLOPS", r"bandwidth=<number><unit> \(like 900GB/s\) is required"),
        ("bandwidth=1GB/s,", r"got ''"),
        ("tpu", r"unknown hardware profile 'tpu' \(known: .*a100-80g.*; or bandwidth=900GB/s"),
        ("missing.toml", r"^hardware file 'missing.toml': file not found"),
    ],
)
def test_bad_values_give_one_line_config_errors(value: str, match: str) -> None:
    message = _one_line_error(value, match)
    assert "\n" not in message
    assert repr(value) in message or value in message


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("bandwidth_gb_s = 'fast'\n", r"bandwidth_gb_s must be a number > 0, got 'fast'"),
        ("flops_tflops = 1\n", r"bandwidth_gb_s must be a number > 0, got None"),
        ("bandwidth_gb_s = 0\n", r"bandwidth_gb_s must be a number > 0"),
        ("bandwidth_gb_s = 1\nmemory_gb = true\n", r"memory_gb must be a number > 0"),
        ("bandwidth_gb_s = 1\nspeed = 2\n", r"unknown key 'speed' \(known: bandwidth_gb_s"),
        ("bandwidth_gb_s = 1\nname = 3\n", r"name must be a string"),
        ("bandwidth_gb_s = [\n", r"invalid TOML"),
    ],
)
def test_bad_toml_files(tmp_path: Path, text: str, match: str) -> None:
    f = tmp_path / "bad.toml"
    f.write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError, match=match) as info:
        get_hardware(str(f))
    assert "\n" not in str(info.value) and str(f) in str(info.value)


def test_config_accepts_custom_and_names_the_key_on_error(tmp_path: Path) -> None:
    cfg = tmp_path / "c.toml"
    endpoint = '[[endpoint]]\nname = "gpu"\nbase_url = "http://127.0.0.1:9/v1"\n'
    cfg.write_text(
        endpoint + '[output]\nhardware = "bandwidth=900GB/s"\n[simulator]\nhardware = "l40s"\n',
        encoding="utf-8",
    )
    spec = load_spec(cfg)
    assert spec.output.hardware == "bandwidth=900GB/s"
    cfg.write_text('[simulator]\nhardware = "bandwidth=fast"\n', encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        load_spec(cfg)
    msg = str(info.value)
    assert "\n" not in msg and "simulator.hardware" in msg and "'bandwidth=fast'" in msg
    assert msg.startswith(str(cfg))


def test_the_embedded_simulator_runs_on_the_hardware_the_bound_is_drawn_for(
    tmp_path: Path,
) -> None:
    """--hardware with the embedded simulator moves the simulator too (issue 38): the
    chart never sets points measured on one GPU against another's bound. Two different
    profiles for the two is refused in one line."""
    spec = load_spec(None, {"output.hardware": "h100-sxm"})
    assert (spec.simulator.hardware, spec.output.hardware) == ("h100-sxm", "h100-sxm")
    cfg = tmp_path / "c.toml"
    cfg.write_text('[simulator]\nhardware = "l40s"\n', encoding="utf-8")
    spec = load_spec(cfg)
    assert (spec.simulator.hardware, spec.output.hardware) == ("l40s", "l40s")
    with pytest.raises(ConfigError) as info:
        load_spec(cfg, {"output.hardware": "h100-sxm"})
    msg = str(info.value)
    assert "\n" not in msg and msg.startswith("command line: key 'output.hardware'")
    assert "the embedded simulator runs on ('l40s', simulator.hardware)" in msg


def test_config_toml_path_is_relative_to_the_config_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    conf_dir = tmp_path / "conf"
    conf_dir.mkdir()
    (conf_dir / "gpu.toml").write_text("bandwidth_gb_s = 700\n", encoding="utf-8")
    cfg = conf_dir / "c.toml"
    cfg.write_text('[output]\nhardware = "gpu.toml"\n', encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    spec = load_spec(cfg)
    assert Path(spec.output.hardware) == (conf_dir / "gpu.toml").resolve()
    assert get_hardware(spec.output.hardware).bandwidth_bytes_per_s == 7e11
    # A command-line value is relative to the current directory instead.
    (tmp_path / "cli.toml").write_text("bandwidth_gb_s = 50\n", encoding="utf-8")
    over = load_spec(cfg, {"output.hardware": "cli.toml"})
    assert Path(over.output.hardware) == tmp_path / "cli.toml"
    with pytest.raises(ConfigError, match=r"^command line: .*output.hardware.*file not found"):
        load_spec(cfg, {"output.hardware": "gpu.toml"})


def test_simulator_tiers_file_is_relative_to_the_config_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    conf_dir = tmp_path / "conf"
    conf_dir.mkdir()
    cfg = conf_dir / "c.toml"
    cfg.write_text('[simulator]\ntiers_file = "tiers.toml"\n', encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    assert load_spec(cfg).simulator.tiers_file == str(conf_dir.resolve() / "tiers.toml")
    over = load_spec(cfg, {"simulator.tiers_file": "mine.toml"})
    assert over.simulator.tiers_file == str(tmp_path / "mine.toml")


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("hwruns") / "r"
    return synthetic_run(path, run_id="r", concurrency=(1,), requests_per_level=8, output_tokens=16)


def test_report_with_custom_hardware_names_it(run_dir: Path, tmp_path: Path) -> None:
    out = build_report([run_dir], tmp_path / "out", hardware="bandwidth=100GB/s")
    html = (out / "report.html").read_text(encoding="utf-8")
    assert "custom: 100 GB/s" in html


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
    return subprocess.run(
        [sys.executable, "-m", "tokrate", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )


def test_cli_report_bad_hardware_exits_2_with_one_line(run_dir: Path, tmp_path: Path) -> None:
    proc = _cli("report", str(run_dir), "-o", str(tmp_path / "o"), "--hardware", "bandwidth=x")
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr
    assert "'bandwidth=x'" in lines[0] and "expected bandwidth=<number><unit>" in lines[0]


def test_simulator_places_tiers_on_a_custom_profile() -> None:
    from tokrate.sim.server import SimConfig, build_state

    state = build_state(SimConfig(hardware="bandwidth=1TB/s,flops=200TFLOPS,memory=400GB"))
    hw = {t.hardware.name.split("x", 1)[-1] for t in state.timings.values()}
    assert hw == {"custom"}  # multi-GPU tiers get "<n>xcustom"


def test_cli_sim_bad_hardware_exits_2_with_one_line() -> None:
    proc = _cli("sim", "--hardware", "bandwidth=1GB/s,memory=lots")
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr
    assert "expected memory=<number><unit> like 48GB" in lines[0]
