"""routing.json: the routing table of a run (docs/quality.md), as frozen types with one
reader.

:func:`tokrate.analysis.routing.routing_file` makes a :class:`RoutingFile` from the tier
decision (the judging lives there); its fields are the file's keys in order, written
and read by :mod:`tokrate.runfolder.jsondoc`. ``routes`` maps each checked task to the
model picked at the heaviest load level measured (null: ``unrouted`` says why),
``levels`` holds every level's evidence: each task's candidates with their pass-rate
and SLO judgements and what they missed.

Layout history (bump ROUTING_LAYOUT and add a line): 1: first version; 2: the routes
are the tier decision's (layout 1 had a rule of its own, without a minimum number of
answers); 3: candidates carry ``cost`` (per 1,000 of the task's requests, with its
interval and rule) instead of ``usd_per_m_output``, ``size_source``, ``goodput_rps``
and ``decode_tps_p50``, the rule may be "goodput", and ``smallest`` is null unless
every size is known.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from tokrate.errors import RunFolderError
from tokrate.runfolder.files import read_json
from tokrate.runfolder.jsondoc import FLATTEN, OMIT_IF_NONE, from_json
from tokrate.runfolder.quality import Quality
from tokrate.runfolder.summary import Cost

__all__ = [
    "ROUTING_FILE",
    "ROUTING_LAYOUT",
    "CandidateEvidence",
    "LevelEvidence",
    "ModelRef",
    "PassBar",
    "RouteEvidence",
    "RoutingFile",
    "Unrouted",
    "BarJudgement",
    "read_routing",
]

#: The routing table's file in a run folder.
ROUTING_FILE: Final = "routing.json"
ROUTING_LAYOUT: Final = 3


@dataclass(frozen=True, slots=True)
class ModelRef:
    """A model a route names."""

    endpoint: str
    model: str


@dataclass(frozen=True, slots=True)
class BarJudgement:
    """One bar applied to one candidate: ``met`` of ``n`` met it, against ``target``
    (``needed``: the fewest on which it can be decided), its interval, whether the
    requests of all tasks were pooled, and why it stayed undecided (None: it did not)."""

    verdict: str
    met: int
    n: int
    target: float
    needed: int
    interval: tuple[float, float] | None
    pooled: bool
    reason: str | None = None


@dataclass(frozen=True, slots=True)
class CandidateEvidence:
    """One model on one task at one level, as the tier decision judged it; its task's
    ``quality`` keys are the candidate's own."""

    endpoint: str
    model: str
    size_b: float | None
    size_source: str | None
    cost: Cost | None
    goodput_rps: float | None
    decode_tps_p50: float | None
    verdict: str
    quality: Quality = field(metadata=FLATTEN)
    confident: bool = False
    pass_rate: BarJudgement | None = None
    slo: BarJudgement | None = None
    misses: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class RouteEvidence:
    """One task at one level: the pick (None: ``why`` and ``reason`` say why) and every
    candidate's evidence."""

    task: str
    bar: float
    answers_needed: int
    route: ModelRef | None
    rule: str
    why: str | None
    reason: str | None
    smallest: ModelRef | None
    cheapest: ModelRef | None
    latency_pooled: bool
    candidates: tuple[CandidateEvidence, ...]


@dataclass(frozen=True, slots=True)
class LevelEvidence:
    level: str
    load: float | None
    tasks: tuple[RouteEvidence, ...]


@dataclass(frozen=True, slots=True)
class Unrouted:
    """Why a task has no route at the level judged (``answers``: the fewest checked
    answers a model had, and ``answers_needed``, for too few answers only)."""

    why: str
    reason: str
    answers: int | None = field(default=None, metadata=OMIT_IF_NONE)
    answers_needed: int | None = field(default=None, metadata=OMIT_IF_NONE)


@dataclass(frozen=True, slots=True)
class PassBar:
    """The pass-rate bar: the run-wide one, per task, and where it came from."""

    default: float
    by_task: tuple[tuple[str, float], ...]
    source: str


@dataclass(frozen=True, slots=True)
class RoutingFile:
    """routing.json (module docstring)."""

    layout: int
    run_id: str | None
    bar: PassBar
    slo_attainment: float
    slo_set: bool
    level: str | None
    routes: tuple[tuple[str, ModelRef | None], ...]
    unrouted: tuple[tuple[str, Unrouted], ...]
    levels: tuple[LevelEvidence, ...]


def read_routing(run_dir: Path) -> RoutingFile | None:
    """routing.json, or None when the run has none (or it is unreadable, of another
    layout, or refused by the guard: tokrate.runfolder.files): the run's numbers stand
    without it."""
    path = run_dir / ROUTING_FILE
    try:
        data = read_json(path)
        if not isinstance(data, dict) or data.get("layout") != ROUTING_LAYOUT:
            return None
        return from_json(RoutingFile, data, str(path))
    except RunFolderError:
        return None
