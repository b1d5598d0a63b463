"""Confinement and bad values (issue 14): every bad flag or config value is one
``tokrate: error:`` line and exit 2, never a traceback, never a run folder (or any
file) outside the output folder, and a refused start leaves nothing behind."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections import namedtuple
from pathlib import Path

import pytest

from tokrate.cli import main
from tokrate.load.plan import build_plan
from tokrate.runfolder.loaded_run import load_run
from tokrate.spec.config_file import load_spec

#: A fast simulator run: one request, the clock 100x, no report.
FAST = ["--requests", "1", "--concurrency", "1", "--time-scale", "100", "--no-report", "--quiet"]
ROOT = Path(__file__).resolve().parents[2]


def _files(root: Path) -> set[Path]:
    return {p for p in root.rglob("*")}


def _refused(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """Run ``tokrate`` in-process; assert exit 2 and one error line; return it."""
    code = main(argv)
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert code == 2, err
    assert len(lines) == 1 and lines[0].startswith("tokrate: error: "), err
    return lines[0]


def _config(tmp_path: Path, text: str) -> str:
    path = tmp_path / "bench.toml"
    path.write_text(text, encoding="utf-8")
    return str(path)


# --- run ids ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "run_id", ["../x", "../../x", "/tmp/tokrate-abs-run", "a/b", "..", ".", ".hidden", "a" * 300]
)
def test_run_id_flag_must_be_one_safe_folder_name(
    run_id: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "reports"
    line = _refused(["run", *FAST, "--output-dir", str(out), "--run-id", run_id], capsys)
    assert "key 'output.run_id'" in line and "command line" in line
    assert "single folder name" in line and len(line) < 400
    assert _files(tmp_path) == set()
    assert not Path("/tmp/tokrate-abs-run").exists()


def test_run_id_from_the_config_file_is_checked_and_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = _config(tmp_path, '[output]\nrun_id = "../escaped"\n')
    line = _refused(["run", "-c", cfg, *FAST, "--output-dir", str(tmp_path / "r")], capsys)
    # The file set it, so the message names the file even though --output-dir
    # overrides a sibling key of the same table.
    assert line.startswith(f"tokrate: error: {cfg}: key 'output.run_id'")
    assert _files(tmp_path) == {Path(cfg)}


def test_a_plain_run_id_still_works(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["run", *FAST, "--output-dir", str(tmp_path), "--run-id", "night-2.v1_ok"])
    assert code == 0, capsys.readouterr().err
    assert len(load_run(tmp_path / "night-2.v1_ok").records) == 6  # one per simulator tier


# --- values that used to end in a traceback -------------------------------------------


def test_huge_max_tokens_flag(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["run", *FAST, "--output-dir", str(tmp_path), "--max-tokens", "9" * 26]
    line = _refused(argv, capsys)
    assert "key 'prompts.max_tokens'" in line and "64 bits" in line
    assert _files(tmp_path) == set()  # no half-made run folder


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("[load]\nrequests = 1e20\n", "key 'load.requests'"),
        ("[load]\nrequests = 99999999999999999999\n", "64 bits"),
        ("[load]\nseed = 99999999999999999999\n", "key 'load.seed'"),
        ("a = " + "[" * 5000 + "]" * 5000 + "\n", "nested too deeply"),
        ("[load]\nrequests = " + "9" * 5000 + "\n", "invalid TOML"),
        (
            '[[endpoint]]\nname = "e"\nbase_url = "http://[::1"\n[[model]]\nname = "m"\n',
            "key 'endpoint[0].base_url': invalid URL",
        ),
        (
            '[[endpoint]]\nname = "e"\nbase_url = "http://h:99999/v1"\n[[model]]\nname = "m"\n',
            "key 'endpoint[0].base_url': invalid URL",
        ),
    ],
    ids=["float-count", "int-65-bits", "seed", "deep-nesting", "5000-digits", "ipv6", "port"],
)
def test_bad_config_values(
    text: str, needle: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = _config(tmp_path, text)
    line = _refused(["run", "-c", cfg, "--output-dir", str(tmp_path / "r"), "--quiet"], capsys)
    assert needle in line and cfg in line and len(line) < 400
    assert _files(tmp_path) == {Path(cfg)}


@pytest.mark.parametrize(
    "flags",
    [
        ["--output-dir", "x" * 300],
        ["--prompts", "x" * 300],
        ["--baseline", "x" * 300],
        ["--baseline", "latest-good", "--thresholds-from-history", "x" * 300],
        ["--baseline", "no-such-run"],
    ],
    ids=["output-dir", "prompts", "baseline", "history", "missing-baseline"],
)
def test_unusable_paths_are_one_line_before_any_load(
    flags: list[str],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A name over the OS limit makes pathlib raise; a missing baseline used to be
    # found only after the whole run was measured.
    monkeypatch.chdir(tmp_path)
    line = _refused(["run", *FAST, *flags], capsys)
    assert len(line) < 800  # the user's own long path, named once or twice
    assert _files(tmp_path) == set()


# --- concurrency and rate -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "key"),
    [
        (f"[load]\nrequests = 1\nconcurrency = [{2**63 - 1}]\n", "load.concurrency"),
        ("[load]\nrequests = 1\nconcurrency = [1, 1000000]\n", "load.concurrency"),
        ("[load]\nrequests = 1\nrates = [1e20]\n", "load.rates"),
        ("[load]\nrequests = 1\nconcurrency = [1]\nworkers = 100000\n", "load.workers"),
    ],
)
def test_absurd_levels_are_refused_naming_the_key(
    text: str, key: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = _config(tmp_path, text)
    line = _refused(["run", "-c", cfg, "--output-dir", str(tmp_path / "r"), "--quiet"], capsys)
    assert f"key '{key}': at most" in line and "documented maximum" in line


def test_concurrency_flag_maximum(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["run", "--concurrency", "100001", "--requests", "1", "--output-dir", str(tmp_path)]
    assert "at most 100000" in _refused(argv, capsys)


def test_streams_are_capped_at_the_planned_requests() -> None:
    spec = load_spec(None, {"load.concurrency": (100_000,), "load.requests": 3})
    (sc,) = build_plan(spec, n_prompts=5, n_targets=2).scenarios
    assert sc.streams_per_target == 3  # not 100,000 idle tasks and pool slots
    spec = load_spec(None, {"load.concurrency": (4,), "load.duration_s": 1.0})
    (sc,) = build_plan(spec, n_prompts=5, n_targets=1).scenarios
    assert sc.streams_per_target == 4  # duration-bound: the level itself


def test_maximum_concurrency_with_one_request_runs_quickly(
    sim_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["run", "--base-url", sim_url, "-m", "sim-1b", "--concurrency", "100000"]
    argv += ["--requests", "1", "--max-tokens", "2", "--no-report", "--quiet"]
    code = main([*argv, "--output-dir", str(tmp_path), "--run-id", "wide"])
    assert code == 0, capsys.readouterr().err
    run = load_run(tmp_path / "wide")
    assert len(run.records) == 1
    assert run.records["concurrency"].to_list() == [100_000]  # the level, as asked


# --- refused starts leave nothing ------------------------------------------------------


def test_unreachable_endpoint_leaves_no_folder_and_a_rerun_works(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "reports"
    argv = ["run", "--base-url", "http://127.0.0.1:9/v1", "-m", "x", "--requests", "1"]
    argv += ["--output-dir", str(out), "--run-id", "same", "--quiet"]
    assert "unreachable" in _refused(argv, capsys)
    assert _files(tmp_path) == set()  # not even the output folder it would have made
    out.mkdir()
    assert "unreachable" in _refused(argv, capsys)  # not "already exists"
    assert _files(tmp_path) == {out}  # the user's own folder stays


def test_full_disk_leaves_no_folder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(shutil, "disk_usage", lambda _p: usage(1 << 30, 1 << 30, 0))
    line = _refused(["run", *FAST, "--output-dir", str(tmp_path / "r"), "--run-id", "a"], capsys)
    assert "MiB free" in line
    assert _files(tmp_path) == set()


# --- as a subprocess: no traceback at all --------------------------------------------------


def test_subprocess_bad_values_print_no_traceback(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    for extra in (["--max-tokens", "9" * 30], ["--run-id", "../../x"]):
        proc = subprocess.run(
            [sys.executable, "-m", "tokrate", "run", *FAST, "--output-dir", "out", *extra],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert proc.returncode == 2, proc.stderr
        assert "Traceback" not in proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1
    assert _files(tmp_path) == set()
