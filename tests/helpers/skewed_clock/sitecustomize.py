"""A node whose wall clock reads wrong, for the multi-node tests.

Network namespaces share the kernel's clock, so a Ray node in one cannot have a clock
of its own. The cluster fixture starts one node's Ray processes with this folder on
PYTHONPATH and TOKRATE_TEST_CLOCK_SKEW_S set: Python imports this module at start-up
in every process of that node (the raylet's workers included), and from then on
``time.time()`` reads that many seconds ahead. That is the reading tokrate takes of
the wall clock (a record's ``started_at``, the node's answer to the driver's clock
probe). Left alone: monotonic clocks (what latencies use, as NTP would leave them)
and ``time.time_ns()``, which the kernel-stamp bridge compares with the kernel's own
CLOCK_REALTIME stamps; on a node whose clock really is off, both read the same wrong
time and the bridge's offset cancels it, so skewing only one of them would fake a
mid-run clock step instead of a skewed node.
"""

import os
import time

_SKEW_S = float(os.environ.get("TOKRATE_TEST_CLOCK_SKEW_S") or 0.0)

if _SKEW_S:
    _wall = time.time

    def _skewed() -> float:
        return _wall() + _SKEW_S

    time.time = _skewed
