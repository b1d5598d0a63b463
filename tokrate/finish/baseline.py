"""``tokrate run --baseline REF``: judge a finished run against a baseline run.

REF is a run folder or ``latest-good`` (the pointer file in the reports root, see
:func:`tokrate.runfolder.store.resolve_latest_good`). The verdicts are
:func:`tokrate.analysis.compare.compare_runs`'s, with thresholds widened to the
run-to-run noise of the earlier runs in the reports folder (:mod:`tokrate.analysis.noise`;
``[compare] thresholds_from_history``); ``comparison.md`` and ``comparison.json`` are
written into the run folder through the store. The ``latest-good`` pointer moves to
this run when it completed and

- there was no pointer yet (the first night), or the run is not comparable with the
  one it names at all (other load settings or prompts: the run starts a new
  baseline, exit 0); or
- its verdict is ``ok``, no row passed only because a re-measurement did not confirm
  its regression (a night whose first measurement of a scenario was off passes, but
  does not become the baseline), and its client was fit to measure a baseline: no
  scenario's event-loop lag far past the threshold
  (:func:`tokrate.analysis.health.unfit_baseline`; such a night passes too). A night
  that passes and stays out for either reason carries a ``latest-good stays at ...``
  warning in its comparison that says which.

It stays where it was on a regression (exit 1) and on an inconclusive verdict (exit 3).
The first night of a folder (or of a new segment) becomes ``latest-good`` whatever its
health: there is no other reference to keep, and the first fit night that passes
against it replaces it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import orjson

from tokrate.analysis.comparability import run_problem
from tokrate.analysis.compare import compare_runs
from tokrate.analysis.health import unfit_baseline
from tokrate.report.terminal.comparison_text import render_json, render_markdown
from tokrate.runfolder.comparison import COMPARISON_SCHEMA_VERSION, Comparison, NoiseSource
from tokrate.runfolder.run_info import RunInfo
from tokrate.runfolder.store import (
    LATEST_GOOD,
    load_run_info,
    point_latest_good,
    resolve_latest_good,
    write_comparison,
)
from tokrate.spec.thresholds import Threshold, ThresholdSet
from tokrate.textfmt import md_escape

__all__ = ["baseline_thresholds", "check_baseline", "moves_pointer"]


def _no_baseline(run_dir: Path, info: RunInfo, why: str | None) -> None:
    """comparison.md/json for a run with nothing to be compared with: no pointer yet,
    or (``why``) a pointer to a run of another load or prompts."""
    head = "no baseline yet" if why is None else f"not comparable with {LATEST_GOOD} ({why})"
    if info.complete:
        text = f"### ✅ tokrate compare: {head} — {md_escape(info.name)} becomes {LATEST_GOOD}\n"
    else:
        text = (
            f"### ⚠️ tokrate compare: {head}; {md_escape(info.name)} is {info.status},"
            f" so it does not become {LATEST_GOOD}\n"
        )
    doc: dict[str, Any] = {
        "schema_version": COMPARISON_SCHEMA_VERSION,
        "kind": "tokrate-comparison",
        "verdict": "no_baseline",
        "reason": why,
        "counts": {},
        "baseline": None,
        "current": {
            "path": str(run_dir),
            "run_id": info.run_id,
            "label": info.label,
            "warnings": list(info.warnings),
        },
        "thresholds": [],
        "settings": {},
        "warnings": [],
        "results": [],
    }
    write_comparison(run_dir, orjson.dumps(doc, option=orjson.OPT_INDENT_2).decode(), text)


def _cleared_rows(comparison: Comparison) -> list[str]:
    """The rows whose first measurement regressed and whose re-measurement did not."""
    return [
        f"{r.label or r.scenario} {r.metric}"
        for r in comparison.results
        if r.confirmation is not None and r.confirmation.verdict != "regressed"
    ]


def _hold_reason(comparison: Comparison, info: RunInfo) -> str | None:
    """Why a run whose verdict is ``ok`` stays out of ``latest-good`` (module doc), or
    None when it becomes it. One function for both the decision and the warning that
    explains it, so the pointer is never held without the comparison saying why."""
    lag = unfit_baseline(info)
    if lag is not None:
        return lag
    cleared = _cleared_rows(comparison)
    if not cleared:
        return None
    shown = ", ".join(cleared[:3]) + (f" and {len(cleared) - 3} more" if len(cleared) > 3 else "")
    return (
        f"its first measurement regressed ({shown}) and only the re-measurement in confirm/ did not"
    )


def moves_pointer(comparison: Comparison, info: RunInfo) -> bool:
    """Whether a judged run (``info``: the current run's) becomes ``latest-good``
    (module doc)."""
    return comparison.verdict == "ok" and _hold_reason(comparison, info) is None


def _with_hold_warning(comparison: Comparison, info: RunInfo) -> Comparison:
    """``comparison`` with a warning when the run passed but stays out of
    ``latest-good`` (module doc): the user is told why the pointer did not move."""
    why = _hold_reason(comparison, info) if comparison.verdict == "ok" else None
    if why is None:
        return comparison
    note = (
        f"{LATEST_GOOD} stays at {comparison.baseline_name}: this run passed, but {why},"
        " so its values are no baseline for the nights after it"
    )
    return replace(comparison, warnings=(*comparison.warnings, note))


def check_baseline(
    run_dir: Path,
    baseline: str,
    reports_root: Path,
    thresholds: ThresholdSet | Sequence[Threshold] | Mapping[str, str] | None = None,
    on_comparison: Callable[[Comparison], None] | None = None,
    noise: NoiseSource | None = None,
) -> int:
    """Compare a finished run against ``baseline`` and return the exit code: 0, 1
    regression, 2 nothing at all comparable, 3 no regression but a row inconclusive.

    ``on_comparison`` receives the Comparison when there was a baseline to compare
    with (``tokrate run --baseline`` prints its table); ``noise`` says where fitted
    thresholds came from. Raises RunFolderError for an unreadable folder or a
    dangling pointer, OutputError when the files cannot be written.
    """
    run_dir = Path(run_dir)
    reports_root = Path(reports_root)
    pointer = baseline == LATEST_GOOD
    base_dir = resolve_latest_good(reports_root) if pointer else Path(baseline)
    info = load_run_info(run_dir)
    why = None
    if base_dir is not None and pointer:
        why = run_problem(load_run_info(base_dir), info)
    if base_dir is None or why is not None:
        _no_baseline(run_dir, info, why)
        if info.complete:
            point_latest_good(reports_root, run_dir)
        return 0
    comparison = compare_runs(base_dir, run_dir, thresholds, noise=noise)
    if pointer:
        comparison = _with_hold_warning(comparison, info)
    if on_comparison is not None:
        on_comparison(comparison)
    write_comparison(run_dir, render_json(comparison), render_markdown(comparison))
    if pointer and info.complete and moves_pointer(comparison, info):
        point_latest_good(reports_root, run_dir)
    return comparison.exit_code


def baseline_thresholds(
    run_dir: Path, reports_root: Path, texts: Sequence[str], from_history: str | None
) -> tuple[ThresholdSet, NoiseSource | None]:
    """The thresholds of ``tokrate run --baseline`` (what ``[compare] thresholds`` /
    ``--threshold`` set) widened to the run-to-run noise of the earlier runs in
    ``reports_root``, or in ``from_history`` when given (``"off"``: not widened), and
    where that noise came from."""
    from tokrate.spec.thresholds import merge_thresholds, parse_threshold

    thresholds = ThresholdSet(merge_thresholds(parse_threshold(t) for t in texts))
    if from_history == "off":
        return thresholds, None
    from tokrate.analysis.noise import fit_thresholds

    return fit_thresholds(from_history or reports_root, run_dir, thresholds)
