"""`tokrate init`: writes the commented example, refuses to overwrite without --force."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from tokrate.cli import main
from tokrate.spec.config_file import load_spec


def test_init_writes_a_loadable_example_and_refuses_to_overwrite(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "bench.toml"
    assert main(["init", str(path)]) == 0
    out = capsys.readouterr().out
    assert out == f"wrote {path}; edit it, then run: tokrate run -c {path}\n"
    text = path.read_text(encoding="utf-8")
    assert text.count("\n#") > 40  # commented throughout
    spec = load_spec(path, {})
    # Every active line is a default: the file as written asks for nothing a run
    # without it would not do (no bundled set, no sweep, no SLO the user did not set).
    assert dataclasses.replace(spec, source=None) == load_spec(None, {})
    assert spec.uses_simulator and spec.prompts.sets == () and spec.prompts.paths == ()
    assert 'paths = ["prompts/"]' in text  # where a user's own sets live

    path.write_text("# mine\n", encoding="utf-8")
    assert main(["init", str(path)]) == 2
    err = capsys.readouterr().err
    assert err == f"tokrate: error: {path}: already exists (use --force to overwrite)\n"
    assert path.read_text(encoding="utf-8") == "# mine\n"

    assert main(["init", str(path), "--force"]) == 0
    assert path.read_text(encoding="utf-8") == text


def test_init_default_path_and_bad_target(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["init"]) == 0
    assert (tmp_path / "bench.toml").is_file()
    assert main(["init", str(tmp_path)]) == 2
    assert "is a directory" in capsys.readouterr().err
    assert main(["init", str(tmp_path / "no" / "such" / "dir.toml")]) == 2
    assert "cannot write" in capsys.readouterr().err
