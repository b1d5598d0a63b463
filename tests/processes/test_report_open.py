"""`tokrate report --open` where no browser can start (issue 38): the report is still
written, the page's path printed, and one line on stderr says it could not be opened,
instead of nothing. A real `tokrate report` process, its browser chosen by BROWSER."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.synthetic import synthetic_run


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("openrun") / "r"
    return synthetic_run(path, run_id="r", concurrency=(1,), requests_per_level=8)


def _report(run_dir: Path, out: Path, browser: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY")}
    env["BROWSER"] = browser
    root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
    return subprocess.run(
        [sys.executable, "-m", "tokrate", "report", str(run_dir), "-o", str(out), "--open"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )


def test_open_without_a_browser_says_so(run_dir: Path, tmp_path: Path) -> None:
    # `false` is a browser command that cannot open anything (exit status 1).
    proc = _report(run_dir, tmp_path / "a", "false")
    page = tmp_path / "a" / "report.html"
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == str(page) and page.is_file()
    assert proc.stderr.strip() == (
        f"tokrate: warning: report --open: no browser to open {page} here (set BROWSER, "
        "or open the file yourself)"
    )


def test_open_with_a_browser_is_quiet(run_dir: Path, tmp_path: Path) -> None:
    proc = _report(run_dir, tmp_path / "b", "true")
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
