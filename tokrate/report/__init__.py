"""The report: numbers to bytes (charts, report.html, summary.md, the terminal tables).

``build_report`` (:mod:`tokrate.report.build`) turns stored runs into report.html,
summary.md and charts/; :mod:`tokrate.report.terminal` and
:mod:`tokrate.report.comparison` draw the tables ``tokrate run`` and ``tokrate compare``
print. Importing this package loads nothing heavy: the process that measured a run
draws its tables from here without polars, numpy or matplotlib; ``build_report`` and
what it needs load on first use.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tokrate.report.build import DEFAULT_HARDWARE, FORMATS, build_report
    from tokrate.report.terminal import render_summary

__all__ = ["DEFAULT_HARDWARE", "FORMATS", "build_report", "render_summary"]

#: name -> module of what this package re-exports, imported on first attribute access.
_LAZY: dict[str, str] = {
    "DEFAULT_HARDWARE": "tokrate.report.build",
    "FORMATS": "tokrate.report.build",
    "build_report": "tokrate.report.build",
    "render_summary": "tokrate.report.terminal",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'tokrate.report' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
