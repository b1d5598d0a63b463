"""``tokrate report|compare|history|accept|init``: read stored runs (never measure), render.

The argparse sections are here; the bodies of report, compare and history, which need
the analysis stack, are in :mod:`tokrate.cli._analysis_commands`, loaded by name when
one of them runs, so ``tokrate run`` (which builds every section) never imports them.
"""

from __future__ import annotations

import argparse
from typing import Final

from tokrate.cli._common import Subparsers, command

__all__ = ["add_accept", "add_compare", "add_history", "add_init", "add_report"]

#: Where the bodies of report, compare and history live (module doc).
_COMMANDS: Final = "tokrate.cli._analysis_commands"


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
    p.set_defaults(func=command(_COMMANDS, "cmd_report"))


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
    p.add_argument(
        "--junit",
        metavar="PATH",
        help="also write the verdicts as JUnit XML (a testcase per target, level and"
        " metric; a failure per regression) for CI test reports",
    )
    p.set_defaults(func=command(_COMMANDS, "cmd_compare"))


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
    p.set_defaults(func=command(_COMMANDS, "cmd_history"))


def add_accept(sub: Subparsers) -> None:
    p = sub.add_parser(
        "accept",
        help="accept a run's level as its benchmark's new normal (ends a flagged regression)",
    )
    p.add_argument("run", metavar="RUN", help="run folder whose level is intended")
    p.add_argument("--note", metavar="TEXT", help="why (kept in accepted.json)")
    p.set_defaults(func=command(_COMMANDS, "cmd_accept"))
