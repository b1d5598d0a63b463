"""docs/regressions.md: the sample nightly.toml loads and the workflow is valid YAML."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parents[2] / "docs" / "regressions.md"


def _block(lang: str, after: str) -> str:
    text = DOC.read_text(encoding="utf-8")
    start = text.index(after)
    match = re.compile(rf"```{lang}\n(.*?)```", re.S).search(text, start)
    assert match is not None, f"no ```{lang} block after {after!r}"
    return match.group(1)


def test_sample_nightly_toml_loads(tmp_path: Path) -> None:
    from tokrate.spec import load_spec

    path = tmp_path / "nightly.toml"
    path.write_text(_block("toml", "### Sample `nightly.toml`"), encoding="utf-8")
    spec = load_spec(path, {})
    assert [m.name for m in spec.models] == ["llama-3.1-8b-instruct", "llama-3.1-70b-instruct"]
    assert spec.load.concurrency == (1, 8)
    assert spec.endpoints[0].api_key_env == "LLM_API_KEY"
    assert spec.prompts.synthetic is not None and spec.prompts.synthetic.seed == 0


def test_workflow_is_valid_yaml_and_fails_on_regression() -> None:
    yaml = pytest.importorskip("yaml")
    flow = yaml.safe_load(_block("yaml", "### GitHub Actions workflow"))
    # PyYAML reads the bare key `on` as True (YAML 1.1).
    trigger = flow.get("on", flow.get(True))
    assert trigger["schedule"][0]["cron"] == "17 3 * * *"
    steps = flow["jobs"]["bench"]["steps"]
    runs = "\n".join(s.get("run", "") for s in steps)
    assert "--baseline latest-good" in runs and "$GITHUB_STEP_SUMMARY" in runs
    assert any(s.get("uses", "").startswith("actions/upload-artifact") for s in steps)
    assert steps[-1]["if"] == "steps.bench.outputs.code != '0'"
