"""Property test of ``tokrate run`` (issue 14): generated flags (those of ``tokrate run
--help``) with hostile values (huge, negative, NaN, path traversal, unicode) and small
generated config files, against the simulator with tiny loads or endpoints that fail
fast. Whatever the input: an exit code tokrate documents, no traceback, and nothing
written outside the output folder.

In-process (``main``), so an exception that escapes the CLI fails the example with
its traceback; one example is repeated as a subprocess at the end to pin the same
contract for the console script. Values that would make a *valid* run long (many
requests, a slow simulator clock, a tiny rate) are not generated: the property is
about refusing bad input, not about finishing big loads. 60 examples take 10-30 s;
``TOKRATE_PROPERTY_EXAMPLES=1000`` hunts longer.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from tokrate.cli import main

EXIT_CODES = {0, 1, 2, 130, 143}
ROOT = Path(__file__).resolve().parents[2]
ABSOLUTE = "/tmp/tokrate-property-escape"

hostile_text = st.one_of(
    st.sampled_from(
        [
            "../x",
            "../../x",
            "..",
            ".",
            ABSOLUTE,
            "a/b",
            "x" * 300,
            "nan",
            "NaN",
            "inf",
            "-inf",
            "-1",
            "0",
            "1e20",
            "9" * 30,
            "-" + "9" * 30,
            "",
            " ",
            "日本語",
            "\u202e",
            "a\nb",
            "%s%n",
            "1,2,,3",
            "\x00",
        ]
    ),
    st.text(max_size=12),
)


def mostly(valid: st.SearchStrategy[str], bad: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    """A valid value half the time, so examples reach the run itself, not only the
    argument checks."""
    return st.booleans().flatmap(lambda ok: valid if ok else bad)


small_int = st.integers(1, 3).map(str)
huge_int = st.integers(2**63, 2**70).map(str)
negative_int = st.integers(-(2**70), 0).map(str)
bad_number = st.one_of(huge_int, negative_int, hostile_text)

#: Flag -> values: bounded valid ones and hostile ones.
FLAGS: dict[str, st.SearchStrategy[str]] = {
    "--requests": mostly(small_int, bad_number),
    "--max-tokens": mostly(small_int, bad_number),
    "--concurrency": mostly(st.sampled_from(["1", "1,2", "100000", "100001"]), bad_number),
    "--rate": mostly(st.sampled_from(["50", "100000", "1e20", "1,200"]), bad_number),
    "--arrival": mostly(st.sampled_from(["constant", "poisson", "gamma"]), hostile_text),
    "--duration": mostly(st.sampled_from(["0.2", "200ms", "0"]), bad_number),
    "--warmup": mostly(st.sampled_from(["0", "1", "0.1s"]), bad_number),
    "--targets-mode": mostly(st.sampled_from(["interleaved", "parallel"]), hostile_text),
    "--client": mostly(st.sampled_from(["fast", "httpx"]), hostile_text),
    "--api": mostly(st.sampled_from(["chat", "completions"]), hostile_text),
    "--seed": mostly(st.integers(-(2**80), 2**80).map(str), hostile_text),
    "--run-id": mostly(st.sampled_from(["ok-1", "r.2"]), hostile_text),
    "--hardware": mostly(st.sampled_from(["a100-80g", "h100-80g"]), hostile_text),
    "--workers": mostly(st.just("1"), bad_number),
    "--baseline": hostile_text,
    "--threshold": hostile_text,
    "--thresholds-from-history": hostile_text,
    "--label": hostile_text,
    "--prompts": hostile_text,
    "--model-check": mostly(st.sampled_from(["auto", "off"]), hostile_text),
    "--progress-interval": mostly(st.just("0.5"), bad_number),
    "--time-scale": mostly(st.sampled_from(["100", "1000"]), bad_number),
    "--api-key-env": hostile_text,
    "-c": hostile_text,
    "-m": mostly(st.sampled_from(["sim-1b", "nope"]), hostile_text),
}
SWITCHES = ["--quiet", "--json", "--no-report", "--no-preconnect"]
#: Endpoints: the embedded simulator (none), one that refuses at once, broken URLs.
BASE_URLS = st.one_of(
    st.none(),
    st.sampled_from(["http://127.0.0.1:9/v1", "http://[::1", "http://h:99999/v1", "ftp://x"]),
)

toml_value = st.one_of(
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.booleans(),
    hostile_text,
    st.lists(st.integers(-5, 2**64), max_size=3),
)
CONFIG_KEYS = {
    "load": ["concurrency", "rates", "warmup_requests", "seed", "mode", "workers", "duration_s"],
    "output": ["run_id", "label", "dir", "hardware", "progress_interval_s"],
    "prompts": ["max_tokens", "limit"],
    "client": ["kind", "api"],
}


def _toml(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    if isinstance(value, list):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    if isinstance(value, str):
        return json.dumps(value)  # a TOML basic string (or invalid TOML: also fine)
    return str(value)


@st.composite
def configs(draw: st.DrawFn) -> str | None:
    if draw(st.integers(0, 2)):
        return None
    lines: list[str] = []
    for section, keys in CONFIG_KEYS.items():
        chosen = draw(st.lists(st.sampled_from(keys), unique=True, max_size=2))
        if chosen:
            lines.append(f"[{section}]")
            lines += [f"{k} = {_toml(draw(toml_value))}" for k in chosen]
    if draw(st.booleans()):
        lines.append("[load]\nrequests = 1")  # may duplicate [load]: invalid TOML, fine
    return "\n".join(lines) + "\n"


@st.composite
def argvs(draw: st.DrawFn) -> tuple[list[str], str | None]:
    base_url = draw(BASE_URLS)
    argv = ["run", "--output-dir", "out"]
    if base_url is None:
        argv += ["--time-scale", "100"]
    else:
        argv += ["--base-url", base_url, "-m", "x"]
    # Defaults that keep a valid run tiny; generated flags come later and win.
    argv += ["--requests", "1", "--max-tokens", "2", "--concurrency", "1", "--no-report"]
    for flag in draw(st.lists(st.sampled_from(sorted(FLAGS)), max_size=3, unique=True)):
        argv += [flag, draw(FLAGS[flag])]
    argv += draw(st.lists(st.sampled_from(SWITCHES), max_size=2, unique=True))
    return argv, draw(configs())


def _snapshot(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


def _outside(before: set[str], after: set[str]) -> set[str]:
    """New paths, other than inside the output folder ``out``."""
    return {p for p in after - before if p != "out" and not p.startswith("out/")}


@pytest.mark.slow  # 60 runs of the CLI, in process (~20 s on 2 busy cores)
@settings(
    max_examples=int(os.environ.get("TOKRATE_PROPERTY_EXAMPLES", "60")),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(case=argvs())
def test_run_never_tracebacks_and_stays_in_the_output_dir(
    case: tuple[list[str], str | None],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv, config = case
    work = Path(tempfile.mkdtemp(dir=tmp_path))
    monkeypatch.chdir(work)
    if config is not None:
        (work / "bench.toml").write_text(config, encoding="utf-8", errors="surrogatepass")
        argv = [*argv, "-c", "bench.toml"]
    before_tmp = _snapshot(tmp_path)
    before_work = _snapshot(work)
    code = main(argv)
    err = capsys.readouterr().err
    event(f"exit {code}")
    assert code in EXIT_CODES, (argv, err)
    assert "Traceback" not in err, (argv, err)
    if code == 2 and "run complete" not in err:  # not a baseline verdict: refused
        errors = [ln for ln in err.splitlines() if ln.startswith("tokrate: error:")]
        assert len(errors) == 1, (argv, err)
        assert not (work / "out").exists() or not any((work / "out").iterdir()), argv
    assert _outside(before_work, _snapshot(work)) == set(), argv
    new_elsewhere = _snapshot(tmp_path) - before_tmp
    assert all(p.startswith(f"{work.name}/") for p in new_elsewhere), (argv, new_elsewhere)
    assert not Path(ABSOLUTE).exists(), argv


def test_console_script_bad_argv_is_one_line(tmp_path: Path) -> None:
    argv = ["--concurrency", str(2**63 - 1), "--run-id", "../../x", "--max-tokens", "9" * 30]
    proc = subprocess.run(
        [sys.executable, "-m", "tokrate", "run", "--requests", "1", "--output-dir", "out", *argv],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    assert not any(tmp_path.iterdir())
