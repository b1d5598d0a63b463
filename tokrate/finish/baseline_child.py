"""``tokrate run --baseline``'s check in a child process, so the process that measured
the run never imports polars (tokrate.finish.finalize's rule; the comparison reads both runs'
records with it).

The child runs :func:`tokrate.finish.baseline.run_baseline_check` (comparison.md and
comparison.json, the ``latest-good`` pointer) and sends back, as JSON on stdout, the
exit code, the one-line verdict and the comparison table exactly as ``tokrate compare``
draws it (for a terminal of the parent's width, or plain 80 columns for a pipe). A
tokrate error in the child comes back as its class and one line and is raised here
again; where no child can run, the same check runs in this process (correct, only not
lean).
"""

from __future__ import annotations

import io
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import orjson

from tokrate import errors
from tokrate.finish.finalize import CHILD_TIMEOUT_S, child_command

if TYPE_CHECKING:
    from tokrate.runfolder.comparison import Comparison
    from tokrate.spec import RunSpec

__all__ = ["BaselineOutcome", "baseline_check"]

_ENTRY: Final = "import sys; from tokrate.finish.baseline_child import _main; _main(sys.argv[1:])"


@dataclass(frozen=True, slots=True)
class BaselineOutcome:
    """A baseline check's result: ``code`` (0 / 1 regression / 2 nothing comparable),
    ``line`` (tokrate.finish.baseline.baseline_verdict_line), ``table`` (the comparison table
    as drawn; None when there was no baseline yet) and, from the in-process path only,
    the Comparison itself."""

    code: int
    line: str
    table: str | None
    comparison: Comparison | None = None


def baseline_check(
    spec: RunSpec, run_dir: Path, *, in_child: bool = True, plain: bool = True, width: int = 80
) -> BaselineOutcome:
    """Judge the finished run in ``run_dir`` against ``spec.baseline`` (module doc);
    ``in_child`` False runs it here and keeps the Comparison. Raises what
    :func:`tokrate.finish.baseline.run_baseline_check` raises."""
    if in_child:
        argv, env = child_command("-c", _ENTRY, str(run_dir), "plain" if plain else "tty",
                                  str(width))  # fmt: skip
        config = orjson.dumps(_check_args(spec))
        try:
            done = subprocess.run(
                argv, env=env, input=config, capture_output=True, timeout=CHILD_TIMEOUT_S
            )
            answer = orjson.loads(done.stdout) if done.returncode == 0 else None
        except (OSError, subprocess.SubprocessError, ValueError):
            answer = None
        if isinstance(answer, dict):
            if "error" in answer:
                raise _error_class(str(answer.get("kind")))(str(answer["error"]))
            return BaselineOutcome(int(answer["code"]), str(answer["line"]), answer.get("table"))
    return _check(spec, run_dir, plain, width)


def _check_args(spec: RunSpec) -> dict[str, Any]:
    return {
        "baseline": spec.baseline,
        "dir": spec.output.dir,
        "thresholds": list(spec.compare.thresholds),
        "from_history": spec.compare.thresholds_from_history,
    }


def _check(spec: RunSpec, run_dir: Path, plain: bool, width: int) -> BaselineOutcome:
    from rich.console import Console

    from tokrate.finish.baseline import baseline_verdict_line, run_baseline_check
    from tokrate.report.comparison import render_table

    assert spec.baseline is not None
    code, comparison = run_baseline_check(spec, run_dir)
    table = None
    if comparison is not None:
        buffer = io.StringIO()
        if plain:
            out = Console(file=buffer, width=80, color_system=None)
        else:
            out = Console(file=buffer, force_terminal=True, width=width)
        render_table(comparison, out)
        table = buffer.getvalue()
    return BaselineOutcome(
        code, baseline_verdict_line(spec.baseline, comparison), table, comparison
    )


def _error_class(name: str) -> type[errors.TokrateError]:
    found = getattr(errors, name, None)
    if isinstance(found, type) and issubclass(found, errors.TokrateError):
        return found
    return errors.TokrateError


def _main(argv: list[str]) -> None:
    import dataclasses

    from tokrate.spec import CompareSpec, RunSpec

    run_dir, mode, width = Path(argv[0]), argv[1], int(argv[2])
    args = orjson.loads(sys.stdin.buffer.read())
    base = RunSpec()
    spec = dataclasses.replace(
        base,
        baseline=args["baseline"],
        output=dataclasses.replace(base.output, dir=args["dir"]),
        compare=CompareSpec(
            thresholds=tuple(args["thresholds"]), thresholds_from_history=args["from_history"]
        ),
    )
    try:
        outcome = _check(spec, run_dir, mode == "plain", width)
    except errors.TokrateError as err:
        answer: dict[str, Any] = {"error": str(err), "kind": type(err).__name__}
    else:
        answer = {"code": outcome.code, "line": outcome.line, "table": outcome.table}
    sys.stdout.buffer.write(orjson.dumps(answer))
