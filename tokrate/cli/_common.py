"""What every subcommand's argparse section shares."""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, TypeAlias

from tokrate.errors import UsageError
from tokrate.spec.thresholds import Threshold, ThresholdError, merge_thresholds, parse_threshold

__all__ = ["Parser", "Subparsers", "command", "parse_thresholds"]


class Parser(argparse.ArgumentParser):
    """argparse that raises UsageError (one line, exit 2) instead of printing usage."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(f"{self.prog}: {message}")


if TYPE_CHECKING:
    Subparsers: TypeAlias = argparse._SubParsersAction[Parser]
else:
    Subparsers = argparse._SubParsersAction


def parse_thresholds(texts: Iterable[str], flag: str = "--threshold") -> tuple[Threshold, ...]:
    """The default thresholds with each ``--threshold`` text applied; a bad one is a
    UsageError naming the flag."""
    parsed: list[Threshold | str] = []
    for text in texts:
        try:
            parsed.append(parse_threshold(text))
        except ThresholdError as err:
            raise UsageError(f"{flag} {err}") from None
    return merge_thresholds(parsed)


def command(module: str, name: str) -> Callable[[argparse.Namespace], int]:
    """A subcommand's body, the function ``name`` of ``module``, imported by name when
    the subcommand runs: a command that needs polars, numpy or matplotlib keeps them
    out of every other command's process (``tokrate run`` measures without them)."""

    def run(args: argparse.Namespace) -> int:
        return int(getattr(importlib.import_module(module), name)(args))

    return run
