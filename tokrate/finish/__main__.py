"""``python -m tokrate.finish RUN_DIR [options]``: the finishing process of a run
(tokrate.finish.child says what the options ask for and how it answers)."""

from __future__ import annotations

import sys

from tokrate.errors import UsageError
from tokrate.finish.child import FinishRequest
from tokrate.finish.stopping import ChildSignals


def main(argv: list[str]) -> int:
    """Run the request; each failed step is one line on stderr (the protocol's only
    output); exit 0 when every step is done, else the first failed step's code."""
    try:
        request = FinishRequest.parse(argv)
    except UsageError as err:
        sys.stderr.write(f"{err}\n")
        return err.exit_code
    signals = ChildSignals()
    signals.install(request.stop_fd)
    from tokrate.finish.steps import finish  # after the handlers: it imports polars

    problems = finish(request, signals)
    for problem in problems:
        sys.stderr.write(problem.line() + "\n")
    return problems[0].exit_code if problems else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
