"""Node clock offsets: the NTP-style estimate, when a shift applies, the warnings, and
run.json's ``nodes`` (tokrate.load.backends.clocks, tokrate.runfolder.run_info)."""

from __future__ import annotations

import itertools

import pytest

from tokrate.load.backends.clocks import (
    ClockEstimate,
    clock_warnings,
    estimate_offset,
    local_nodes,
    measure_clock,
)
from tokrate.runfolder.jsondoc import to_json
from tokrate.runfolder.run_info import NodeInfo, RunInfo, run_info_from_json


def test_the_shortest_round_trip_bounds_the_offset() -> None:
    # Node 2.5 s ahead. Trip 1: slow (40 ms), the node answered late in it, so its
    # midpoint estimate is 15 ms off; trip 2: 2 ms, answered 0.5 ms after the midpoint.
    readings = [(100.000, 102.535, 100.040), (101.000, 103.5015, 101.002)]
    est = estimate_offset(readings)
    assert est.round_trips == 2
    assert est.offset_s == pytest.approx(2.5005)
    assert est.uncertainty_s == pytest.approx(0.001)
    assert abs(est.offset_s - 2.5) <= est.uncertainty_s  # the truth is inside the bound
    assert est.significant and est.shift_s == est.offset_s


def test_an_offset_inside_its_error_bound_shifts_nothing() -> None:
    """Same kernel clock (namespaces, one host): the estimate is noise around zero;
    shifting by it would only add that noise to every record."""
    est = ClockEstimate(offset_s=0.0004, uncertainty_s=0.0009, round_trips=8)
    assert not est.significant and est.shift_s == 0.0
    assert ClockEstimate(-0.003, 0.001, 8).shift_s == -0.003


def test_a_driver_clock_step_or_no_reading_is_an_error() -> None:
    with pytest.raises(ValueError, match="stepped"):
        estimate_offset([(10.0, 10.0, 9.0)])
    with pytest.raises(ValueError, match="no clock readings"):
        estimate_offset([])


def test_measure_clock_makes_the_round_trips_in_order() -> None:
    driver = itertools.count(start=1000.0, step=0.001)  # every reading 1 ms later
    calls: list[float] = []

    def node() -> float:
        t = next(driver) + 7.0  # the node reads between the driver's two readings
        calls.append(t)
        return t

    est = measure_clock(node, lambda: next(driver), round_trips=5)
    assert len(calls) == 5 and est.round_trips == 5
    assert est.offset_s == pytest.approx(7.0) and est.uncertainty_s == pytest.approx(0.001)


def _node(offset: float, uncertainty: float, shift: float | None = None) -> NodeInfo:
    return NodeInfo(
        node_id="5294660d2a4f7edb235cdc3aa8a51cfa",
        hostname="vm",
        address="10.231.0.12",
        workers=("w1",),
        clock_offset_s=offset,
        clock_uncertainty_s=uncertainty,
        clock_round_trips=8,
        started_at_shift_s=offset if shift is None else shift,
    )


def test_an_offset_beyond_the_timeline_resolution_is_warned_about() -> None:
    (line,) = clock_warnings([_node(2.5, 0.0006)], resolution_s=0.1)
    assert line.startswith("node 10.231.0.12 (5294660d2a4f) (workers w1): its wall clock reads")
    assert "2,500 ms ahead of the driver's (+/-0.600 ms, best of 8 round trips)" in line
    assert "more than the timeline's 100 ms resolution" in line
    assert "moved onto the driver's clock" in line and line.endswith("(chrony, NTP).")
    (behind,) = clock_warnings([_node(-0.3, 0.0006)], resolution_s=0.1)
    assert "300 ms behind the driver's" in behind


def test_offsets_within_the_resolution_and_local_nodes_are_quiet() -> None:
    assert clock_warnings([_node(0.02, 0.001)], resolution_s=0.05) == []
    assert clock_warnings([_node(0.0004, 0.0009, shift=0.0)], resolution_s=0.001) == []
    assert clock_warnings(local_nodes(("w0", "w1")), resolution_s=1e-9) == []
    unmeasured = NodeInfo(node_id="n")
    assert clock_warnings([unmeasured], resolution_s=0.01) == []


def test_an_offset_measured_too_coarsely_is_warned_about() -> None:
    """A driver far from the cluster: the round trip alone is wider than a bin."""
    (line,) = clock_warnings([_node(0.01, 0.2, shift=0.0)], resolution_s=0.1)
    assert "could be measured against the driver's only to +/-200 ms" in line
    assert "coarser than the timeline's 100 ms resolution" in line


def test_local_nodes_share_the_drivers_clock() -> None:
    (node,) = local_nodes(("w0", "w1"))
    assert node.node_id == node.hostname and node.address is None
    assert node.workers == ("w0", "w1")
    assert (node.clock_offset_s, node.clock_uncertainty_s, node.started_at_shift_s) == (0, 0, 0)
    assert node.clock_round_trips == 0 and node.label == node.hostname


def test_nodes_round_trip_through_run_json() -> None:
    info = RunInfo(run_id="r", nodes=(_node(2.5, 0.0006), *local_nodes(("w0",))))
    doc = to_json(info)
    assert doc["nodes"][0] == {
        "node_id": "5294660d2a4f7edb235cdc3aa8a51cfa",
        "hostname": "vm",
        "address": "10.231.0.12",
        "workers": ["w1"],
        "clock_offset_s": 2.5,
        "clock_uncertainty_s": 0.0006,
        "clock_round_trips": 8,
        "started_at_shift_s": 2.5,
    }
    assert run_info_from_json(doc) == info
    older = {k: v for k, v in doc.items() if k != "nodes"}
    assert run_info_from_json(older).nodes == ()  # runs before the key: no nodes
