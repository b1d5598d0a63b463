"""The machine's calibration file: what ``tokrate calibrate`` measured, one JSON file
per machine (not per run), versioned (:data:`CALIBRATION_VERSION`).

By default ``$TOKRATE_CALIBRATION``, else ``$XDG_CACHE_HOME/tokrate/calibration.json``
(else ``~/.cache/tokrate/calibration.json``). :func:`save_calibration` is its one
writer and :func:`load_calibration` its one reader; every run's ``calibration`` verdict
in run.json (:func:`tokrate.analysis.calibration.judge_run`) is judged against it.
Figures are in the units :class:`LevelFloor` names (ms, µs per token).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

import orjson

from tokrate.errors import RunFolderError, UsageError
from tokrate.fileio import FileRefused, read_regular, write_atomic
from tokrate.runfolder.files import JSON_LIMIT_BYTES
from tokrate.runfolder.jsondoc import from_json, to_json

__all__ = [
    "CALIBRATION_VERSION",
    "Calibration",
    "LevelFloor",
    "default_calibration_path",
    "load_calibration",
    "save_calibration",
]

CALIBRATION_VERSION: Final = 1


@dataclass(frozen=True, slots=True)
class LevelFloor:
    """One concurrency's floor (tokrate.load.calibrate's module doc for every figure)."""

    concurrency: int
    requests: int
    errors: int
    tokens: int
    #: "kernel", "user", or "mixed" (some requests each way).
    stamp_source: str
    lag_mean_ms: float
    lag_p99_ms: float
    cpu_us_per_token: float
    loop_lag_p99_ms: float
    loop_lag_max_ms: float
    #: Worker processes the level ran in (older files: 1).
    workers: int = 1


@dataclass(frozen=True, slots=True)
class Calibration:
    created_at: str
    host: str
    tokrate_version: str
    kernel_stamps: str
    ttft_ms: float
    itl_ms: float
    tokens_per_request: int
    #: 1-minute load average before and after (the machine is often shared).
    load_before: float
    load_after: float
    levels: tuple[LevelFloor, ...]
    version: int = field(default=CALIBRATION_VERSION, kw_only=True)

    def first_over(self, mark_ms: float) -> LevelFloor | None:
        """The lowest calibrated level whose p99 stamp lag is over ``mark_ms``."""
        for level in sorted(self.levels, key=lambda lv: lv.concurrency):
            if level.lag_p99_ms > mark_ms:
                return level
        return None

    def level_for(self, concurrency: int) -> LevelFloor | None:
        """The smallest calibrated level at or above ``concurrency`` (None: beyond)."""
        for level in sorted(self.levels, key=lambda lv: lv.concurrency):
            if level.concurrency >= concurrency:
                return level
        return None


def default_calibration_path() -> Path:
    env = os.environ.get("TOKRATE_CALIBRATION")
    if env:
        return Path(env)
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "tokrate" / "calibration.json"


def save_calibration(calibration: Calibration, path: Path) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, orjson.dumps(to_json(calibration), option=orjson.OPT_INDENT_2))
    except OSError as err:
        raise UsageError(f"{path}: cannot write the calibration ({err.strerror})") from None


def load_calibration(path: Path) -> Calibration | None:
    """The calibration saved at ``path``; None when there is none. Raises UsageError
    for a file that is not one."""
    try:
        raw = read_regular(path, JSON_LIMIT_BYTES)
    except FileNotFoundError:
        return None
    except FileRefused as err:
        raise UsageError(f"{path}: calibration file {err}") from None
    except OSError as err:
        raise UsageError(f"{path}: cannot read the calibration ({err.strerror})") from None
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError as err:
        raise UsageError(f"{path}: not JSON ({err})") from None
    if not isinstance(data, dict):
        raise UsageError(f"{path}: not a tokrate calibration (not an object)")
    if data.get("version") != CALIBRATION_VERSION:
        raise UsageError(
            f"{path}: calibration version {data.get('version')!r} is not"
            f" {CALIBRATION_VERSION}; run tokrate calibrate again"
        )
    try:
        return from_json(Calibration, data, str(path))
    except RunFolderError as err:
        raise UsageError(f"{err} (not a tokrate calibration)") from None
