"""``tokrate run --baseline REF``: judge a finished run against its benchmark's recent good
nights, or against one baseline run.

REF is ``latest-good`` or a run folder.

- ``latest-good`` (the nightly gate): the reference is the benchmark's recent good
  nights in the reports folder (:mod:`tokrate.analysis.reference`: per target and
  level the median of the newest 10 good nights with a healthy client, since the last
  ``tokrate accept``; the runs of other benchmarks in the folder are never part of
  it). A run with no earlier night of its benchmark is its first night: no baseline
  yet, exit 0.
- a run folder: that run alone.

The thresholds are ``[compare] thresholds`` / ``--threshold`` widened to the
night-to-night noise of the benchmark's history (:mod:`tokrate.analysis.noise`; in
``[compare] thresholds_from_history``, default the reports folder; ``"off"``: not
widened). The verdicts are :func:`tokrate.analysis.compare.compare_loaded`'s (with the
run's confirmation re-measurement where it has one); ``comparison.md`` and
``comparison.json`` are written into the run folder through the store.

The ``latest-good`` pointer file names the benchmark's newest good night (for
``tokrate compare`` and scripts; the check itself reads the history, never the
pointer). It moves to this run when it completed and it is the benchmark's first night,
or its verdict is ``ok``, no row passed only because a re-measurement did not confirm
its regression, and its client was fit to measure a baseline
(:func:`tokrate.analysis.health.unfit_baseline`). A night that passes but stays out
carries a ``latest-good stays at ...`` warning that says why; such a night is not a
reference for the groups its first measurement flagged either (the same rule,
:mod:`tokrate.analysis.reference`). A regressed night's comparison names the command
that accepts the change (``tokrate accept``), and, when the change has lasted, the
night it started.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import orjson

from tokrate.analysis.checks import with_verdicts
from tokrate.analysis.compare import Baseline, compare_loaded, load_confirmation
from tokrate.analysis.health import unfit_baseline
from tokrate.analysis.noise import NoiseFit, benchmark_nights, fit_from_points
from tokrate.analysis.points import read_points
from tokrate.analysis.reference import REFERENCE_NIGHTS, Reference, select_reference
from tokrate.errors import RunFolderError
from tokrate.report.terminal.comparison_text import render_json, render_markdown
from tokrate.runfolder.comparison import COMPARISON_SCHEMA_VERSION, Comparison
from tokrate.runfolder.loaded_run import LoadedRun, load_run
from tokrate.runfolder.run_info import RunInfo
from tokrate.runfolder.store import (
    LATEST_GOOD,
    point_latest_good,
    resolve_latest_good,
    write_comparison,
)
from tokrate.spec.thresholds import RUN_METRICS, Threshold, ThresholdSet
from tokrate.textfmt import md_escape

__all__ = ["accept_hint", "check_baseline", "moves_pointer"]


def _no_baseline(run_dir: Path, info: RunInfo, others: int) -> None:
    """comparison.md/json for the first night of a benchmark: nothing to compare with.
    ``others``: runs of other benchmarks in the folder, which were left out."""
    head = "no baseline yet"
    first = f"the first night of its benchmark (fingerprint {info.fingerprint})"
    left_out = f"; {others} run(s) of other benchmarks in the folder left out" if others else ""
    if info.complete:
        text = (
            f"### ✅ tokrate compare: {head} — {md_escape(info.name)} is {first} and becomes"
            f" {LATEST_GOOD}{left_out}\n"
        )
    else:
        text = (
            f"### ⚠️ tokrate compare: {head}; {md_escape(info.name)} is {info.status},"
            f" so it does not become {LATEST_GOOD}\n"
        )
    doc: dict[str, Any] = {
        "schema_version": COMPARISON_SCHEMA_VERSION,
        "kind": "tokrate-comparison",
        "verdict": "no_baseline",
        "reason": None,
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


def _pointer_name(reports_root: Path) -> str:
    """What ``latest-good`` names now (its folder's name), for the warning of a night
    that stays out of it."""
    try:
        target = resolve_latest_good(reports_root)
    except RunFolderError:
        return "the night it names"
    return "(none yet)" if target is None else target.name


def _with_hold_warning(comparison: Comparison, info: RunInfo, reports_root: Path) -> Comparison:
    """``comparison`` with a warning when the run passed but stays out of
    ``latest-good`` (module doc): the user is told why the pointer did not move."""
    why = _hold_reason(comparison, info) if comparison.verdict == "ok" else None
    if why is None:
        return comparison
    note = (
        f"{LATEST_GOOD} stays at {_pointer_name(reports_root)}: this run passed, but {why},"
        " so its values are no reference for the nights after it"
    )
    return replace(comparison, warnings=(*comparison.warnings, note))


def accept_hint(run_dir: Path, reference: Reference | None) -> str:
    """How to accept a regression as the new normal: the command, with the night the
    change started when it has lasted (``reference.flagged_since``)."""
    since = None if reference is None else reference.flagged_since
    if since is None:
        return (
            "if this change is intended, accept it as the new normal, and later nights are"
            f" judged against it: tokrate accept {run_dir}"
        )
    return (
        f"regressed since {since.info.name}: the nights from then on are no reference until"
        f" the change is accepted; if it is intended: tokrate accept {since.folder}"
    )


def _with_accept_hint(
    comparison: Comparison, run_dir: Path, reference: Reference | None
) -> Comparison:
    if comparison.verdict != "regressed":
        return comparison
    hint = accept_hint(run_dir, reference)
    return replace(comparison, warnings=(*comparison.warnings, hint))


def _reference_baseline(reference: Reference) -> Baseline:
    """The reference's nights loaded, with each group's indices into them."""
    nights = reference.nights
    index = {e.key: i for i, e in enumerate(nights)}
    runs = tuple(with_verdicts(load_run(e.folder)) for e in nights)
    groups = {g: tuple(index[e.key] for e in ref.nights) for g, ref in reference.groups.items()}
    notes = tuple(
        f"{' '.join(g[1:])}: {ref.note}" for g, ref in reference.groups.items() if ref.note
    )
    accepted = None if reference.accepted is None else reference.accepted.info.run_id
    return Baseline(runs, groups, REFERENCE_NIGHTS, accepted, notes)


def _groups_of(run: LoadedRun) -> list[tuple[str, str, str]]:
    if run.summary is not None:
        return [(g.endpoint, g.model, g.scenario) for g in run.summary.groups]
    frame = run.records.select("endpoint", "model", "scenario").unique()
    return [(str(e), str(m), str(s)) for e, m, s in frame.iter_rows()]


def check_baseline(
    run_dir: Path,
    baseline: str,
    reports_root: Path,
    thresholds: ThresholdSet | Sequence[Threshold] | Mapping[str, str] | None = None,
    from_history: str | None = None,
    on_comparison: Callable[[Comparison], None] | None = None,
) -> int:
    """Judge a finished run (module doc) and return the exit code: 0, 1 regression, 2
    nothing at all comparable, 3 no regression but a row inconclusive.

    ``thresholds`` as compare_loaded takes them; ``from_history`` the folder whose
    history the thresholds are fitted to (None: ``reports_root``; ``"off"``: none).
    ``on_comparison`` receives the Comparison when there was a baseline to compare
    with. Raises RunFolderError for an unreadable folder, OutputError when the files
    cannot be written.
    """
    run_dir = Path(run_dir)
    root = Path(reports_root)
    base_ths = ThresholdSet.of(thresholds)
    current = with_verdicts(load_run(run_dir))
    info = current.info
    metrics = [t.metric for t in base_ths.metrics if t.metric not in RUN_METRICS]
    window = baseline == LATEST_GOOD
    points = entries = None
    reference: Reference | None = None
    if window:
        points, entries, _ = read_points(root, metrics)
        nights = benchmark_nights(list(entries.values()), info, run_dir)
        reference = select_reference(nights, info.started_datetime, _groups_of(current))
        if reference is None:
            others = sum(1 for e in entries.values() if e.info.fingerprint != info.fingerprint)
            _no_baseline(run_dir, info, others)
            if info.complete:
                point_latest_good(root, run_dir)
            return 0
        base = _reference_baseline(reference)
        sizes = {g: len(ref.nights) for g, ref in reference.groups.items()}
    else:
        base = Baseline.of(with_verdicts(load_run(Path(baseline))))
        sizes = {}
    fit = _fit(root, run_dir, info, base_ths, from_history, sizes, points, entries)
    comparison = compare_loaded(
        base,
        current,
        base_ths if fit is None else fit.thresholds,
        confirm=load_confirmation(run_dir),
        noise=None if fit is None else fit.source,
        series_noise=None if fit is None else fit.series,
    )
    if window:
        comparison = _with_hold_warning(comparison, info, root)
    comparison = _with_accept_hint(comparison, run_dir, reference)
    if on_comparison is not None:
        on_comparison(comparison)
    write_comparison(run_dir, render_json(comparison), render_markdown(comparison))
    if window and info.complete and moves_pointer(comparison, info):
        point_latest_good(root, run_dir)
    return comparison.exit_code


def _fit(
    root: Path,
    run_dir: Path,
    info: RunInfo,
    base: ThresholdSet,
    from_history: str | None,
    sizes: Mapping[tuple[str, str, str], int],
    points: Any,
    entries: Any,
) -> NoiseFit | None:
    """The thresholds fitted to the history (module doc), from the points already read
    when the history folder is the reports folder."""
    if from_history == "off":
        return None
    folder = Path(from_history) if from_history else root
    if points is None or folder != root:
        metrics = [t.metric for t in base.metrics if t.metric not in RUN_METRICS]
        points, entries, _ = read_points(folder, metrics)
    return fit_from_points(points, entries, info, run_dir, base, str(folder), sizes)
