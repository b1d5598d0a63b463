"""The wheel carries the bundled prompt sets from the top-level prompts/ folder.

Builds a real wheel with pip (build isolation: the setuptools pyproject.toml asks for),
checks its file list, then imports tokrate from the unpacked wheel alone (PYTHONPATH
first, so the checkout's editable install is not what answers) and loads every set.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_built_wheel_contains_and_loads_the_bundled_sets(tmp_path: Path) -> None:
    wheels = tmp_path / "wheels"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(wheels), str(ROOT)],
        check=True,
        capture_output=True,
        text=True,
        timeout=600,
    )
    (wheel,) = wheels.glob("tokrate-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    shipped = sorted(n for n in names if n.startswith("tokrate/prompts/"))
    expected = sorted(f"tokrate/prompts/{p.name}" for p in (ROOT / "prompts").glob("*.jsonl"))
    assert shipped == expected and len(expected) == 7
    assert not [n for n in names if n.startswith("prompts/")], "no top-level package 'prompts'"

    unpacked = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(unpacked)
    probe = (
        "import json, tokrate\n"
        "from tokrate.inputs.prompts import load_prompts\n"
        "from tokrate.spec.bundled import bundled_sets\n"
        "from tokrate.spec.types import PromptsSpec\n"
        "prompts = load_prompts(PromptsSpec())\n"
        "print(json.dumps({'file': tokrate.__file__, 'sets': bundled_sets(),"
        " 'tasks': sorted({p.task for p in prompts}), 'n': len(prompts)}))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(unpacked)}
    done = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=tmp_path,
        env=env,
        check=True,
        capture_output=True,
        text=True,
        timeout=120,
    )
    seen = json.loads(done.stdout)
    assert seen["file"].startswith(str(unpacked))
    assert seen["sets"] == [p.stem for p in sorted((ROOT / "prompts").glob("*.jsonl"))]
    # The default prompts: SHIPPED_SETS (tools and structured are sent only when named).
    assert seen["tasks"] == ["chat", "classification", "code", "extraction", "summarization"]
    assert seen["n"] == 100
