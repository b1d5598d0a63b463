"""Command line: argv -> spec -> one library call -> render -> exit code.

Each subcommand has an ``add_<name>`` (its argparse section) and a ``_cmd_<name>``
(translate args, make one library call, render) in a module of this package. Nothing
below this package sees argv. Deliberate errors (:class:`~tokrate.errors.TokrateError`)
print as one line on stderr and exit with their ``exit_code``; Ctrl-C exits 130.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

from tokrate._version import __version__
from tokrate.cli._analysis import add_accept, add_compare, add_history, add_init, add_report
from tokrate.cli._calibrate import add_calibrate
from tokrate.cli._common import Parser
from tokrate.cli._run import add_run
from tokrate.cli._sim import add_sim
from tokrate.errors import TokrateError

__all__ = ["build_parser", "main"]


def build_parser() -> Parser:
    parser = Parser(prog="tokrate", description="Client-side LLM speed benchmarks.")
    parser.add_argument("--version", action="version", version=f"tokrate {__version__}")
    sub = parser.add_subparsers(dest="command", parser_class=Parser, metavar="COMMAND")
    for add in (
        add_run,
        add_sim,
        add_report,
        add_compare,
        add_history,
        add_accept,
        add_init,
        add_calibrate,
    ):
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
        # Errors quote servers, URLs and files: no secret (known by value, or by shape)
        # and no terminal control character reaches the terminal.
        from tokrate.redact import Redactor, strip_control

        known = [v for k, v in os.environ.items() if k.endswith(("_API_KEY", "_KEY", "_TOKEN"))]
        line = Redactor().with_secrets(known).text(strip_control(str(err)))
        print(f"tokrate: error: {' '.join(line.split())}", file=sys.stderr)
        return err.exit_code
    except KeyboardInterrupt as err:
        # A run stopped before its load (tokrate.load.signals.RunInterrupted) names the
        # signal; anything else is a Ctrl-C before a run began.
        code = getattr(err, "exit_code", 130)
        if code != 130 or str(err):
            print(
                f"tokrate: interrupted by {err} before any request was sent; no run folder"
                " was kept",
                file=sys.stderr,
            )
        else:
            print("tokrate: interrupted", file=sys.stderr)
        return int(code)
