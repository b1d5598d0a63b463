"""summary.json ``quality``: how many checked answers passed, with a 95% interval.

Per group (endpoint x model x scenario) and per task of a group, over the measured final
attempts whose answer was checked (docs/quality.md): ``n`` answers judged (passed or
failed; a check's own error is not a judgement), ``passed``, ``rate`` = passed / n,
``rate_ci`` its Wilson 95% interval [lo, hi], ``mean_score`` (a user check's scores;
1/0 for the built-in kinds) and ``check_errors`` (answers whose check raised). Absent
(null) when the group had no checked prompt.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Final

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
    #: Written after ``passed`` for readers of the file (jsondoc), never read back.
    __json_computed__: ClassVar = {"passed": ("rate", "rate_ci")}

    @property
    def rate(self) -> float | None:
        return self.passed / self.n if self.n else None

    @property
    def rate_ci(self) -> tuple[float, float] | None:
        return wilson_interval(self.passed, self.n, QUALITY_CONFIDENCE) if self.n else None
