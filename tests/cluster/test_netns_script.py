"""``.ci/netns-cluster`` without the cluster: what it says where it cannot work.

(The cluster itself is exercised by test_multinode.py; these never touch it.)
"""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest
from helpers.netns_cluster import SCRIPT

pytestmark = pytest.mark.cluster


@pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("setpriv") is None,
    reason="needs root and setpriv to drop to an unprivileged user",
)
def test_without_root_the_check_says_why_in_one_line() -> None:
    """The line the multi-node tests skip with (or fail with, under CI=true).

    The script goes to the unprivileged shell on its stdin, read here as root: a
    checkout in a private directory (``mktemp -d`` makes it 0700) is closed to uid
    65534, and what is checked is the script's answer, not the checkout's modes.
    """
    argv = ["setpriv", "--reuid", "65534", "--regid", "65534", "--clear-groups"]
    done = subprocess.run(
        [*argv, "bash", "-s", "check"],
        input=SCRIPT.read_text(),
        capture_output=True,
        text=True,
        timeout=30,
        cwd="/",
    )
    assert done.returncode == 1
    assert done.stderr == "network namespaces need root (running as uid 65534)\n"


def test_an_unknown_node_or_command_is_a_usage_error() -> None:
    done = subprocess.run(
        ["bash", str(SCRIPT), "node-up", "n3"], capture_output=True, text=True, timeout=30
    )
    assert done.returncode == 2
    assert done.stderr == "netns-cluster: unknown worker node 'n3' (n1 or n2)\n"
    usage = subprocess.run(["bash", str(SCRIPT)], capture_output=True, text=True, timeout=30)
    assert usage.returncode == 2 and ".ci/netns-cluster up" in usage.stderr
