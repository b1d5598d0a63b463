"""Your prompts are your prompts (issue 24), end to end through the CLI.

A user runs ``tokrate init``, points ``[prompts] paths`` at a file of 5 prompts and
runs 3 requests per level on the embedded simulator: only their prompts are sent (the
template adds no bundled set), the run prints where its prompts come from before the
load, records it in run.json, and says why 2 of the 5 were never sent.
"""

from __future__ import annotations

import json
from pathlib import Path

import orjson
import pytest

from tokrate.cli import main


def _prompt_file(path: Path, n: int) -> Path:
    lines = [
        json.dumps({"id": f"mine-{i}", "prompt": f"Question {i}: what is {i} + {i}?"})
        for i in range(n)
    ]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _config(tmp_path: Path) -> Path:
    config = tmp_path / "bench.toml"
    assert main(["init", str(config)]) == 0
    text = config.read_text(encoding="utf-8")
    # What a user does: name their file on the template's own paths line.
    text = text.replace("\npaths = []", '\npaths = ["my-prompts.jsonl"]', 1)
    text = text.replace("time_scale = 1.0", "time_scale = 20.0", 1)
    config.write_text(text, encoding="utf-8")
    _prompt_file(tmp_path / "my-prompts.jsonl", 5)
    return config


def _run(config: Path, out: Path, requests: int) -> tuple[int, dict[str, object], list[str]]:
    argv = [
        "run",
        "-c",
        str(config),
        "-m",
        "sim-1b",
        "--requests",
        str(requests),
        "--concurrency",
        "1,2",
        "--max-tokens",
        "4",
        "--output-dir",
        str(out),
        "--run-id",
        f"r{requests}",
        "--no-report",
    ]
    code = main(argv)
    run_dir = out / f"r{requests}"
    records = (run_dir / "records.jsonl").read_bytes().splitlines()
    sent = [orjson.loads(line)["prompt_id"] for line in records]
    return code, orjson.loads((run_dir / "run.json").read_bytes()), sent


def test_a_users_file_alone_is_sent_and_the_run_says_what_was_not(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = _config(tmp_path)
    code, run, sent = _run(config, tmp_path / "reports", 3)
    err = capsys.readouterr().err
    assert code == 0, err
    assert "prompts: file my-prompts.jsonl 5" in err.splitlines()  # before the load
    assert len(sent) == 6 and set(sent) <= {f"mine-{i}" for i in range(5)}
    assert len(set(sent)) == 3  # both levels send the same first 3 of the shuffle
    why = (
        "each level sends 3 requests per target, fewer than the 5 prompts of all sources,"
        " and every level sends the same first 3 of one seeded shuffle of them all"
        " (load.seed 0); requests = 5 sends each once"
    )
    assert run["prompts"] == [
        {
            "kind": "file",
            "name": "my-prompts.jsonl",
            "prompts": 5,
            "tasks": {"my-prompts": 5},
            "cut_by_limit": 0,
            "sent": 3,
            "not_sent_why": why,
        }
    ]
    line = f"prompts: 3 of the 5 prompts of my-prompts.jsonl were sent: {why}"
    assert line in run["warnings"]  # type: ignore[operator]
    assert f"warning: {line}" in err.splitlines()  # captured output is not a terminal

    code, run, sent = _run(config, tmp_path / "reports", 5)
    err = capsys.readouterr().err
    assert code == 0 and set(sent) == {f"mine-{i}" for i in range(5)}
    assert run["prompts"][0]["sent"] == 5 and run["prompts"][0]["not_sent_why"] is None  # type: ignore[index]
    assert not [w for w in run["warnings"] if w.startswith("prompts:")]  # type: ignore[union-attr]
    assert "were sent" not in err
