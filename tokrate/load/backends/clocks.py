"""Each node's wall clock against the driver's: measured once per node, used to put
every record's ``started_at`` on one clock, and judged against the timeline.

Latencies never need this: every latency is a difference of two readings of one
worker's monotonic clock. Wall clocks matter for what lines records of several nodes up
on one axis: the report's timeline, the aggregate-throughput window (first send to
last end), and the server-metrics samples the driver scrapes. So when a worker first
starts on a node, the driver asks it for its wall clock a few times (the NTP way: the
node's reading against the midpoint of the driver's send and receive readings) and
keeps the round trip with the shortest delay: the node's offset is then known to
within half that delay.

Units: seconds; wall clocks are ``time.time()``.
"""

from __future__ import annotations

import socket
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Final

from tokrate.runfolder.run_info import NodeInfo
from tokrate.textfmt import fmt_ms

__all__ = [
    "CLOCK_ROUND_TRIPS",
    "ClockEstimate",
    "clock_warnings",
    "estimate_offset",
    "local_nodes",
    "measure_clock",
]

#: Round trips per node. The first pays for warming the call path; a handful more
#: nearly always contains one with no scheduling hiccup on either side.
CLOCK_ROUND_TRIPS: Final = 8


@dataclass(frozen=True, slots=True)
class ClockEstimate:
    """A node's wall clock minus the driver's (``offset_s``); the true offset lies
    within ``offset_s`` +/- ``uncertainty_s``, from the best of ``round_trips``."""

    offset_s: float
    uncertainty_s: float
    round_trips: int

    @property
    def significant(self) -> bool:
        """True when the offset is larger than its own error bound: the two clocks
        measurably disagree."""
        return abs(self.offset_s) > self.uncertainty_s

    @property
    def shift_s(self) -> float:
        """What to subtract from the node's wall-clock readings to put them on the
        driver's clock: the offset when it is significant, else 0.0 (shifting by an
        offset that may be zero would only add the measurement's noise)."""
        return self.offset_s if self.significant else 0.0


def estimate_offset(readings: Iterable[tuple[float, float, float]]) -> ClockEstimate:
    """``readings``: (driver before, node, driver after) wall-clock triples, one per
    round trip. The node read its clock somewhere inside [before, after] of the
    driver's, so ``node - (before + after) / 2`` is its offset within +/- half the
    round trip; the shortest round trip bounds it tightest.

    Raises ValueError when there is no reading or a round trip runs backwards (the
    driver's clock stepped meanwhile).
    """
    best: tuple[float, float] | None = None
    n = 0
    for before, node, after in readings:
        n += 1
        delay = after - before
        if delay < 0:
            raise ValueError(
                "a clock round trip ended before it began (the driver's clock stepped)"
            )
        if best is None or delay < best[0]:
            best = (delay, node - (before + after) / 2.0)
    if best is None:
        raise ValueError("no clock readings")
    delay, offset = best
    return ClockEstimate(offset_s=offset, uncertainty_s=delay / 2.0, round_trips=n)


def measure_clock(
    read_node_clock: Callable[[], float],
    driver_clock: Callable[[], float],
    round_trips: int = CLOCK_ROUND_TRIPS,
) -> ClockEstimate:
    """Ask a node for its wall clock ``round_trips`` times (``read_node_clock`` makes
    one blocking round trip) and estimate its offset (see :func:`estimate_offset`)."""
    readings = []
    for _ in range(round_trips):
        before = driver_clock()
        node = read_node_clock()
        after = driver_clock()
        readings.append((before, node, after))
    return estimate_offset(readings)


def local_nodes(worker_ids: Sequence[str]) -> tuple[NodeInfo, ...]:
    """This machine as the one node of a local run: the workers share the driver's
    kernel clock, so the offset is exactly zero (nothing measured, nothing shifted)."""
    host = socket.gethostname()
    return (
        NodeInfo(
            node_id=host,
            hostname=host,
            workers=tuple(worker_ids),
            clock_offset_s=0.0,
            clock_uncertainty_s=0.0,
            clock_round_trips=0,
            started_at_shift_s=0.0,
        ),
    )


def clock_warnings(nodes: Iterable[NodeInfo], resolution_s: float) -> list[str]:
    """One line per node whose clock the timeline cannot take as the driver's:
    its offset exceeds ``resolution_s`` (the timeline's bin width for this run), so
    drawn unshifted its records would land in the wrong bins; or the offset could not
    be measured that finely, so their wall-clock times are uncertain by more than a
    bin."""
    lines = []
    for node in nodes:
        offset, uncertainty = node.clock_offset_s, node.clock_uncertainty_s
        if offset is None or uncertainty is None:
            continue
        workers = ", ".join(node.workers) or "none"
        measured = f"+/-{fmt_ms(uncertainty)}, best of {node.clock_round_trips} round trips"
        if abs(offset) > resolution_s and node.started_at_shift_s:
            side = "ahead of" if offset > 0 else "behind"
            lines.append(
                f"node {node.label} (workers {workers}): its wall clock reads"
                f" {fmt_ms(abs(offset))} {side} the driver's ({measured}), more than the"
                f" timeline's {fmt_ms(resolution_s)} resolution; its records' started_at"
                " were moved onto the driver's clock by that offset, so timelines and the"
                " aggregate window line up. Fix the node's time sync (chrony, NTP)."
            )
        elif uncertainty > resolution_s:
            lines.append(
                f"node {node.label} (workers {workers}): its wall clock could be measured"
                f" against the driver's only to {measured}, coarser than the timeline's"
                f" {fmt_ms(resolution_s)} resolution; its records may sit that far off on"
                " the timeline. Run the driver closer to the cluster (on the head node)."
            )
    return lines
