"""Each checked request's answer judged, after the load, in the analysis process.

:func:`apply_checks` fills the records' ``check_passed`` / ``check_score`` /
``check_error`` from the run folder's checks.json (:mod:`tokrate.runfolder.checks_file`)
and each record's kept ``answer`` and ``tool_calls``: ok requests whose prompt (or
session turn) has an ``expect``. A check that raises is the check's error (``check_error``), never the
model's; an errored or cancelled request has no answer and is not checked (its failure
is already in the error counts). The measuring process never runs a check.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import orjson

from tokrate.errors import PromptError
from tokrate.runfolder.checks_file import CheckEntry, read_checks
from tokrate.runfolder.loaded_run import LoadedRun
from tokrate.runfolder.records import ANSWER_CUT, MAX_ANSWER_CHARS, MAX_TOOL_CALLS, TOOL_CALLS_CUT
from tokrate.spec.expect import EXPECT_KINDS, Expect, Outcome, judge, parse_expect

if TYPE_CHECKING:
    import polars as pl

__all__ = [
    "JUDGED_NOW_NOTE",
    "apply_checks",
    "judge_answers",
    "unloadable_note",
    "with_verdicts",
]

#: The note a run judged by :func:`with_verdicts` carries (report/compare warn it).
JUDGED_NOW_NOTE = (
    "the run stopped before its finishing step, so its records held answers but no "
    "verdicts: they were checked now from checks.json"
)

_KEYS = ("prompt_id", "turn", "status", "answer", "tool_calls", "extra")
#: Check kinds that read the answer's text, and those that read its tool calls.
_READS_TEXT: Final = frozenset(EXPECT_KINDS) - {"tool_call", "no_tool_call"}
_READS_CALLS: Final = frozenset({"tool_call", "check"})

_Loaded = dict[tuple[str, int | None], tuple[CheckEntry, Expect | str]]


def _load(entries: tuple[CheckEntry, ...]) -> _Loaded:
    """Each entry's check, or the one line saying why it does not load now."""
    checks: _Loaded = {}
    for e in entries:
        try:
            checks[e.key] = (e, parse_expect(e.expect, e.source))
        except PromptError as err:
            checks[e.key] = (e, str(err))
    return checks


def unloadable_note(entries: tuple[CheckEntry, ...]) -> str | None:
    """Where some check of ``entries`` does not load now (a user check's module not
    importable when ``tokrate report`` judges a killed run): why, for how many prompts,
    and what to do; None when every check loads."""
    why: dict[str, int] = {}
    for e, x in _load(entries).values():
        if isinstance(x, str):
            # One line per distinct failure, not per prompt: drop "FILE line N: ".
            reason = x.removeprefix(f"{e.source}: ")
            why[reason] = why.get(reason, 0) + 1
    if not why:
        return None
    (first, count), *rest = sorted(why.items(), key=lambda kv: (-kv[1], kv[0]))
    more = f" ({count} prompts; and {len(rest)} more checks)" if rest else ""
    return (
        f"the checks of {sum(why.values())} prompts did not load now, so their answers "
        f"count as check errors, not as right or wrong: {first}{more}. Make "
        "the check's module importable (PYTHONPATH or the working directory) and run "
        "tokrate report again"
    )


def _calls(value: object) -> list[dict[str, Any]]:
    """A record's ``tool_calls`` (records.parquet's JSON text, or the list itself)."""
    if isinstance(value, str):
        value = orjson.loads(value)
    return [c for c in value if isinstance(c, dict)] if isinstance(value, list | tuple) else []


def _extra(value: object) -> dict[str, Any]:
    """A record's ``extra`` (records.parquet's JSON text, or the mapping itself)."""
    if isinstance(value, str):
        value = orjson.loads(value)
    return value if isinstance(value, dict) else {}


def _cut_off(expect: Expect, extra: dict[str, Any]) -> str | None:
    """Why the record does not hold what ``expect`` reads (the answer's text or calls
    were longer than a record keeps), or None: a cut-off JSON answer would fail its
    schema for the record's bound, not the model's answer."""
    chars = extra.get(ANSWER_CUT)
    if expect.kind in _READS_TEXT and chars is not None:
        size = f"{chars:,}" if isinstance(chars, int) else str(chars)
        return (
            f"the answer ({size} characters) is longer than the {MAX_ANSWER_CHARS:,}"
            " a record keeps, so it was not judged"
        )
    if expect.kind in _READS_CALLS and extra.get(TOOL_CALLS_CUT):
        return (
            f"the answer's tool calls are longer than a record keeps ({MAX_TOOL_CALLS}"
            f" calls, {MAX_ANSWER_CHARS:,} characters of arguments each), so they were"
            " not judged"
        )
    return None


def judge_answers(
    rows: list[dict[str, Any]], entries: tuple[CheckEntry, ...]
) -> list[Outcome | None]:
    """One outcome per row (None: not checked) of rows with prompt_id, turn, status,
    answer and (optionally) tool_calls and extra. A check that no longer loads (a user
    module gone since the run) is every such row's check error; so is an answer whose
    record kept less than the check reads (:func:`_cut_off`)."""
    checks = _load(entries)
    out: list[Outcome | None] = []
    for row in rows:
        found = checks.get((row["prompt_id"], row["turn"]))
        if found is None or row["status"] != "ok" or row["answer"] is None:
            out.append(None)
            continue
        entry, expect = found
        cut = None if isinstance(expect, str) else _cut_off(expect, _extra(row.get("extra")))
        if isinstance(expect, str):
            out.append(Outcome(None, None, expect))
        elif cut is not None:
            out.append(Outcome(None, None, cut))
        else:
            out.append(judge(expect, row["answer"], entry.prompt, _calls(row.get("tool_calls"))))
    return out


def apply_checks(frame: pl.DataFrame, run_dir: Path) -> pl.DataFrame:
    """``frame`` with its check columns filled (unchanged when the run has no checks)."""
    import polars as pl

    entries = read_checks(run_dir)
    if not entries or frame.is_empty():
        return frame
    outcomes = judge_answers(frame.select(_KEYS).to_dicts(), entries)
    return frame.with_columns(
        pl.Series("check_passed", [o and o.passed for o in outcomes], dtype=pl.Boolean),
        pl.Series("check_score", [o and o.score for o in outcomes], dtype=pl.Float64),
        pl.Series("check_error", [o and o.error for o in outcomes], dtype=pl.String),
    )


def with_verdicts(run: LoadedRun) -> LoadedRun:
    """``run`` with its answers judged when it stopped before its finishing step (a
    killed run: records.jsonl has the answers, never the verdicts) and has checks.json;
    saying so in its notes, and naming any check that does not load now (its answers
    are then check errors: :func:`unloadable_note`). Any other run comes back as it is (its records.parquet
    already holds the verdicts, or nothing was checked)."""
    import polars as pl

    frame = run.records
    if frame.is_empty() or "answer" not in frame.columns:
        return run
    judged = frame.select(
        pl.col("check_passed").is_not_null().any() | pl.col("check_error").is_not_null().any()
    ).item()
    if judged or not frame.select(pl.col("answer").is_not_null().any()).item():
        return run
    entries = read_checks(run.path)
    if not entries:
        return run
    notes = (*run.notes, JUDGED_NOW_NOTE)
    unloadable = unloadable_note(entries)
    if unloadable is not None:
        notes = (*notes, unloadable)
    return dataclasses.replace(run, records=apply_checks(frame, run.path), notes=notes)
