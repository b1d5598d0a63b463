"""``.ci/real-servers-setup`` on a machine whose registry has no ``torch==2.13.0+cpu``:
one clear line, the transformers part skipped, the setup itself not failed.

Nothing is downloaded: pip reads no config file (this image's names a wheel folder that
holds the torch wheel), its local wheel folder and its index are empty folders of the
test's own (a registry without the wheel answers "No matching distribution" just as
fast), and ``TORCH_INDEX_URL`` points at a closed port on 127.0.0.1.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SETUP = ROOT / ".ci" / "real-servers-setup"


def test_no_torch_wheel_skips_transformers_with_one_line(tmp_path: Path) -> None:
    (tmp_path / "wheels").mkdir()
    (tmp_path / "simple").mkdir()
    env = {
        **os.environ,
        "PIP_CONFIG_FILE": os.devnull,
        "PIP_FIND_LINKS": str(tmp_path / "wheels"),
        "PIP_INDEX_URL": (tmp_path / "simple").as_uri(),
        "TORCH_INDEX_URL": "http://127.0.0.1:9/whl/cpu",
        "TOKRATE_CI_CACHE": str(tmp_path / "cache"),
    }
    done = subprocess.run(
        [str(SETUP), "transformers"], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    ours = [line for line in done.stderr.splitlines() if line.startswith("[real-servers-setup")]
    assert len(ours) == 1, done.stderr
    assert "skipping transformers: cannot install torch==2.13.0+cpu" in ours[0]
    assert "PIP_FIND_LINKS" in ours[0] and "TORCH_INDEX_URL" in ours[0]
    assert "Traceback" not in done.stderr
    assert done.stdout.splitlines()[-1].endswith("(skipped: transformers, see above)")
    # No half-built venv is left to be taken for a ready one.
    assert not (tmp_path / "cache" / "transformers" / "venv").exists()
