"""summary.json ``quality``: how many checked answers passed, with a 95% interval.

Per group (endpoint x model x scenario) and per task of a group, over the measured final
attempts whose answer was checked (docs/quality.md): ``n`` answers judged (passed or
failed; a check's own error is not a judgement), ``passed``, ``rate`` = passed / n,
``rate_ci`` its Wilson 95% interval [lo, hi], ``mean_score`` (a user check's scores;
1/0 for the built-in kinds) and ``check_errors`` (answers whose check raised). Absent
(null) when the group had no checked prompt.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from tokrate.errors import RunFolderError
from tokrate.runfolder.proportions import wilson_interval

__all__ = ["QUALITY_CONFIDENCE", "Quality"]

#: The confidence of ``rate_ci``.
QUALITY_CONFIDENCE: Final = 0.95


@dataclass(frozen=True, slots=True)
class Quality:
    """Checked answers of one group or task (module docstring)."""

    n: int
    passed: int
    mean_score: float | None = None
    check_errors: int = 0

    @property
    def rate(self) -> float | None:
        return self.passed / self.n if self.n else None

    @property
    def rate_ci(self) -> tuple[float, float] | None:
        return wilson_interval(self.passed, self.n, QUALITY_CONFIDENCE) if self.n else None

    def to_dict(self) -> dict[str, Any]:
        ci = self.rate_ci
        return {
            "n": self.n,
            "passed": self.passed,
            "rate": self.rate,
            "rate_ci": None if ci is None else list(ci),
            "mean_score": self.mean_score,
            "check_errors": self.check_errors,
        }

    @classmethod
    def from_dict(cls, data: object, where: str) -> Quality | None:
        if data is None:
            return None
        if not isinstance(data, Mapping):
            raise RunFolderError(f"{where}: quality must be an object")
        try:
            n, passed = int(data["n"]), int(data["passed"])
            errors = int(data.get("check_errors") or 0)
        except (KeyError, TypeError, ValueError):
            raise RunFolderError(f"{where}: quality needs integer n and passed") from None
        if not 0 <= passed <= n:
            raise RunFolderError(f"{where}: quality passed must be in 0..n")
        score = data.get("mean_score")
        mean = float(score) if isinstance(score, int | float) else None
        return cls(n, passed, mean, errors)
