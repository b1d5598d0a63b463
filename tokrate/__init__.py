"""tokrate: client-side LLM speed benchmarks.

The public API is re-exported here as one sorted ``__all__`` (a test checks it).
"""

from __future__ import annotations

__version__ = "0.1.0"

from tokrate.errors import (
    ConfigError,
    EndpointUnreachable,
    OutputError,
    PromptError,
    RunFolderError,
    SimulatorError,
    TokrateError,
    UsageError,
)
from tokrate.hardware import HARDWARE_PROFILES, HardwareProfile, get_hardware
from tokrate.records import RECORD_SCHEMA_VERSION, RequestRecord
from tokrate.run import RunResult, run_benchmark

__all__ = [
    "ConfigError",
    "EndpointUnreachable",
    "HARDWARE_PROFILES",
    "HardwareProfile",
    "OutputError",
    "PromptError",
    "RECORD_SCHEMA_VERSION",
    "RequestRecord",
    "RunFolderError",
    "RunResult",
    "SimulatorError",
    "TokrateError",
    "UsageError",
    "__version__",
    "get_hardware",
    "run_benchmark",
]
