"""One-line notices of a run on its console: ``warning: ...``, ``error: ...``, ``note: ...``.

On a terminal a notice is wrapped at word boundaries to the console's width, its
continuation lines indented under the text (a terminal's own wrapping cuts words in
two: "timesta / mps"); a word longer than the width (a URL, a path) is the only thing
ever cut. Anywhere else (a pipe, a CI log) a notice stays one line, so it can be
grepped. Text is printed as is: no markup, no highlighting.
"""

from __future__ import annotations

import contextlib
import textwrap
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from rich.console import Console

__all__ = ["SLOW_STEP_S", "finishing_line", "notice_lines", "print_notice", "said_if_slow"]

#: A step before the load that runs longer than this says so (the terminal would
#: otherwise stay silent: a pre-flight can take up to 10 s an endpoint).
SLOW_STEP_S: Final = 1.0


def notice_lines(kind: str, text: str, width: int | None) -> list[str]:
    """``"kind: text"`` as lines of at most ``width`` columns (None: one line)."""
    head = f"{kind}: "
    if width is None or len(head) + len(text) <= width:
        return [head + text]
    return textwrap.wrap(
        head + text,
        width=width,
        subsequent_indent=" " * len(head),
        break_on_hyphens=False,
        drop_whitespace=True,
    )


def print_notice(console: Console, kind: str, text: str) -> None:
    """Print one notice (wrapped on a terminal, one line elsewhere)."""
    width = console.width if console.is_terminal else None
    for line in notice_lines(kind, text, width):
        console.print(line, markup=False, highlight=False, soft_wrap=True)


@contextlib.contextmanager
def said_if_slow(console: Console | None, kind: str, text: str) -> Iterator[None]:
    """Print the notice ``kind: text`` once the block has run :data:`SLOW_STEP_S`
    (from a timer thread; rich's console locks its output), nothing when it ends
    sooner or there is no console."""
    if console is None:
        yield
        return
    timer = threading.Timer(SLOW_STEP_S, print_notice, (console, kind, text))
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()


def finishing_line(report: bool) -> str:
    """What a run does between its last request and its summary table: seconds in
    which nothing else moves on the screen (about 10 s with the report, 2 cores)."""
    if report:
        return "load done; writing summary.json, report.html and charts (a few seconds)"
    return "load done; writing summary.json"
