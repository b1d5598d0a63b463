"""The built-in simulated OpenAI-compatible endpoint (``tokrate sim``).

Imports from tokrate only physics, hardware, tomlfile, fileio and errors (an
import-linter contract): it must not measure itself with the code it is measured by.
"""

from __future__ import annotations

from tokrate.sim.faults import FAULT_KINDS, parse_faults
from tokrate.sim.model import Tier, TierTiming, default_tiers
from tokrate.sim.server import (
    SimConfig,
    build_state,
    configured_tiers,
    running_simulator,
    serve,
    simulator_process,
    spawn_simulator,
)

__all__ = [
    "FAULT_KINDS",
    "SimConfig",
    "Tier",
    "TierTiming",
    "build_state",
    "configured_tiers",
    "default_tiers",
    "parse_faults",
    "running_simulator",
    "serve",
    "simulator_process",
    "spawn_simulator",
]
