"""One multi-node cluster for every test in this folder (helpers.netns_cluster).

Three Ray nodes take about 20 s to start on 2 cores, so they are started once per
session and taken down at its end (and before starting, in case a killed run left
them behind). A machine that cannot make network namespaces skips these tests with
the reason; under ``CI=true`` that is a failure, since CI runs as root.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from helpers.netns_cluster import NetnsCluster, cannot_make_namespaces


def _unavailable(reason: str) -> None:
    if os.environ.get("CI") == "true":
        pytest.fail(f"{reason} (CI=true: CI runs the suite as root with iproute2 installed)")
    pytest.skip(reason)


@pytest.fixture(scope="session")
def cluster() -> Iterator[NetnsCluster]:
    try:
        import ray  # noqa: F401
    except ImportError:
        _unavailable("the multi-node tests need Ray: pip install -e '.[dev,ray]'")
    problem = cannot_make_namespaces()
    if problem is not None:
        _unavailable(f"the multi-node cluster needs network namespaces: {problem}")
    nodes = NetnsCluster()
    try:
        nodes.up()
        yield nodes
    finally:
        nodes.down()


@pytest.fixture(autouse=True)
def _whole_cluster(request: pytest.FixtureRequest) -> None:
    """A test that takes a node away leaves it for the next test to restore: free in
    the usual order, where the node-loss test comes last."""
    if "cluster" not in request.fixturenames:
        return
    nodes: NetnsCluster = request.getfixturevalue("cluster")
    for node in sorted(nodes.lost):
        nodes.restore(node)
