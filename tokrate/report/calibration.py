"""The report's "calibration" meta line: run.json's ``calibration`` object (written by
tokrate.load.calibrate.judge_run) in one line."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["describe_verdict"]


def describe_verdict(verdict: Mapping[str, Any]) -> str:
    """ "inside: ..." / "OUTSIDE: ..." / "not judged: ..." and the verdict's reason."""
    inside = verdict.get("inside")
    word = "inside" if inside else ("not judged" if inside is None else "OUTSIDE")
    return f"{word}: {verdict.get('reason', '')}"
