"""Targets (and so progress rows, run.json and every summary) are ordered by endpoint,
then model size, then name (issue 11)."""

from __future__ import annotations

from tokrate.inputs.targets import resolve_targets
from tokrate.sim.model import default_tiers
from tokrate.spec.config_file import load_spec


def test_targets_by_endpoint_then_size_then_name() -> None:
    spec = load_spec(
        None,
        {
            "endpoints": [
                {"name": "prod", "base_url": "http://127.0.0.1:9/v1"},
                {"name": "lab", "base_url": "http://127.0.0.1:8/v1"},
            ],
            "models": [
                {"endpoint": "lab", "name": "tiny"},  # no size known: last of its endpoint
                {"endpoint": "prod", "name": "llama-3.1-70b"},
                {"endpoint": "lab", "name": "qwen-7b"},
                {"endpoint": "prod", "name": "mixtral-8x7b"},  # 12.9B active
                {"endpoint": "prod", "name": "llama-3.1-8b"},
                {"endpoint": "lab", "name": "another-7b"},
            ],
        },
    )
    labels = [t.label for t in resolve_targets(spec)]
    assert labels == [
        "prod/llama-3.1-8b",
        "prod/mixtral-8x7b",
        "prod/llama-3.1-70b",
        "lab/another-7b",
        "lab/qwen-7b",
        "lab/tiny",
    ]


def test_simulator_tiers_by_active_size() -> None:
    spec = load_spec(None, {})
    names = [
        t.model.name for t in resolve_targets(spec, ("http://127.0.0.1:1/v1", default_tiers()))
    ]
    assert names == ["sim-1b", "sim-7b", "sim-8x7b", "sim-13b", "sim-34b", "sim-70b"]
