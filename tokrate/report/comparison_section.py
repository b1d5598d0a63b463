"""What a multi-run report opens with: did each later run change from the first?

``tokrate report A B`` answers "did B change from A?" before anything else: one
sentence per later run with compare's counts, then the rows that regressed, improved
or could not be decided (with compare's reason), and one table per later run, "What
changed", holding every (target, level, metric) row those sentences quote — the same
numbers, in the same words, as ``tokrate compare A B`` (every verdict was decided in
:mod:`tokrate.analysis.compare`; this module only words it).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Final

from tokrate.analysis.ordering import model_key, natural_key
from tokrate.report.model import ReportInputs
from tokrate.report.tables import Table
from tokrate.report.terminal.comparison_text import describe_change, format_value
from tokrate.runfolder.comparison import Comparison, MetricResult
from tokrate.textfmt import DASH

__all__ = ["changed_lines", "changed_tables"]

#: The order rows are told in: what needs attention first.
_ORDER: Final = {
    "regressed": 0,
    "improved": 1,
    "inconclusive": 2,
    "not_comparable": 3,
    "unchanged": 4,
}
#: How many rows of one verdict a sentence names before it points at the table.
_NAMED: Final = 6


def _ordered(c: Comparison) -> list[MetricResult]:
    """Rows by verdict (regressed first), then model as every table orders them,
    endpoint, level; a target's metrics keep compare's order."""
    return sorted(
        c.results,
        key=lambda r: (
            _ORDER.get(r.verdict, 5),
            model_key(r.model),
            natural_key(r.endpoint),
            natural_key(r.scenario),
        ),
    )


def _values(r: MetricResult) -> str:
    return f"{format_value(r.baseline, r.unit)} → {format_value(r.current, r.unit)}"


def _row_words(r: MetricResult) -> str:
    """ "sim-70b c=8 ttft_p95 27.5 ms → 36.0 ms (1.31x slower [1.20, 1.43])"."""
    return f"{r.label} {r.metric} {_values(r)} ({describe_change(r)})"


def _listed(rows: Sequence[MetricResult], words: str, table: str) -> str:
    named = "; ".join(_row_words(r) for r in rows[:_NAMED])
    more = len(rows) - _NAMED
    tail = f"; and {more} more in {table}" if more > 0 else ""
    return f"{words} ({len(rows)}): {named}{tail}."


def _why_listed(rows: Sequence[MetricResult], words: str, table: str) -> str:
    named = "; ".join(f"{r.label} {r.metric}: {r.reason}" for r in rows[:_NAMED])
    more = len(rows) - _NAMED
    tail = f"; and {more} more in {table}" if more > 0 else ""
    return f"{words} ({len(rows)}): {named}{tail}."


def _table_title(first: str, later: str) -> str:
    return f"What changed: {later} vs {first}"


def changed_lines(inputs: ReportInputs) -> Iterator[str]:
    """The opening sentences of a multi-run report (none for one run): per later
    run, whether anything changed from the first, then what, then what could not be
    decided and why."""
    first = inputs.runs[0][0]
    for later, _run in inputs.runs[1:]:
        c = inputs.comparisons[later]
        table = f'"{_table_title(first, later)}"'
        n = c.counts
        judged = len(c.results)
        if n["regressed"] or n["improved"]:
            answer = "yes"
        elif n["unchanged"] and not (n["inconclusive"] or n["not_comparable"]):
            answer = "no"
        elif n["unchanged"]:
            answer = "not that compare could see"
        else:
            answer = "undecided"
        yield (
            f"Did {later} change from {first}? {answer[0].upper()}{answer[1:]}: of {judged} "
            f"target, level and metric rows, {n['regressed']} regressed, {n['improved']} "
            f"improved, {n['unchanged']} unchanged, {n['inconclusive']} inconclusive and "
            f"{n['not_comparable']} not comparable (tokrate compare's verdicts, in {table})."
        )
        rows = _ordered(c)
        for verdict, words in (("regressed", "Regressed"), ("improved", "Improved")):
            picked = [r for r in rows if r.verdict == verdict]
            if picked:
                yield _listed(picked, words, table)
        for verdict, words in (
            ("inconclusive", "Inconclusive"),
            ("not_comparable", "Not comparable"),
        ):
            picked = [r for r in rows if r.verdict == verdict]
            if picked:
                yield _why_listed(picked, words, table)


def changed_tables(inputs: ReportInputs) -> Iterator[Table]:
    """Per later run, every row compare judged against the first run, what needs
    attention first: target and level, metric, both values, the change with its 95%
    interval, the verdict and, where it is not a plain verdict, why."""
    first = inputs.runs[0][0]
    header = ("target", "metric", first, "later run", "change [95% CI]", "verdict", "why")
    for later, _run in inputs.runs[1:]:
        c = inputs.comparisons[later]
        rows = tuple(
            (
                r.label,
                r.metric,
                format_value(r.baseline, r.unit),
                format_value(r.current, r.unit),
                describe_change(r) if r.verdict != "not_comparable" else DASH,
                r.verdict.replace("_", " "),
                r.reason if r.verdict in ("inconclusive", "not_comparable") else DASH,
            )
            for r in _ordered(c)
        )
        yield Table(
            _table_title(first, later),
            (*header[:3], later, *header[4:]),
            rows,
            note=(
                f"Each row: {later} against {first} with tokrate compare's statistics "
                "(the same verdicts as `tokrate compare`): the change as a ratio read ≥ 1 "
                "with the word that says which way, its block-bootstrap 95% interval, "
                "and the verdict — a change must pass its threshold and its interval "
                "must exclude no change. Regressed, improved and undecided rows first."
            ),
            numeric=(False, False, True, True, False, False, False),
            wrap=(False, False, False, False, False, False, True),
        )
