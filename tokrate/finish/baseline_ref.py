"""The check of a ``--baseline`` reference before a run, in a module of its own: the
measuring process runs it before the load and must not import the comparison (and
polars with it) to do so. It reads run.json
and the ``latest-good`` pointer only."""

from __future__ import annotations

from pathlib import Path

from tokrate.errors import UsageError
from tokrate.fileio import path_is_dir
from tokrate.runfolder.store import LATEST_GOOD, load_run_info, resolve_latest_good

__all__ = ["check_baseline_ref"]


def check_baseline_ref(baseline: str, reports_root: Path | str, history: str | None) -> None:
    """Refuse, before the run, a baseline (or ``thresholds_from_history`` folder) that
    cannot be read, rather than after the run was measured. ``latest-good`` without a
    pointer yet is fine (the run becomes it). Raises RunFolderError or UsageError."""
    if history and history != "off" and not path_is_dir(Path(history)):
        raise UsageError(f"--thresholds-from-history {history!s:.200}: no such directory")
    if baseline == LATEST_GOOD:
        resolve_latest_good(reports_root)
    else:
        load_run_info(baseline)
