"""Inputs that never end: a prompts path or a config that is a FIFO (no writer: a read
waits for ever), /dev/zero (an endless read fills the memory) or a file over the size
limit. Each is refused from its type or size before a byte is read: one line naming
the path, exit 2, in a real ``tokrate`` process (a timeout would mean it hung)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tokrate.errors import PromptError
from tokrate.inputs import prompts as prompt_files
from tokrate.inputs.prompts import load_prompts
from tokrate.spec.types import PromptsSpec


def _tokrate(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tokrate", *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=cwd,
    )


@pytest.mark.parametrize("kind", ["fifo", "dev_zero"])
def test_a_prompts_path_that_never_ends_is_one_line(tmp_path: Path, kind: str) -> None:
    if kind == "fifo":
        path = tmp_path / "prompts.jsonl"
        os.mkfifo(path)
        want = "is a FIFO (named pipe), not a regular file"
    else:
        path = Path("/dev/zero")
        want = "is a character device, not a regular file"
    proc = _tokrate("run", "--prompts", str(path), "--output-dir", str(tmp_path), cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and str(path) in lines[0] and want in lines[0], proc.stderr


@pytest.mark.parametrize("kind", ["fifo", "dev_zero"])
def test_a_config_that_never_ends_is_one_line(tmp_path: Path, kind: str) -> None:
    if kind == "fifo":
        path = tmp_path / "bench.toml"
        os.mkfifo(path)
    else:
        path = Path("/dev/zero")
    proc = _tokrate("run", "-c", str(path), "--output-dir", str(tmp_path), cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "not a regular file" in lines[0], proc.stderr


def test_a_prompt_file_over_the_limit_is_refused_before_reading(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "big.jsonl"
    path.write_bytes(b'{"prompt": "hi"}\n' * 100)  # 1,700 bytes
    monkeypatch.setattr(prompt_files, "MAX_PROMPT_FILE_BYTES", 1000)
    with pytest.raises(PromptError, match=r"big.jsonl: 1,700 bytes, over the 1,000 bytes limit"):
        load_prompts(PromptsSpec(paths=(str(path),)), base_dir=tmp_path)
