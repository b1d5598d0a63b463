"""The report's answers view: what the models answered, beside the verdicts.

A pass rate says how often a model was right; the answers say how it was wrong. For
each run, one table of the measured requests that kept an answer (a prompt with an
``expect`` check: its text, redacted, at most 8,192 characters) or called a tool (every
request keeps its tool calls: name and arguments), per target and task the failed
ones first (wrong, then check errors), then passed and unchecked ones, at most
:data:`ANSWERS_PER_TASK` rows each; the note says how many were left out. Columns:
target, task, prompt (with "(×N)" where the same prompt got the same answer N times),
verdict, the answer's text and its tool calls (``name(arguments)``, cut at
:data:`CELL_CHARS`), and when its first tool-call delta arrived. Targets by size.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Final

import orjson
import polars as pl

from tokrate.analysis.metrics import analysed
from tokrate.analysis.ordering import model_key
from tokrate.report.model import LeftOut, ReportInputs
from tokrate.report.tables import Table
from tokrate.textfmt import DASH, fmt_ms

__all__ = ["ANSWERS_PER_TASK", "CELL_CHARS", "answer_tables"]

#: Rows shown per target x task (failures first).
ANSWERS_PER_TASK: Final = 6
#: Characters of an answer or of the tool calls shown in one cell.
CELL_CHARS: Final = 240
_HEADER: Final = ("target", "task", "prompt", "verdict", "answer", "tool calls", "first call")
_COLUMNS: Final = (
    "endpoint",
    "model",
    "task",
    "prompt_id",
    "turn",
    "request_index",
    "answer",
    "tool_calls",
    "first_tool_call_s",
    "check_passed",
    "check_error",
)


def _cut(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= CELL_CHARS else text[: CELL_CHARS - 1] + "…"


def _calls(value: object) -> str:
    if not isinstance(value, str) or not value:
        return DASH
    calls = orjson.loads(value)
    shown = [f"{c.get('name', '')}({c.get('arguments', '')})" for c in calls if isinstance(c, dict)]
    return _cut("; ".join(shown)) if shown else DASH


def _verdict(row: dict[str, Any]) -> tuple[int, str]:
    """(sort rank, words): wrong answers first, then the check's own errors."""
    if row["check_error"] is not None:
        return 1, "check error: " + _cut(str(row["check_error"]))
    if row["check_passed"] is False:
        return 0, "wrong"
    if row["check_passed"] is True:
        return 2, "passed"
    return 3, "not checked"


def _rows(frame: pl.DataFrame, sizes: dict[str, float | None]) -> tuple[list[tuple[str, ...]], int]:
    """The rows shown (the same answer to the same prompt once, with how often it was
    given), and how many answers were left out."""
    kept = frame.filter(pl.col("answer").is_not_null() | pl.col("tool_calls").is_not_null())
    kept = kept.select(_COLUMNS).sort("request_index")
    # (endpoint, model, task) -> (prompt, verdict, answer, calls) -> [rank, count, first call]
    groups: dict[tuple[str, str, str], dict[tuple[str, ...], list[Any]]] = {}
    for row in kept.to_dicts():
        rank, verdict = _verdict(row)
        prompt = row["prompt_id"] + (f" (turn {row['turn']})" if row["turn"] else "")
        answer = row["answer"]
        said = (prompt, verdict, _cut(answer) if answer else DASH, _calls(row["tool_calls"]))
        seen = groups.setdefault((row["endpoint"], row["model"], row["task"]), {})
        if said in seen:
            seen[said][1] += 1
        else:
            seen[said] = [rank, 1, fmt_ms(row["first_tool_call_s"])]
    rows: list[tuple[str, ...]] = []
    left = 0
    order = sorted(groups, key=lambda g: (model_key(g[1], sizes.get(g[1])), g[0], g[2]))
    for endpoint, model, task in order:
        members = sorted(groups[(endpoint, model, task)].items(), key=lambda m: m[1][0])
        for (prompt, verdict, answer, calls), (_rank, count, first) in members[:ANSWERS_PER_TASK]:
            times = f" (×{count})" if count > 1 else ""
            rows.append(
                (f"{endpoint}/{model}", task, prompt + times, verdict, answer, calls, first)
            )
        left += sum(c for _said, (_r, c, _f) in members[ANSWERS_PER_TASK:])
    return rows, left


def answer_tables(inputs: ReportInputs) -> Iterator[Table | LeftOut]:
    """One answers table per run that kept answers or tool calls (module doc)."""
    for key, run in inputs.runs:
        records = run.records
        if records.is_empty() or "tool_calls" not in records.columns:
            continue
        sizes = {t.model: t.active_params_b for t in run.info.targets}
        rows, left = _rows(analysed(records), sizes)
        if not rows:
            continue
        more = f" {left} more are in records.parquet (answer, tool_calls)." if left else ""
        yield Table(
            f"Answers: {key}" if inputs.multi else "Answers",
            _HEADER,
            tuple(rows),
            f"Measured requests that kept an answer (prompts with a check) or called a "
            f"tool; per target and task the wrong ones first, at most {ANSWERS_PER_TASK}."
            f"{more} docs/quality.md.",
            (False, False, False, False, False, False, True),
            (False, False, False, True, True, True, False),
        )
