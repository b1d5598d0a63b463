"""The README's nightly recipe, followed literally, passes night after night.

The command is taken from the README's GitHub Actions workflow itself (the `tokrate run`
line of its bench step, the run number filled in), run as a subprocess from a folder
that holds examples/nightly.toml as the checkout does: the embedded simulator, the
HTML report, `--baseline latest-good` against the reports folder the nights share. The
job's own rule decides each night (it fails on any code but 0 and 3).

Why 0 *or* 3 is a pass here: 3 means "no regression, but a row inconclusive" (the
client itself was overloaded), which a busy CI machine may honestly cause; the recipe
does not fail on it either. The false-alarm rate over 20 nights, quiet and loaded, is a
benchmark (benchmarks/false_alarms.py), not this test.
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tokrate.runfolder.store import LATEST_GOOD

ROOT = Path(__file__).resolve().parents[2]
NIGHTS = 3


def _recipe_argv(night: int) -> list[str]:
    """The README workflow's `tokrate run` command for run number ``night``."""
    import yaml

    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text[text.index("## Scheduled runs") :]
    block = re.search(r"```yaml\n(.*?)```", section, flags=re.S)
    assert block is not None
    steps = yaml.safe_load(block.group(1))["jobs"]["bench"]["steps"]
    (script,) = [s["run"] for s in steps if "tokrate run" in s.get("run", "")]
    joined = script.replace("\\\n", " ")
    (line,) = [ln.strip() for ln in joined.splitlines() if ln.strip().startswith("tokrate run")]
    argv = shlex.split(line.replace("${{ github.run_number }}", str(night)))
    return [sys.executable, "-m", "tokrate", *argv[1:]]


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_readme_nightly_recipe_passes_night_after_night(tmp_path: Path) -> None:
    (tmp_path / "examples").mkdir()
    shutil.copy(ROOT / "examples" / "nightly.toml", tmp_path / "examples" / "nightly.toml")
    reports = tmp_path / "reports"
    for night in range(NIGHTS):
        argv = _recipe_argv(night)
        assert "--baseline" in argv and "latest-good" in argv
        done = subprocess.run(
            argv, cwd=tmp_path, capture_output=True, text=True, timeout=600, check=False
        )
        assert done.returncode in (0, 3), (night, done.returncode, done.stderr)
        assert "Traceback" not in done.stderr
        run_dir = reports / f"nightly-{night}"
        assert (run_dir / "summary.md").is_file() and (run_dir / "report.html").is_file()
        if night == 0:
            # No baseline yet: the first night passes and becomes latest-good.
            assert done.returncode == 0 and "no baseline run yet" in done.stderr
        else:
            doc = json.loads((run_dir / "comparison.json").read_text())
            verdicts = {r["verdict"] for r in doc["results"]}
            assert "regressed" not in verdicts and "not_comparable" not in verdicts, doc
            if done.returncode == 3:
                assert "inconclusive" in verdicts
        if done.returncode == 0:
            # A clean pass moves the pointer: the next night is judged against this one.
            assert (reports / LATEST_GOOD).read_text().strip() == f"nightly-{night}"
