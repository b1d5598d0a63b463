"""What every subcommand's argparse section shares."""

from __future__ import annotations

import argparse
from collections.abc import Iterable
from typing import TYPE_CHECKING, TypeAlias

from tokrate.errors import UsageError
from tokrate.spec.thresholds import Threshold, ThresholdError, merge_thresholds, parse_threshold

__all__ = ["Parser", "Subparsers", "parse_thresholds"]


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
