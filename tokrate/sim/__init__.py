"""The built-in simulated OpenAI-compatible endpoint (``tokrate sim``).

Imports nothing from client/, engine.py or plan.py (only hardware.py and errors.py).
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
