"""pyproject.toml lists tokrate's packages by hand (one lives outside tokrate/: the
bundled prompt sets in the top-level prompts/ folder); the list must match the folders,
or a wheel would silently leave a subpackage out."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_every_package_folder_is_listed_and_prompts_map_to_the_top_level_folder() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    setuptools = config["tool"]["setuptools"]
    folders = {
        ".".join(init.parent.relative_to(ROOT).parts)
        for init in (ROOT / "tokrate").rglob("__init__.py")
    }
    assert set(setuptools["packages"]) == folders | {"tokrate.prompts"}
    assert setuptools["package-dir"] == {"tokrate.prompts": "prompts"}
    assert setuptools["package-data"]["tokrate.prompts"] == ["*.jsonl"]
    assert not (ROOT / "tokrate" / "prompts").exists(), "the sets live in the top-level prompts/"


def test_the_shipped_sets_are_the_files_of_the_top_level_prompts_folder() -> None:
    from tokrate.spec.bundled import NAMED_ONLY_SETS, SHIPPED_SETS, bundled_sets

    files = sorted(p.stem for p in (ROOT / "prompts").glob("*.jsonl"))
    assert files == sorted(SHIPPED_SETS + NAMED_ONLY_SETS) == list(bundled_sets())
