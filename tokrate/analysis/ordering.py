"""The one order models are listed in: by size, then by name read as a person reads it.

Every table and chart (terminal, summary.md, report, compare, history) lists models
through these keys, so sim-1b comes before sim-13b and 5m before 20m everywhere. A
model of known size (active parameters, billions) sorts by that size; one of unknown
size comes after every sized one; names compare with their numbers as numbers
("c=4" before "c=16"), then case-insensitively. Pure Python: safe in the measuring
process.
"""

from __future__ import annotations

import math
import re
from typing import Final

__all__ = ["level_key", "model_key", "natural_key"]

_NUMBER: Final = re.compile(r"(\d+(?:\.\d+)?)")


def natural_key(text: str) -> tuple[tuple[int, float, str], ...]:
    """``text`` as a sort key whose numbers compare as numbers: "sim-1b" < "sim-7b" <
    "sim-13b", "5m" < "20m" < "300m"."""
    parts: list[tuple[int, float, str]] = []
    for i, piece in enumerate(_NUMBER.split(text)):
        if i % 2:
            parts.append((0, float(piece), piece))
        elif piece:
            parts.append((1, 0.0, piece.casefold()))
    return tuple(parts)


def model_key(
    model: str, size_b: float | None = None
) -> tuple[float, tuple[tuple[int, float, str], ...], str]:
    """Sort key of a model: its size (active parameters; unknown last), then its name
    read naturally, then the exact name (a stable tie-break)."""
    size = size_b if size_b is not None and math.isfinite(size_b) and size_b > 0 else math.inf
    return (size, natural_key(model), model)


def level_key(
    label: str, load: float | None = None
) -> tuple[float, tuple[tuple[int, float, str], ...]]:
    """Sort key of a load level: its concurrency or rate when known, else its label
    read naturally ("c=4" before "c=16")."""
    value = load if load is not None and math.isfinite(load) else math.inf
    return (value, natural_key(label))
