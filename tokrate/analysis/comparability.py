"""Whether two runs, and two groups of their records, measure the same thing.

Runs are comparable when their load settings and prompts agree; a target x scenario
group when both sides have it, with the same scenario definition and, since runs draw
prompts in a seeded order, mostly the same prompts in the same task mix. Each check
returns the reason it fails, in words for the verdicts table, or None.
"""

from __future__ import annotations

import polars as pl

from tokrate.runfolder.run_info import RunInfo

__all__ = ["benchmark_difference", "group_problem", "prompt_problem", "run_problem"]

#: How the parts of a benchmark's identity (BenchmarkInfo) are named when they differ.
_IDENTITY_PARTS = {
    "load": "load settings",
    "scenarios": "levels",
    "prompts": "prompts",
    "targets": "targets",
    "client": "client settings",
    "simulator_time_scale": "simulator clock",
}


def run_problem(base: RunInfo, cur: RunInfo) -> str | None:
    """Why two runs cannot be compared at all (other load settings, other prompts, an
    other simulator clock), or None."""
    load_b, load_c = base.load_identity, cur.load_identity
    for k in sorted(load_b.keys() | load_c.keys()):
        if load_b.get(k) != load_c.get(k):
            name = k if k.startswith("simulator.") else f"load.{k}"
            return f"different load settings ({name}: {load_b.get(k)!r} vs {load_c.get(k)!r})"
    pb, pc = base.prompts_identity, cur.prompts_identity
    if pb is not None and pc is not None and pb != pc:
        return "different prompts (config.prompts)"
    return None


def benchmark_difference(base: RunInfo, cur: RunInfo) -> str | None:
    """How ``cur``'s benchmark differs from ``base``'s ("another benchmark: different
    prompts, levels"), or None when they are one benchmark (tokrate history starts a
    new panel set there)."""
    a, b = base.benchmark_info, cur.benchmark_info
    if a.fingerprint == b.fingerprint:
        return None
    parts = [
        name for key, name in _IDENTITY_PARTS.items() if a.identity.get(key) != b.identity.get(key)
    ]
    return "another benchmark: different " + (", ".join(parts) or "settings")


def _task_mix(frame: pl.DataFrame) -> dict[str, float]:
    if frame.height == 0:
        return {}
    counts = frame.group_by("task").len()
    return {str(t): n / frame.height for t, n in counts.iter_rows()}


def prompt_problem(base: pl.DataFrame, cur: pl.DataFrame) -> str | None:
    """Why two groups' prompts differ, or None when they match.

    Runs draw prompts in a seeded order, so two comparable runs may not send exactly
    the same ids; they must share most of them (Jaccard >= 0.5) and the same task mix
    (total variation distance <= 0.2).
    """
    ids_b = set(base["prompt_id"].to_list())
    ids_c = set(cur["prompt_id"].to_list())
    if ids_b and ids_c:
        jaccard = len(ids_b & ids_c) / len(ids_b | ids_c)
        if jaccard < 0.5:
            return f"different prompts (only {jaccard:.0%} of prompt ids shared)"
    mix_b, mix_c = _task_mix(base), _task_mix(cur)
    tvd = 0.5 * sum(abs(mix_b.get(k, 0.0) - mix_c.get(k, 0.0)) for k in mix_b.keys() | mix_c.keys())
    if tvd > 0.2:
        return f"different task mix (total variation {tvd:.2f})"
    return None


def group_problem(
    base: RunInfo,
    cur: RunInfo,
    key: tuple[str, str, str],
    gb: pl.DataFrame,
    gc: pl.DataFrame,
    targets_b: set[tuple[str, str]],
    targets_c: set[tuple[str, str]],
) -> str | None:
    endpoint, model, scenario = key
    if (endpoint, model) not in targets_b:
        return "model missing in baseline"
    if (endpoint, model) not in targets_c:
        return "model missing in current run"
    if gb.height == 0:
        return "scenario missing in baseline"
    if gc.height == 0:
        return "scenario missing in current run"
    sb, sc = base.scenario(scenario), cur.scenario(scenario)
    if (sb is None) != (sc is None) or (
        sb is not None and sc is not None and sb.definition != sc.definition
    ):
        return "different load (scenario definition)"
    return prompt_problem(gb, gc)
