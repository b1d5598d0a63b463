"""Load simulator tiers from TOML.

Layout (every key optional except each tier's ``name`` and ``params_b``)::

    include_defaults = false          # true: the built-in tiers plus these
    faults = "http_500=0.01"          # global fault SPEC (same grammar as --faults)

    [hardware]                        # custom accelerator instead of --hardware NAME
    name = "my-gpu"
    bandwidth_tb_s = 1.5              # TB/s (1e12 bytes/s) per GPU
    tflops = 200                      # dense 16-bit TFLOP/s per GPU
    memory_gb = 48                    # GB (1e9 bytes) per GPU

    [[tier]]
    name = "sim-3b-int4"
    params_b = 3.0                    # + any other field of tokrate.sim.model.Tier
    bytes_per_param = 0.5
    faults = "stall=0.1:seconds=1"    # this tier's fault rules (no TIER: prefix)
    accuracy = 0.8                    # P(right answer) to a checkable prompt
    task_accuracy = "classification=0.95,extraction=0.7"   # per task (docs/quality.md)

Errors are ConfigError naming the file and key.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from tokrate.errors import ConfigError, SimulatorError
from tokrate.hardware import HardwareProfile
from tokrate.sim.model import Tier, default_tiers
from tokrate.tomlfile import read_toml

__all__ = ["TiersFile", "load_tiers_file"]

_TIER_FIELDS = {f.name: f for f in fields(Tier)}
_INT_FIELDS = {
    "layers",
    "kv_heads",
    "head_dim",
    "context_tokens",
    "output_tokens_min",
    "output_tokens_max",
    "reasoning_tokens",
    "tokens_per_chunk",
    "gpus",
    "max_batch",
    "draft_tokens",
}
_FLOAT_FIELDS = {
    "params_b",
    "active_params_b",
    "bytes_per_param",
    "kv_bytes_per_elem",
    "efficiency",
    "fixed_ttft_ms",
    "fixed_itl_ms",
    "accuracy",
    "speculative_acceptance",
}


@dataclass(frozen=True, slots=True)
class TiersFile:
    tiers: tuple[Tier, ...]
    hardware: HardwareProfile | None
    faults: str | None


def _tier(raw: Any, where: str) -> Tier:
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: must be a table")
    kwargs: dict[str, Any] = {}
    for key, value in raw.items():
        if key not in _TIER_FIELDS:
            raise ConfigError(
                f"{where}.{key}: unknown key (known: {', '.join(sorted(_TIER_FIELDS))})"
            )
        if key in _INT_FIELDS:
            if isinstance(value, bool) or not isinstance(value, int):
                raise ConfigError(f"{where}.{key}: must be an integer, got {value!r}")
        elif key in _FLOAT_FIELDS:
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise ConfigError(f"{where}.{key}: must be a number, got {value!r}")
            value = float(value)
        elif not isinstance(value, str):
            raise ConfigError(f"{where}.{key}: must be a string, got {value!r}")
        kwargs[key] = value
    for required in ("name", "params_b"):
        if required not in kwargs:
            raise ConfigError(f"{where}: missing required key {required!r}")
    kwargs.setdefault("active_params_b", kwargs["params_b"])
    try:
        return Tier(**kwargs)
    except SimulatorError as err:
        raise ConfigError(f"{where}: {err}") from None


def _hardware(raw: Any, where: str) -> HardwareProfile:
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: must be a table")
    allowed = {"name", "bandwidth_tb_s", "tflops", "memory_gb", "description"}
    for key in raw:
        if key not in allowed:
            raise ConfigError(f"{where}.{key}: unknown key (known: {', '.join(sorted(allowed))})")
    nums: dict[str, float] = {}
    for key in ("bandwidth_tb_s", "tflops", "memory_gb"):
        v = raw.get(key)
        if isinstance(v, bool) or not isinstance(v, int | float):
            raise ConfigError(f"{where}.{key}: required number, got {v!r}")
        nums[key] = float(v)
    return HardwareProfile(
        str(raw.get("name", "custom")),
        nums["bandwidth_tb_s"] * 1e12,
        nums["tflops"] * 1e12,
        nums["memory_gb"] * 1e9,
        str(raw.get("description", "custom hardware from tiers file")),
    )


def load_tiers_file(path: str | Path) -> TiersFile:
    """Read and validate a tiers TOML; raises ConfigError naming ``path`` and the key."""
    p = Path(path)
    data = read_toml(p, str(p), "tiers file")
    known = {"include_defaults", "faults", "hardware", "tier"}
    for key in data:
        if key not in known:
            raise ConfigError(f"{p}: unknown key {key!r} (known: {', '.join(sorted(known))})")
    include = data.get("include_defaults", False)
    if not isinstance(include, bool):
        raise ConfigError(f"{p}: include_defaults must be true or false")
    raw_tiers = data.get("tier", [])
    if not isinstance(raw_tiers, list):
        raise ConfigError(f"{p}: 'tier' must be an array of tables ([[tier]])")
    tiers = [_tier(t, f"{p}: tier[{i}]") for i, t in enumerate(raw_tiers)]
    names = [t.name for t in tiers]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise ConfigError(f"{p}: tier {dup[0]!r} defined twice")
    if include:
        tiers = [t for t in default_tiers() if t.name not in names] + tiers
    if not tiers:
        raise ConfigError(f"{p}: no [[tier]] defined (and include_defaults is false)")
    faults = data.get("faults")
    if faults is not None and not isinstance(faults, str):
        raise ConfigError(f"{p}: faults must be a SPEC string")
    hw = _hardware(data["hardware"], f"{p}: hardware") if "hardware" in data else None
    return TiersFile(tuple(tiers), hw, faults)
