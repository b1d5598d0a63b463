"""What a run shows while it runs: the one object the pipeline prints through.

:class:`LiveOutput` owns the console (rich's, usually stderr), the ``quiet`` choice and
the live progress display (:class:`~tokrate.load.progress.RunProgress`). The pipeline's
steps (prepare, measure, finish, the confirmation) hand it every line they have for a
person and never touch a console themselves, so what ``--quiet`` hides is decided in
one place:

- :meth:`~LiveOutput.notice` (``warning: ...``, ``error: ...``, ``confirm: ...``) and
  :meth:`~LiveOutput.slow_step`: always shown, ``--quiet`` too: they say what went
  wrong or why nothing moves.
- :meth:`~LiveOutput.tell` (``cost: ...``, ``prompts: ...``, ``note: ...``),
  :meth:`~LiveOutput.line` (plain lines: a capacity probe's verdict, "load done") and
  the progress display: hidden by ``quiet``.

No console (a library caller that wants nothing drawn): every method is a no-op, and
the run's warnings still reach run.json and :class:`~tokrate.load.finish.RunResult`.
The notices' wrapping rules are :mod:`tokrate.load.notices`'.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

from tokrate.load.notices import print_notice, said_if_slow

if TYPE_CHECKING:
    import threading

    from rich.console import Console

    from tokrate.load.progress import RunProgress, ScenarioInfo

__all__ = ["LiveOutput"]


class LiveOutput:
    """The console of one run, and what ``quiet`` hides on it (module doc)."""

    def __init__(self, console: Console | None = None, *, quiet: bool = False) -> None:
        self.console = console
        self.quiet = quiet
        #: The live progress display while the load runs (None: none is drawn).
        self.progress: RunProgress | None = None

    def quieted(self) -> LiveOutput:
        """The same console with ``quiet`` on (a confirmation's re-measurement)."""
        return LiveOutput(self.console, quiet=True)

    @property
    def talks(self) -> bool:
        """Whether lines that ``quiet`` hides are shown."""
        return self.console is not None and not self.quiet

    def notice(self, kind: str, text: str) -> None:
        """``kind: text``, shown even when quiet (a warning, an error)."""
        if self.console is not None:
            print_notice(self.console, kind, text)

    def notices(self, pairs: Sequence[tuple[str, str]]) -> None:
        """:meth:`notice` for each ``(kind, text)`` in order."""
        for kind, text in pairs:
            self.notice(kind, text)

    def tell(self, kind: str, text: str) -> None:
        """``kind: text``, hidden when quiet (what the run is about to do)."""
        if self.talks:
            self.notice(kind, text)

    def line(self, text: str) -> None:
        """A plain line (no ``kind:``), hidden when quiet."""
        if self.console is not None and not self.quiet:
            self.console.print(text, markup=False, highlight=False, soft_wrap=True)

    @contextlib.contextmanager
    def slow_step(self, kind: str, text: str) -> Iterator[None]:
        """``kind: text`` once the block has run a second (tokrate.load.notices), even
        when quiet: a silent terminal would look hung."""
        with said_if_slow(self.console, kind, text):
            yield

    @contextlib.contextmanager
    def showing_progress(
        self,
        targets: Sequence[str],
        scenarios: Sequence[ScenarioInfo],
        *,
        title: str,
        stop: threading.Event,
        grace_s: float,
        interval_s: float,
    ) -> Iterator[None]:
        """The progress display while the block runs (none when quiet or without a
        console); ``targets`` are the endpoint/model labels in target order."""
        if not self.talks:
            yield
            return
        from tokrate.load.progress import RunProgress

        assert self.console is not None
        progress = RunProgress(
            self.console,
            targets,
            scenarios,
            title=title,
            stop=stop,
            grace_s=grace_s,
            interval_s=interval_s,
        )
        with progress:
            self.progress = progress
            try:
                yield
            finally:
                self.close_progress()

    def start_scenario(self, k: int) -> None:
        """Scenario ``k`` of the plan starts now (the progress display's title)."""
        if self.progress is not None:
            self.progress.start_scenario(k)

    def close_progress(self) -> None:
        """Stop drawing the progress (idempotent): what follows prints below it."""
        if self.progress is not None:
            self.progress.close()
