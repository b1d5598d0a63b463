"""tokrate: client-side LLM speed benchmarks.

The public API is re-exported here as one sorted ``__all__`` (a test checks it). The
heavier entry points (report, compare, history, simulator) load on first use, so
``import tokrate`` and worker processes stay cheap.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from tokrate._version import __version__
from tokrate.errors import (
    ConfigError,
    EndpointUnreachable,
    FinishError,
    ModelNotServed,
    OutputError,
    PromptError,
    RunFolderError,
    SimulatorError,
    TokrateError,
    UsageError,
)
from tokrate.hardware import HARDWARE_PROFILES, HardwareProfile, get_hardware
from tokrate.load.finish import RunResult
from tokrate.load.run import run_benchmark
from tokrate.load.worker.stopping import Stop
from tokrate.runfolder.records import RECORD_SCHEMA_VERSION, RequestRecord
from tokrate.runfolder.run_info import RunInfo
from tokrate.runfolder.summary import Group, Summary
from tokrate.spec.config_file import load_spec
from tokrate.spec.thresholds import DEFAULT_THRESHOLDS, Threshold, ThresholdSet, parse_threshold
from tokrate.spec.types import (
    CapacitySpec,
    ClientSpec,
    CompareSpec,
    DistributedSpec,
    EndpointSpec,
    GridSpec,
    LoadSpec,
    ModelSpec,
    OutputSpec,
    PromptsSpec,
    RetrySpec,
    RunSpec,
    SessionsSpec,
    SharedPrefixSpec,
    SimulatorSpec,
    SloSpec,
    SyntheticSpec,
    TimeoutsSpec,
)

if TYPE_CHECKING:
    from tokrate.analysis.compare import compare_runs
    from tokrate.analysis.history import History, load_history
    from tokrate.analysis.metrics import summarize
    from tokrate.analysis.noise import fit_thresholds
    from tokrate.finish.baseline import check_baseline
    from tokrate.inputs.prompts import load_prompts
    from tokrate.load.plan import build_plan
    from tokrate.report.build import build_report
    from tokrate.report.history_pages import build_history
    from tokrate.runfolder.comparison import Comparison
    from tokrate.runfolder.loaded_run import LoadedRun, load_run
    from tokrate.sim.server import SimConfig, running_simulator, simulator_process

#: name -> module of the entry points imported on first attribute access.
_LAZY: dict[str, str] = {
    "Comparison": "tokrate.runfolder.comparison",
    "History": "tokrate.analysis.history",
    "LoadedRun": "tokrate.runfolder.loaded_run",
    "SimConfig": "tokrate.sim.server",
    "build_history": "tokrate.report.history_pages",
    "build_plan": "tokrate.load.plan",
    "build_report": "tokrate.report.build",
    "check_baseline": "tokrate.finish.baseline",
    "compare_runs": "tokrate.analysis.compare",
    "fit_thresholds": "tokrate.analysis.noise",
    "load_history": "tokrate.analysis.history",
    "load_prompts": "tokrate.inputs.prompts",
    "load_run": "tokrate.runfolder.loaded_run",
    "running_simulator": "tokrate.sim.server",
    "simulator_process": "tokrate.sim.server",
    "summarize": "tokrate.analysis.metrics",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'tokrate' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


__all__ = [
    "CapacitySpec",
    "ClientSpec",
    "CompareSpec",
    "Comparison",
    "ConfigError",
    "DEFAULT_THRESHOLDS",
    "DistributedSpec",
    "EndpointSpec",
    "EndpointUnreachable",
    "FinishError",
    "GridSpec",
    "Group",
    "HARDWARE_PROFILES",
    "HardwareProfile",
    "History",
    "LoadSpec",
    "LoadedRun",
    "ModelNotServed",
    "ModelSpec",
    "OutputError",
    "OutputSpec",
    "PromptError",
    "PromptsSpec",
    "RECORD_SCHEMA_VERSION",
    "RequestRecord",
    "RetrySpec",
    "RunFolderError",
    "RunInfo",
    "RunResult",
    "RunSpec",
    "SessionsSpec",
    "SharedPrefixSpec",
    "SimConfig",
    "SimulatorError",
    "SimulatorSpec",
    "SloSpec",
    "Stop",
    "Summary",
    "SyntheticSpec",
    "Threshold",
    "ThresholdSet",
    "TimeoutsSpec",
    "TokrateError",
    "UsageError",
    "__version__",
    "build_history",
    "build_plan",
    "build_report",
    "check_baseline",
    "compare_runs",
    "fit_thresholds",
    "get_hardware",
    "load_history",
    "load_prompts",
    "load_run",
    "load_spec",
    "parse_threshold",
    "run_benchmark",
    "running_simulator",
    "simulator_process",
    "summarize",
]
