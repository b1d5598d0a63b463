"""Command line: argv -> spec -> one library call -> render -> exit code.

Each subcommand has an ``_add_<name>`` (its argparse section) and a ``_cmd_<name>``
(translate args, make one library call, render). Nothing below this module sees argv.
Deliberate errors (:class:`~tokrate.errors.TokrateError`) print as one line on stderr
and exit with their ``exit_code``; Ctrl-C exits 130.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from tokrate import __version__
from tokrate.errors import TokrateError, UsageError

__all__ = ["main"]


class _Parser(argparse.ArgumentParser):
    """argparse that raises UsageError (one line, exit 2) instead of printing usage."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(f"{self.prog}: {message}")


# --- tokrate sim -------------------------------------------------------------------


def _add_sim(sub: argparse._SubParsersAction[_Parser]) -> None:
    p = sub.add_parser("sim", help="serve the built-in simulated OpenAI endpoint")
    p.set_defaults(func=_cmd_sim)


def _cmd_sim(args: argparse.Namespace) -> int:
    raise UsageError("tokrate sim: not available yet")


# --- tokrate run -------------------------------------------------------------------


def _add_run(sub: argparse._SubParsersAction[_Parser]) -> None:
    p = sub.add_parser("run", help="run a benchmark (the simulator when no endpoint is given)")
    p.set_defaults(func=_cmd_run)


def _cmd_run(args: argparse.Namespace) -> int:
    raise UsageError("tokrate run: not available yet")


# --- tokrate init ------------------------------------------------------------------


def _add_init(sub: argparse._SubParsersAction[_Parser]) -> None:
    p = sub.add_parser("init", help="write a commented example bench.toml")
    p.set_defaults(func=_cmd_init)


def _cmd_init(args: argparse.Namespace) -> int:
    raise UsageError("tokrate init: not available yet")


# --- tokrate report ----------------------------------------------------------------


def _add_report(sub: argparse._SubParsersAction[_Parser]) -> None:
    p = sub.add_parser("report", help="(re)build the report of one or more stored runs")
    p.set_defaults(func=_cmd_report)


def _cmd_report(args: argparse.Namespace) -> int:
    raise UsageError("tokrate report: not available yet")


# --- tokrate compare ---------------------------------------------------------------


def _add_compare(sub: argparse._SubParsersAction[_Parser]) -> None:
    p = sub.add_parser("compare", help="compare a run against a baseline; exit 1 on regression")
    p.set_defaults(func=_cmd_compare)


def _cmd_compare(args: argparse.Namespace) -> int:
    raise UsageError("tokrate compare: not available yet")


# --- tokrate history ---------------------------------------------------------------


def _add_history(sub: argparse._SubParsersAction[_Parser]) -> None:
    p = sub.add_parser("history", help="trend charts over every run folder under a directory")
    p.set_defaults(func=_cmd_history)


def _cmd_history(args: argparse.Namespace) -> int:
    raise UsageError("tokrate history: not available yet")


# --- main --------------------------------------------------------------------------


def build_parser() -> _Parser:
    parser = _Parser(prog="tokrate", description="Client-side LLM speed benchmarks.")
    parser.add_argument("--version", action="version", version=f"tokrate {__version__}")
    sub = parser.add_subparsers(dest="command", parser_class=_Parser, metavar="COMMAND")
    for add in (_add_run, _add_sim, _add_report, _add_compare, _add_history, _add_init):
        add(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``tokrate`` console script; returns the exit code."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
        if getattr(args, "func", None) is None:
            parser.print_help(sys.stderr)
            return 2
        return int(args.func(args))
    except TokrateError as err:
        print(f"tokrate: error: {err}", file=sys.stderr)
        return err.exit_code
    except KeyboardInterrupt:
        print("tokrate: interrupted", file=sys.stderr)
        return 130
