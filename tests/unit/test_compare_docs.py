"""docs/regressions.md: the sample nightly.toml loads and the workflow is valid YAML."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "regressions.md"


def _block(lang: str, after: str) -> str:
    text = DOC.read_text(encoding="utf-8")
    start = text.index(after)
    match = re.compile(rf"```{lang}\n(.*?)```", re.S).search(text, start)
    assert match is not None, f"no ```{lang} block after {after!r}"
    return match.group(1)


def test_sample_nightly_toml_loads(tmp_path: Path) -> None:
    from tokrate.spec.config_file import load_spec

    """The sample is examples/nightly.toml verbatim (the config the false-alarm benchmark
    measures), and it is a nightly: two tiers at a concurrency where batching matters,
    enough requests for a judged p95, fixed prompts."""
    from tokrate.analysis.early_stopping import samples_needed

    sample = _block("toml", "### Sample `nightly.toml`")
    assert sample == (ROOT / "examples" / "nightly.toml").read_text(encoding="utf-8")
    path = tmp_path / "nightly.toml"
    path.write_text(sample, encoding="utf-8")
    spec = load_spec(path, {})
    assert [m.name for m in spec.models] == ["sim-7b", "sim-70b"]
    assert spec.load.concurrency == (8,)
    assert spec.load.requests >= samples_needed("ttft_p95", 10)
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
    # Fails on a regression (1) and on a broken run (2), not on "inconclusive only" (3);
    # installs tokrate from the checkout and runs a config that exists in it.
    assert steps[-1]["if"] == "steps.bench.outputs.code != '0' && steps.bench.outputs.code != '3'"
    assert "pip install ." in runs and "pip install tokrate" not in runs
    assert "-c examples/nightly.toml" in runs and (ROOT / "examples" / "nightly.toml").is_file()


def test_false_alarm_figures_name_their_command_commit_and_load() -> None:
    """The docs' false-alarm and detection figures come from the benchmark: its command,
    commit and load stand next to them, and benchmarks/README.md has its full table."""
    text = DOC.read_text(encoding="utf-8")
    section = text[text.index("**Noise between runs.**") : text.index("**How many requests")]
    assert "benchmarks/false_alarms.py --pairs 20 --busy 2" in section
    assert re.search(r"commit [0-9a-f]{7}", section) and "load average" in section
    bench = (ROOT / "benchmarks" / "README.md").read_text(encoding="utf-8")
    assert "(`false_alarms.py`, issues 23 and 40)" in bench and "**0/20** (false alarms)" in bench
