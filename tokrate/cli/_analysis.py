"""``tokrate report|compare|history|init``: read stored runs (never measure), render."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from tokrate.cli._common import Subparsers, parse_thresholds
from tokrate.errors import UsageError

__all__ = ["add_compare", "add_history", "add_init", "add_report"]


def add_init(sub: Subparsers) -> None:
    p = sub.add_parser("init", help="write a commented example bench.toml")
    p.add_argument(
        "path", nargs="?", default="bench.toml", metavar="PATH", help="file to write (bench.toml)"
    )
    p.add_argument("--force", action="store_true", help="overwrite an existing file")
    p.set_defaults(func=_cmd_init)


def _cmd_init(args: argparse.Namespace) -> int:
    from tokrate.spec.init_template import write_example

    path = write_example(args.path, force=args.force)
    print(f"wrote {path}; edit it, then run: tokrate run -c {path}")
    return 0


def add_report(sub: Subparsers) -> None:
    p = sub.add_parser("report", help="(re)build the report of one or more stored runs")
    p.add_argument("runs", nargs="+", metavar="RUN", help="run folder(s), e.g. reports/<run-id>")
    p.add_argument(
        "-o",
        "--out",
        metavar="DIR",
        default=None,
        help="output folder (default: the run folder; for several runs reports/compare-<ids>)",
    )
    p.add_argument(
        "--hardware",
        metavar="PROFILE",
        default=None,
        help="bound-line hardware: a profile name, bandwidth=900GB/s[,flops=..,memory=..] "
        "or a .toml file (default: run.json 'hardware')",
    )
    p.add_argument(
        "--format",
        dest="formats",
        metavar="png,svg,pdf",
        default="png,svg",
        help="chart file formats under charts/: png, svg, pdf (comma-separated; default png,svg)",
    )
    p.add_argument("--open", action="store_true", help="open report.html in a browser")
    p.set_defaults(func=_cmd_report)


def _cmd_report(args: argparse.Namespace) -> int:

    from tokrate.report.build import build_report

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
    if args.open:
        import webbrowser

        webbrowser.open(html_path.resolve().as_uri())
    return 0


def _warn_records(folders: list[str]) -> None:
    """One warning line per run whose records.parquet is unusable (its records are read
    from records.jsonl instead; a run with neither is refused by load_run)."""
    from tokrate.runfolder.loaded_run import records_warning

    for folder in folders:
        warning = records_warning(folder)
        if warning is not None:
            print(f"tokrate: warning: {warning}", file=sys.stderr)


def add_compare(sub: Subparsers) -> None:
    p = sub.add_parser("compare", help="compare a run against a baseline; exit 1 on regression")
    p.add_argument("baseline", metavar="BASELINE", help="baseline run folder")
    p.add_argument("current", metavar="CURRENT", help="run folder to judge")
    p.add_argument(
        "--threshold",
        action="append",
        default=[],
        metavar="METRIC=+N%",
        help="override a default threshold (ttft_p95=+10%%, decode_tps_p50=-5%%, "
        "error_rate=+1pp, METRIC=off); repeatable",
    )
    p.add_argument(
        "--thresholds-from-history",
        metavar="DIR|off",
        help="widen each series' threshold to the run-to-run noise of the runs under DIR"
        " that started before CURRENT (default: BASELINE's folder when it holds a"
        " latest-good pointer; off: no fit; docs/regressions.md)",
    )
    p.add_argument(
        "--format", choices=("md", "json", "table"), default="table", help="default: table"
    )
    p.add_argument("-o", "--output", metavar="FILE", help="write there instead of stdout")
    p.set_defaults(func=_cmd_compare)


def _cmd_compare(args: argparse.Namespace) -> int:

    from tokrate.analysis.compare import compare_runs
    from tokrate.errors import OutputError
    from tokrate.report.terminal.comparison_text import render_json, render_markdown, render_table
    from tokrate.spec.thresholds import ThresholdSet

    thresholds: ThresholdSet = ThresholdSet(parse_thresholds(args.threshold))
    history = _history_folder(args.thresholds_from_history, Path(args.baseline))
    noise = None
    if history is not None:
        from tokrate.analysis.noise import fit_thresholds

        thresholds, noise = fit_thresholds(history, Path(args.current), thresholds)
    _warn_records([args.baseline, args.current])
    comparison = compare_runs(Path(args.baseline), Path(args.current), thresholds, noise=noise)
    if args.format == "md":
        text = render_markdown(comparison)
    elif args.format == "json":
        text = render_json(comparison)
    else:
        import io

        from rich.console import Console

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
            from tokrate.fileio import write_atomic

            write_atomic(Path(args.output), text.encode("utf-8"))
        except OSError as err:
            raise OutputError(f"{args.output}: cannot write ({err.strerror})") from None
    else:
        sys.stdout.write(text)
    return _compare_exit(comparison)


def _history_folder(flag: str | None, baseline: Path) -> Path | None:
    """Where compare fits noise thresholds: the flag's folder (None for "off"), else
    the baseline's folder when a nightly keeps its runs there (a latest-good pointer)."""
    from tokrate.fileio import path_is_dir
    from tokrate.runfolder.store import LATEST_GOOD

    if flag == "off":
        return None
    if flag is not None:
        if not path_is_dir(Path(flag)):
            raise UsageError(f"--thresholds-from-history {flag!s:.200}: no such directory")
        return Path(flag)
    parent = baseline.resolve().parent
    return parent if (parent / LATEST_GOOD).is_file() else None


def _compare_exit(comparison: object) -> int:
    """The comparison's exit code; 2 also says why on stderr (nothing comparable)."""
    from tokrate.runfolder.comparison import Comparison

    assert isinstance(comparison, Comparison)
    if comparison.exit_code == 2:
        reasons = sorted({r.reason for r in comparison.results}) or ["no target in either run"]
        print(
            f"tokrate: error: nothing was comparable ({'; '.join(reasons)[:300]})",
            file=sys.stderr,
        )
    return comparison.exit_code


def add_history(sub: Subparsers) -> None:
    p = sub.add_parser("history", help="trend charts over every run folder under a directory")
    p.add_argument("root", metavar="DIR", help="folder holding run folders (any depth)")
    p.add_argument("--model", action="append", default=[], metavar="M", help="repeatable")
    p.add_argument(
        "--metric", action="append", default=[], metavar="METRIC", help="e.g. ttft_p95; repeatable"
    )
    p.add_argument(
        "--window", type=int, default=20, help="earlier runs a noise threshold is fitted to (20)"
    )
    p.add_argument(
        "--threshold", action="append", default=[], metavar="METRIC=+N%", help="as for compare"
    )
    p.add_argument("-o", "--output", metavar="DIR", help="output folder (default DIR/history)")
    p.set_defaults(func=_cmd_history)


def _cmd_history(args: argparse.Namespace) -> int:

    from tokrate.report.history_pages import build_history

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
