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


def _job(text: str, title: str) -> str:
    """One of the three jobs: from its bold title to the next one (or the section's end)."""
    section = text[text.index("## Three jobs") : text.index("\n## ", text.index("## Three jobs"))]
    start = section.index(f"**{title}")
    nxt = section.find("\n**", start + 1)
    return section[start : nxt if nxt != -1 else len(section)]


def test_the_three_jobs_are_on_the_first_screen() -> None:
    """A newcomer finds the three jobs right under the commands and the chart: hosted
    tiers on their own prompts, a nightly gate, a comparison chart, each a few lines with
    its command and a link to the docs page that has the rest."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    lines = text.splitlines()
    heading = lines.index("## Three jobs")
    assert heading < 30
    end = next(i for i in range(heading + 1, len(lines)) if lines[i].startswith("## "))
    assert end < 80, "the three jobs stay short: the reference lives in docs/"
    hosted = _job(text, "Pick a hosted tier")
    assert "export OPENAI_API_KEY" in hosted and "--api-key-env OPENAI_API_KEY" in hosted
    assert "--prompts my-prompts.jsonl" in hosted and "](docs/running.md)" in hosted
    nightly = _job(text, "Gate a nightly job")
    assert "--baseline latest-good" in nightly and "](docs/regressions.md)" in nightly
    assert (ROOT / "examples" / "nightly.toml").is_file()
    chart = _job(text, "Put a comparison chart")
    assert re.search(r"tokrate report \S+ \S+ -o", chart) and "](docs/report.md)" in chart


def test_the_readme_sample_prompt_line_is_a_prompt(tmp_path: Path) -> None:
    """The one sample prompts line is what tokrate reads: copied out of the README, it
    loads as one prompt with its id, task and message."""
    from tokrate.inputs.prompts import parse_jsonl

    hosted = _job((ROOT / "README.md").read_text(encoding="utf-8"), "Pick a hosted tier")
    line = re.search(r"^echo '(.+)' > my-prompts\.jsonl$", hosted, flags=re.M)
    assert line is not None
    (prompt,) = parse_jsonl(line.group(1).encode(), "my-prompts.jsonl")
    assert prompt.id == "refund" and prompt.task == "support"


def test_every_command_is_in_the_readme() -> None:
    """Every subcommand of the CLI is listed in the README's Commands section."""
    from tokrate.cli import build_parser

    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text[text.index("## Commands") : text.index("\n## ", text.index("## Commands"))]
    parser = build_parser()
    (sub,) = [a for a in parser._actions if a.dest == "command"]
    assert sub.choices, "no subcommands found"
    missing = [name for name in sub.choices if f"tokrate {name}" not in section]
    assert missing == []


def test_running_docs_list_every_error_class_once() -> None:
    """The error-class table (docs/running.md "Failure handling") has one row per class
    a record may carry, none twice."""
    from tokrate.spec.types import ERROR_CLASSES

    text = (ROOT / "docs" / "running.md").read_text(encoding="utf-8")
    section = text[
        text.index("## Failure handling") : text.index("\n## ", text.index("## Failure handling"))
    ]
    for name in ERROR_CLASSES:
        assert section.count(f"| `{name}` |") == 1, name
