"""``tokrate run --baseline REF``: judge a finished run against a baseline run.

REF is a run folder or ``latest-good`` (the pointer file in the reports root, see
:func:`tokrate.runfolder.store.resolve_latest_good`). The verdicts are
:func:`tokrate.analysis.compare.compare_runs`'s; ``comparison.md`` and ``comparison.json`` are
written into the run folder; the ``latest-good`` pointer moves to this run only when it
completed and has no regression. With ``latest-good`` and no pointer yet, the run
passes and becomes latest-good.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from tokrate.analysis.compare import COMPARISON_SCHEMA_VERSION, Comparison, compare_runs
from tokrate.errors import OutputError
from tokrate.fileio import write_atomic
from tokrate.load.baseline_ref import check_baseline_ref
from tokrate.report.comparison import baseline_verdict_line, render_json, render_markdown
from tokrate.runfolder.store import (
    LATEST_GOOD,
    load_run_info,
    point_latest_good,
    resolve_latest_good,
)
from tokrate.spec.thresholds import Threshold, ThresholdSet

if TYPE_CHECKING:
    from tokrate.spec import RunSpec

__all__ = [
    "baseline_verdict_line",
    "check_baseline",
    "check_baseline_ref",
    "run_baseline_check",
]


def _write(path: Path, text: str) -> None:
    try:
        write_atomic(path, text.encode("utf-8"))
    except OSError as err:
        raise OutputError(f"{path}: cannot write ({err.strerror or err})") from None


def check_baseline(
    run_dir: Path,
    baseline: str,
    reports_root: Path,
    thresholds: ThresholdSet | Sequence[Threshold] | Mapping[str, str] | None = None,
    on_comparison: Callable[[Comparison], None] | None = None,
) -> int:
    """Compare a finished run against ``baseline`` and return the exit code (0 / 1 /
    2 when nothing at all was comparable).

    ``on_comparison`` receives the Comparison when there was a baseline to compare
    with (``tokrate run --baseline`` prints its table). Raises RunFolderError for an
    unreadable folder or a dangling pointer, OutputError when the files cannot be
    written.
    """
    run_dir = Path(run_dir)
    reports_root = Path(reports_root)
    base_dir = resolve_latest_good(reports_root) if baseline == LATEST_GOOD else Path(baseline)
    info = load_run_info(run_dir)
    if base_dir is None:
        if info.complete:
            text = f"### ✅ tokrate compare: no baseline yet — {info.name} becomes {LATEST_GOOD}\n"
        else:
            text = (
                f"### ⚠️ tokrate compare: no baseline yet; {info.name} is {info.status},"
                f" so it does not become {LATEST_GOOD}\n"
            )
        doc: dict[str, Any] = {
            "schema_version": COMPARISON_SCHEMA_VERSION,
            "kind": "tokrate-comparison",
            "verdict": "no_baseline",
            "counts": {},
            "baseline": None,
            "current": {"path": str(run_dir), "run_id": info.run_id, "label": info.label},
            "thresholds": [],
            "settings": {},
            "warnings": [],
            "results": [],
        }
        _write(run_dir / "comparison.md", text)
        _write(run_dir / "comparison.json", orjson.dumps(doc, option=orjson.OPT_INDENT_2).decode())
        if info.complete:
            point_latest_good(reports_root, run_dir)
        return 0
    comparison = compare_runs(base_dir, run_dir, thresholds)
    if on_comparison is not None:
        on_comparison(comparison)
    _write(run_dir / "comparison.md", render_markdown(comparison))
    _write(run_dir / "comparison.json", render_json(comparison))
    code = comparison.exit_code
    if baseline == LATEST_GOOD and code == 0 and info.complete:
        point_latest_good(reports_root, run_dir)
    return code


def run_baseline_check(spec: RunSpec, run_dir: Path) -> tuple[int, Comparison | None]:
    """The baseline verdict (exit code, comparison) with the configured thresholds,
    fitted to history's noise when ``compare.thresholds_from_history`` is set."""
    from tokrate.spec.thresholds import merge_thresholds, parse_threshold

    thresholds = ThresholdSet(merge_thresholds(parse_threshold(t) for t in spec.compare.thresholds))
    if spec.compare.thresholds_from_history:
        from tokrate.analysis.history import load_history, noise_thresholds

        history = load_history(spec.compare.thresholds_from_history, thresholds=thresholds.metrics)
        thresholds = noise_thresholds(history, thresholds.metrics)
    found: list[Comparison] = []
    assert spec.baseline is not None
    code = check_baseline(
        run_dir, spec.baseline, Path(spec.output.dir), thresholds, on_comparison=found.append
    )
    return code, (found[0] if found else None)
