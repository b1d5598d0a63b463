"""``build_report``: charts, report.html and summary.md from one or more stored runs.

It reads run folders only (never the network), recomputes every metric from the
records with :func:`tokrate.analysis.metrics.summarize`, builds the report model once
(:mod:`tokrate.report.contents`) and renders it: charts (:mod:`tokrate.report.drawing`),
report.html and summary.md (:mod:`tokrate.report.document`), into the output folder::

    report.html              self-contained (embedded PNGs, inline CSS, no scripts)
    summary.md               GitHub-flavoured markdown (CI step summaries, PR comments)
    charts/<name>.png|svg    every chart drawn, in the requested formats
    summary.json             only for a single run folder that has none yet

A chart whose data is missing (no sweep, no prices, no sizes) is left out with a
one-line note in both documents, never drawn empty.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from tokrate.errors import OutputError, UsageError
from tokrate.fileio import FileRefused, make_folder, write_atomic
from tokrate.report.contents import build_model, load_inputs
from tokrate.report.document import report_html, report_markdown
from tokrate.report.drawing import FORMATS, draw_charts
from tokrate.runfolder.store import write_summary

__all__ = ["build_report"]


def build_report(
    run_dirs: Sequence[Path],
    out_dir: Path | None = None,
    *,
    hardware: str | None = None,
    formats: Sequence[str] = FORMATS,
) -> Path:
    """Build report.html, summary.md and charts/ for ``run_dirs``; returns the folder.

    One run and ``out_dir`` None: the run folder itself. Several runs and ``out_dir``
    None: ``<parent of the first run>/compare-<id>-<id>...``. ``hardware`` names the
    profile of the bound line (default: the first run's run.json "hardware", else
    a100-80g). Raises UsageError (no runs, unknown format), ConfigError (unknown
    hardware), RunFolderError (unreadable run), OutputError (cannot write).
    """
    if not run_dirs:
        raise UsageError("report: give at least one run folder")
    bad = [f for f in formats if f not in FORMATS]
    if bad:
        raise UsageError(f"report: unknown format {bad[0]!r} (known: {', '.join(FORMATS)})")
    inputs = load_inputs(run_dirs, hardware=hardware)
    first = inputs.runs[0][1].path
    if out_dir is None:
        compare = first.parent / ("compare-" + "-".join(k for k, _ in inputs.runs))
        out = first if len(inputs.runs) == 1 else compare
    else:
        out = Path(out_dir)
    _prepare(out)
    if len(inputs.runs) == 1 and not (out / "summary.json").exists() and out == first:
        # A run killed before it finished has none: its folder gets the recomputed one.
        write_summary(out, inputs.summaries[0][1])
    model = build_model(inputs)

    def save(name: str, fmt: str, data: bytes) -> None:
        _write(out / "charts" / f"{name}.{fmt}", data)

    drawn = draw_charts(model.charts, formats, save)
    _write(out / "report.html", report_html(model, drawn).encode("utf-8"))
    _write(out / "summary.md", report_markdown(model, drawn).encode("utf-8"))
    return out


def _prepare(out: Path) -> None:
    charts = out / "charts"
    try:
        make_folder(charts, inside=out)
    except FileRefused as err:
        raise OutputError(f"{charts}: {err}") from None
    except OSError as err:
        raise OutputError(f"{out}: cannot create the report folder ({err.strerror})") from None


def _write(path: Path, payload: bytes) -> None:
    """Write atomically, so a crash never leaves half a file."""
    try:
        write_atomic(path, payload)
    except OSError as err:
        raise OutputError(f"{path}: cannot write ({err.strerror})") from None
