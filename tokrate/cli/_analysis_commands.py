"""The bodies of ``tokrate report|compare|history``: read stored runs, render.

Loaded by name when one of these commands runs (:func:`tokrate.cli._common.command`),
never by ``tokrate run``: they import polars, numpy and matplotlib (through the
analysis and the report), which the measuring process never loads (the lean-wall
contracts in pyproject.toml). Their argparse sections are in :mod:`tokrate.cli._analysis`.
"""

from __future__ import annotations

import argparse
import io
import sys
import webbrowser
from datetime import UTC, datetime
from pathlib import Path

from rich.console import Console

from tokrate.analysis.compare import compare_runs
from tokrate.analysis.noise import fit_thresholds
from tokrate.cli._common import parse_thresholds
from tokrate.errors import OutputError, UsageError
from tokrate.fileio import path_is_dir, write_atomic
from tokrate.report.build import build_report
from tokrate.report.history_pages import build_history
from tokrate.report.terminal.comparison_text import render_json, render_markdown, render_table
from tokrate.report.terminal.junit import junit_xml
from tokrate.runfolder.acceptance import Acceptance
from tokrate.runfolder.comparison import Comparison
from tokrate.runfolder.loaded_run import records_warning
from tokrate.runfolder.store import LATEST_GOOD, load_run_info, write_acceptance
from tokrate.spec.thresholds import ThresholdSet

__all__ = ["cmd_accept", "cmd_compare", "cmd_history", "cmd_report"]


def cmd_report(args: argparse.Namespace) -> int:
    formats = tuple(f.strip() for f in str(args.formats).split(",") if f.strip())
    if not formats:
        raise UsageError("tokrate report: --format needs at least one of png, svg, pdf")
    _warn_records(args.runs)
    out = build_report(
        [Path(r) for r in args.runs],
        Path(args.out) if args.out else None,
        hardware=args.hardware,
        formats=formats,
    )
    html_path = out / "report.html"
    print(html_path)
    if args.open and not _open_page(html_path):
        # The report is written either way: say so, and where, instead of nothing.
        print(
            f"tokrate: warning: report --open: no browser to open {html_path} here "
            "(set BROWSER, or open the file yourself)",
            file=sys.stderr,
        )
    return 0


def _open_page(page: Path) -> bool:
    """Open ``page`` in a browser; False when none could be started (no display, no
    BROWSER, a headless machine): webbrowser then answers False or raises."""
    try:
        return webbrowser.open(page.resolve().as_uri())
    except webbrowser.Error:
        return False


def _warn_records(folders: list[str]) -> None:
    """One warning line per run whose records.parquet is unusable (its records are read
    from records.jsonl instead; a run with neither is refused by load_run)."""

    for folder in folders:
        warning = records_warning(folder)
        if warning is not None:
            print(f"tokrate: warning: {warning}", file=sys.stderr)


def cmd_compare(args: argparse.Namespace) -> int:
    thresholds: ThresholdSet = ThresholdSet(parse_thresholds(args.threshold))
    history = _history_folder(args.thresholds_from_history, Path(args.baseline))
    fit = None if history is None else fit_thresholds(history, Path(args.current), thresholds)
    _warn_records([args.baseline, args.current])
    comparison = compare_runs(
        Path(args.baseline),
        Path(args.current),
        thresholds if fit is None else fit.thresholds,
        noise=None if fit is None else fit.source,
        series_noise=None if fit is None else fit.series,
    )
    if args.junit:
        try:
            write_atomic(Path(args.junit), junit_xml(comparison))
        except OSError as err:
            raise OutputError(f"{args.junit}: cannot write the JUnit file ({err})") from None
    if args.format == "md":
        text = render_markdown(comparison)
    elif args.format == "json":
        text = render_json(comparison)
    else:
        if not args.output:
            # A pipe or CI log gets plain text at a fixed width, a terminal its own.
            tty = sys.stdout.isatty()
            render_table(comparison, Console() if tty else Console(width=80, color_system=None))
            return _compare_exit(comparison)
        # A file gets plain text at a fixed width.
        buf = io.StringIO()
        render_table(comparison, Console(file=buf, width=80, color_system=None))
        text = buf.getvalue()
    if args.output:
        try:
            write_atomic(Path(args.output), text.encode("utf-8"))
        except OSError as err:
            raise OutputError(f"{args.output}: cannot write ({err.strerror})") from None
    else:
        sys.stdout.write(text)
    return _compare_exit(comparison)


def _history_folder(flag: str | None, baseline: Path) -> Path | None:
    """Where compare fits noise thresholds: the flag's folder (None for "off"), else
    the baseline's folder when a nightly keeps its runs there (a latest-good pointer)."""
    if flag == "off":
        return None
    if flag is not None:
        if not path_is_dir(Path(flag)):
            raise UsageError(f"--thresholds-from-history {flag!s:.200}: no such directory")
        return Path(flag)
    parent = baseline.resolve().parent
    return parent if (parent / LATEST_GOOD).is_file() else None


def _compare_exit(comparison: Comparison) -> int:
    """The comparison's exit code; 2 also says why on stderr (nothing comparable)."""
    if comparison.exit_code == 2:
        reasons = sorted({r.reason for r in comparison.results}) or ["no target in either run"]
        print(
            f"tokrate: error: nothing was comparable ({'; '.join(reasons)[:300]})",
            file=sys.stderr,
        )
    return comparison.exit_code


def cmd_history(args: argparse.Namespace) -> int:
    thresholds = parse_thresholds(args.threshold)
    out, history = build_history(
        Path(args.root),
        Path(args.output) if args.output else None,
        models=args.model,
        metrics=args.metric,
        window=args.window,
        thresholds=thresholds,
    )
    for warning in history.warnings:
        print(f"tokrate: warning: {warning}", file=sys.stderr)
    print(
        f"history: {history.runs} runs, {history.changes.height} point(s) outside their band"
        f" -> {out / 'history.html'}"
    )
    return 0


def cmd_accept(args: argparse.Namespace) -> int:
    """Write accepted.json into the run (tokrate.runfolder.acceptance): from now on the
    nightly reference of its benchmark starts at this run."""
    folder = Path(args.run)
    info = load_run_info(folder)
    if not info.complete:
        raise UsageError(
            f"tokrate accept: {folder} is {info.status}; only a complete run can be accepted"
        )
    now = datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
    write_acceptance(folder, Acceptance(now, args.note))
    print(
        f"accepted {info.name} as the new normal of its benchmark (fingerprint"
        f" {info.fingerprint}): later nights are judged against it and the nights after it"
    )
    return 0
