"""The reference of a nightly check (``tokrate run --baseline latest-good``): the recent
good nights of the run's benchmark, not one night.

One unusually fast night must not become the yardstick every later night is measured
against (it would flag them all), and one slow night must not hide a regression. So a
night is judged against the *median* of its benchmark's newest
:data:`REFERENCE_NIGHTS` good nights (a rate against their pooled requests), per
(endpoint, model, scenario) group:

- **the benchmark's nights**: the complete runs of the same fingerprint that started
  before it (:func:`tokrate.analysis.noise.benchmark_nights`); runs of other
  benchmarks in the folder are never a reference;
- **since the last acceptance**: when the user accepted a night's level as the new
  normal (``tokrate accept RUN``: accepted.json), only that night and later ones, and
  the nights up to the moment of acceptance count as good whatever their checks said;
- **good**: not a night whose own check flagged the group (its first measurement
  regressed, whether or not the re-measurement confirmed it), unless an acceptance
  covers it. So a regression that lasts stays flagged night after night until it is
  accepted, never absorbed into the reference silently;
- **healthy**: its client was fit to measure that scenario
  (:func:`tokrate.analysis.health.unhealthy_scenario`). When no good night is healthy
  (a machine that always lags far past the threshold), the newest good night stands
  in, and the comparison says so.

A group with no good night at all has no reference (the benchmark's first night).
Which nights feed the *noise fit* is decided elsewhere and never by verdicts
(tokrate.analysis.noise); only the reference leaves flagged nights out. Pure: works on
the entries :func:`tokrate.analysis.points.read_points` returns.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Final

from tokrate.analysis.health import unhealthy_scenario
from tokrate.analysis.points import RunEntry

__all__ = ["REFERENCE_NIGHTS", "GroupReference", "Reference", "select_reference"]

#: A reference is the median of at most this many good nights per group.
REFERENCE_NIGHTS: Final = 10

Group = tuple[str, str, str]


@dataclass(frozen=True, slots=True)
class GroupReference:
    """One group's reference: its ``nights`` (oldest first) and, when they are no
    healthy nights, why (``note``)."""

    nights: tuple[RunEntry, ...]
    note: str | None = None


@dataclass(frozen=True, slots=True)
class Reference:
    """Per group, the nights a run is judged against (module doc); ``accepted``: the
    acceptance the window starts at; ``flagged_since``: the oldest night newer than the
    reference that stayed out because its check flagged a group (a change that lasts,
    not yet accepted), if any."""

    groups: Mapping[Group, GroupReference]
    accepted: RunEntry | None = None
    flagged_since: RunEntry | None = None

    @property
    def nights(self) -> tuple[RunEntry, ...]:
        """Every night some group's reference uses, oldest first."""
        seen = {e.key: e for g in self.groups.values() for e in g.nights}
        return tuple(sorted(seen.values(), key=lambda e: (e.started, e.key)))

    @property
    def newest(self) -> RunEntry:
        return self.nights[-1]


def _covered(e: RunEntry, accepted: RunEntry | None) -> bool:
    """Whether an acceptance covers ``e``: it started at or after the accepted night
    and before the moment of acceptance."""
    if accepted is None or accepted.accepted_at is None:
        return False
    return accepted.started <= e.started <= accepted.accepted_at


def select_reference(
    nights: Sequence[RunEntry],
    started: datetime | None,
    groups: Iterable[Group],
    flagged: Callable[[RunEntry], frozenset[Group]] | None = None,
) -> Reference | None:
    """The reference (module doc) of a run that ``started`` then, for ``groups``, among
    ``nights``: its benchmark's earlier nights, oldest first. ``flagged`` says which
    groups a night's check flagged (default: what its comparison.json recorded;
    ``tokrate history`` passes its own verdicts for nights never checked). None when no
    group has a good night."""
    flags = flagged or (lambda e: e.flagged)
    accepted = next(
        (
            e
            for e in reversed(nights)
            if e.accepted_at is not None and (started is None or e.accepted_at < started)
        ),
        None,
    )
    window = [e for e in nights if accepted is None or e.started >= accepted.started]
    chosen: dict[Group, GroupReference] = {}
    since: RunEntry | None = None
    for group in groups:
        good = [e for e in window if group not in flags(e) or _covered(e, accepted)]
        if not good:
            continue
        healthy = [e for e in good if unhealthy_scenario(e.info, group[2]) is None]
        if healthy:
            chosen[group] = GroupReference(tuple(healthy[-REFERENCE_NIGHTS:]))
        else:
            last = good[-1]
            why = unhealthy_scenario(last.info, group[2])
            note = (
                f"no good night measured {group[2]} with a healthy client; judged against"
                f" {last.info.name} alone, though {why}"
            )
            chosen[group] = GroupReference((last,), note)
        newest = chosen[group].nights[-1]
        good_keys = {e.key for e in good}
        later = [e for e in window if e.started > newest.started and e.key not in good_keys]
        if later and (since is None or later[0].started < since.started):
            since = later[0]
    if not chosen:
        return None
    return Reference(chosen, accepted, since)
