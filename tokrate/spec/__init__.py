"""Frozen run specifications.

A :class:`RunSpec` is everything a benchmark run needs, resolved and validated: it is
built from a TOML file (:func:`load_spec`) with command-line overrides applied on top,
or directly in Python. Nothing below the CLI ever sees argv. Validation errors are
:class:`~tokrate.errors.ConfigError` with a one-line message naming the file and key.
The dataclasses live in :mod:`tokrate.spec.types`, loading in ``tokrate.spec._load``,
and what ``tokrate run``'s command line adds to a config in
:mod:`tokrate.spec.command_line`.
"""

from __future__ import annotations

from tokrate.spec._load import load_spec, prompts_base_dir, spec_to_dict
from tokrate.spec.command_line import EMBEDDED_DEFAULTS, SIM_ENDPOINT, RunFlags
from tokrate.spec.types import (
    RESERVED_BODY_KEYS,
    ApiKind,
    ArrivalKind,
    CapacitySpec,
    ClientKind,
    ClientSpec,
    CompareSpec,
    DistributedSpec,
    EndpointSpec,
    GridSpec,
    LengthDistribution,
    LoadMode,
    LoadSpec,
    ModelCheck,
    ModelSpec,
    OutputSpec,
    PromptFormat,
    PromptsSpec,
    RetrySpec,
    RunSpec,
    SessionsSpec,
    SharedPrefixSpec,
    SimulatorSpec,
    SloSpec,
    SyntheticSpec,
    TargetsMode,
    TextSplit,
    TimeoutsSpec,
)

__all__ = [
    "EMBEDDED_DEFAULTS",
    "RESERVED_BODY_KEYS",
    "SIM_ENDPOINT",
    "GridSpec",
    "PromptFormat",
    "SessionsSpec",
    "SharedPrefixSpec",
    "ApiKind",
    "ArrivalKind",
    "CapacitySpec",
    "ClientKind",
    "ClientSpec",
    "CompareSpec",
    "DistributedSpec",
    "EndpointSpec",
    "LengthDistribution",
    "LoadMode",
    "LoadSpec",
    "ModelCheck",
    "ModelSpec",
    "OutputSpec",
    "PromptsSpec",
    "RetrySpec",
    "RunFlags",
    "RunSpec",
    "SimulatorSpec",
    "SloSpec",
    "SyntheticSpec",
    "TargetsMode",
    "TextSplit",
    "TimeoutsSpec",
    "load_spec",
    "prompts_base_dir",
    "spec_to_dict",
]
