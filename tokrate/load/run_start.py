"""What run.json says when a run starts: the machine, the libraries, the config, the
targets and scenarios (status, counts and loop lag follow at the end)."""

from __future__ import annotations

import contextlib
import dataclasses
import platform
import socket
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Final

from tokrate.inputs.targets import Target
from tokrate.load.plan import Plan, ScenarioPlan
from tokrate.runfolder.run_info import RunInfo, ScenarioInfo, SloInfo
from tokrate.spec.config_file import spec_to_dict
from tokrate.spec.types import RunSpec

if TYPE_CHECKING:
    from tokrate.load.backends import Backend

__all__ = ["start_info"]

#: Libraries whose versions run.json records.
_LIBRARIES: Final = (
    "anyio",
    "httpx",
    "httptools",
    "matplotlib",
    "openai",
    "orjson",
    "polars",
    "rich",
    "uvloop",
)


def _libraries() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for name in _LIBRARIES:
        with contextlib.suppress(PackageNotFoundError):
            out[name] = version(name)
    return out


def _version() -> str:
    from tokrate._version import __version__

    return __version__


def _scenario_info(s: ScenarioPlan, spec: RunSpec) -> ScenarioInfo:
    return ScenarioInfo(
        name=s.name,
        concurrency=s.concurrency,
        rate_rps=s.rate_rps,
        arrival=s.arrival if s.rate_rps is not None else spec.load.arrival,
    )


def start_info(
    run_id: str, spec: RunSpec, targets: Sequence[Target], plan: Plan, backend: Backend
) -> RunInfo:
    """What run.json says at the start (status, counts and lag follow at the end)."""
    return RunInfo(
        run_id=run_id,
        label=spec.output.label,
        tokrate_version=_version(),
        python=sys.version.split()[0],
        platform=platform.platform(),
        host=socket.gethostname(),
        libraries=_libraries(),
        config=spec_to_dict(spec),
        targets=tuple(t.info(spec.client.api, spec.client.unique_prompts) for t in targets),
        scenarios=tuple(_scenario_info(s, spec) for s in plan.scenarios),
        slo=SloInfo(**dataclasses.asdict(spec.slo)),
        hardware=spec.simulator.hardware if spec.uses_simulator else spec.output.hardware,
        backend=backend.kind,
        workers=backend.workers,
        nodes=backend.nodes,
        preconnect=spec.client.preconnect,
    )
