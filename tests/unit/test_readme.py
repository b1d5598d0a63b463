"""The README's two commands are the contract with a new user and with CI."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _readme_commands() -> list[str]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    return re.findall(r"```bash\n(.+?)\n```", text, flags=re.S)


def test_readme_starts_with_exactly_two_commands() -> None:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    head = text.split("\n## ", 1)[0]
    blocks = re.findall(r"```bash\n(.+?)\n```", head, flags=re.S)
    assert len(blocks) == 2, "README must start with exactly two commands"
    run_cmd, test_cmd = blocks
    assert run_cmd.strip().endswith("tokrate run")
    assert "pytest" in test_cmd
    assert all("\n" not in block for block in blocks), "each command is one line"


def test_ci_calls_the_readme_test_command() -> None:
    test_cmd = _readme_commands()[1].strip()
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert test_cmd in ci.splitlines(), ".ci/run must call the README's test command verbatim"


def test_readme_scheduled_workflow_is_valid_and_fails_on_regression() -> None:
    import yaml

    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text[text.index("## Scheduled runs") :]
    block = re.search(r"```yaml\n(.*?)```", section, flags=re.S)
    assert block is not None
    flow = yaml.safe_load(block.group(1))
    steps = flow["jobs"]["bench"]["steps"]
    runs = "\n".join(s.get("run", "") for s in steps)
    assert "--baseline latest-good" in runs and "$GITHUB_STEP_SUMMARY" in runs
    # Fails on a regression (1) and on a broken run (2), not on "inconclusive only" (3);
    # installs tokrate from the checkout and runs a config that exists in it.
    assert steps[-1]["if"] == "steps.bench.outputs.code != '0' && steps.bench.outputs.code != '3'"
    assert "pip install ." in runs and "pip install tokrate" not in runs
    assert "-c examples/nightly.toml" in runs and (ROOT / "examples" / "nightly.toml").is_file()


def test_readme_documents_every_error_class() -> None:
    from tokrate.runfolder.records import ERROR_CLASSES

    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text[text.index("## Failure handling") :]
    for name in ERROR_CLASSES:
        assert f"| `{name}` |" in section, name
