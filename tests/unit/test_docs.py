"""The docs a user's checkout holds are complete on their own.

The definitions live in docs/definitions.md; nothing in the repository may send a
reader to a file a checkout does not have (the team's shared/ notes), and every link
between the README and docs/ must resolve.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCS = sorted((ROOT / "docs").glob("*.md"))
TEXT_FILES = [
    ROOT / "README.md",
    *DOCS,
    *sorted((ROOT / "tokrate").rglob("*.py")),
    *sorted((ROOT / "tests").rglob("*.py")),
    *sorted((ROOT / "benchmarks").rglob("*.py")),
    *sorted((ROOT / "benchmarks").glob("*.md")),
]


def _definition_names() -> set[str]:
    text = (ROOT / "docs" / "definitions.md").read_text(encoding="utf-8")
    section = text[text.index("## Definitions") :]
    return {m.group(1).strip().lower() for m in re.finditer(r"^\| ([^|]+) \|", section, re.M)}


def test_nothing_points_at_files_outside_the_repository() -> None:
    this = Path(__file__).resolve()
    offenders = [
        str(path.relative_to(ROOT))
        for path in TEXT_FILES
        if path != this
        and re.search(r"DESIGN\.md|STYLE\.md|shared/", path.read_text(encoding="utf-8"))
    ]
    assert offenders == []


def test_every_link_between_readme_and_docs_resolves() -> None:
    broken = []
    for page in [ROOT / "README.md", *DOCS]:
        text = page.read_text(encoding="utf-8")
        prose = re.sub(r"`[^`\n]*`", "", text)
        targets = [m.group(1) for m in re.finditer(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", prose)]
        targets += re.findall(r"`((?:docs|benchmarks|examples|prompts)/[\w./-]+\.\w+)`", text)
        for target in targets:
            if re.match(r"[a-z]+://", target):
                continue
            base = page.parent if "](" + target in text else ROOT
            if not (base / target).exists() and not (ROOT / target).exists():
                broken.append(f"{page.relative_to(ROOT)} -> {target}")
    assert broken == []


def test_definitions_page_defines_what_the_report_shows() -> None:
    """The report repeats the definitions; each name it shows is defined in the docs."""
    from tokrate.report.html import DEFINITIONS

    names = _definition_names()
    assert names >= {"t0", "ttft", "itl", "e2e", "tpot", "output tokens", "connect time"}
    missing = [name for name, _text in DEFINITIONS if name.lower() not in names]
    assert missing == []


def test_the_readme_shows_the_size_chart_near_the_top() -> None:
    """A newcomer sees what they get: the README's first screen shows the size chart,
    a real rendered PNG in docs/."""
    head = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()[:30]
    assert any("](docs/size-vs-speed.png)" in line for line in head)
    png = (ROOT / "docs" / "size-vs-speed.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 20_000
