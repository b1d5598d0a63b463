"""Published accelerator figures, shared by the simulator and the report's bound line.

Figures are vendor datasheet numbers for one GPU: HBM/GDDR bandwidth in bytes/s, dense
(non-sparse) 16-bit tensor throughput in FLOP/s, and memory in bytes. They are the
ceilings the physics in docs/definitions.md divides by; real engines reach a fraction of them
(the simulator's ``efficiency``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from tokrate.errors import ConfigError
from tokrate.tomlfile import read_toml

__all__ = [
    "CUSTOM_DEFAULT_MEMORY_BYTES",
    "CUSTOM_FLOPS_PER_BYTE",
    "HARDWARE_PROFILES",
    "TENSOR_PARALLEL_EFFICIENCY",
    "HardwareProfile",
    "get_hardware",
    "is_hardware_file",
    "load_hardware_file",
    "parse_custom",
]

#: Fraction of the summed bandwidth/FLOPs that n-way tensor parallelism keeps (all-reduce
#: traffic and synchronisation each step). Applied as efficiency ** 0 for one GPU.
TENSOR_PARALLEL_EFFICIENCY = 0.9


@dataclass(frozen=True, slots=True)
class HardwareProfile:
    """One accelerator model. Units: bytes/s, FLOP/s, bytes."""

    name: str
    bandwidth_bytes_per_s: float
    flops_per_s: float
    memory_bytes: float
    description: str = ""

    def __post_init__(self) -> None:
        for field_name in ("bandwidth_bytes_per_s", "flops_per_s", "memory_bytes"):
            value = getattr(self, field_name)
            if not value > 0:
                raise ConfigError(
                    f"hardware {self.name!r}: {field_name} must be > 0, got {value!r}"
                )

    def scaled(self, gpus: int) -> HardwareProfile:
        """The aggregate of ``gpus`` of these under tensor parallelism.

        Bandwidth and FLOPs add up times :data:`TENSOR_PARALLEL_EFFICIENCY` (for
        gpus > 1); memory adds up exactly.
        """
        if gpus < 1:
            raise ConfigError(f"hardware {self.name!r}: gpus must be >= 1, got {gpus}")
        if gpus == 1:
            return self
        eff = TENSOR_PARALLEL_EFFICIENCY
        return HardwareProfile(
            name=f"{gpus}x{self.name}",
            bandwidth_bytes_per_s=self.bandwidth_bytes_per_s * gpus * eff,
            flops_per_s=self.flops_per_s * gpus * eff,
            memory_bytes=self.memory_bytes * gpus,
            description=f"{gpus} x {self.description} (tensor parallel, x{eff} efficiency)",
        )


_GB = 1e9
_TB = 1e12
_TFLOPS = 1e12

HARDWARE_PROFILES: dict[str, HardwareProfile] = {
    p.name: p
    for p in (
        HardwareProfile("a100-80g", 2.039 * _TB, 312e12, 80 * _GB, "NVIDIA A100 80GB SXM"),
        HardwareProfile("h100-sxm", 3.35 * _TB, 989e12, 80 * _GB, "NVIDIA H100 SXM5 80GB"),
        HardwareProfile("h100-pcie", 2.0 * _TB, 756e12, 80 * _GB, "NVIDIA H100 PCIe 80GB"),
        HardwareProfile("h200", 4.8 * _TB, 989e12, 141 * _GB, "NVIDIA H200 141GB"),
        HardwareProfile("h20", 4.0 * _TB, 148e12, 96 * _GB, "NVIDIA H20 96GB"),
        # HGX/DGX B200 datasheet: 8 TB/s and 4.5 PFLOPS FP16/BF16 per GPU *with 2:4
        # sparsity*, so 2.25 PFLOPS dense; memory is the datasheet's allocatable
        # 1,440 GB per 8 GPUs = 180 GB (192 GB is the raw HBM3e capacity).
        HardwareProfile("b200", 8.0 * _TB, 2250e12, 180 * _GB, "NVIDIA B200 180GB (HGX)"),
        HardwareProfile("mi300x", 5.3 * _TB, 1307.4e12, 192 * _GB, "AMD Instinct MI300X 192GB"),
        HardwareProfile("l40s", 0.864 * _TB, 362.05e12, 48 * _GB, "NVIDIA L40S 48GB"),
        HardwareProfile("l4", 0.300 * _TB, 121e12, 24 * _GB, "NVIDIA L4 24GB"),
        # AWS publishes no tensor figure for the A10G; the A10 datasheet's dense FP16
        # (125 TFLOPS, 250 with sparsity) is the closest vendor number.
        HardwareProfile("a10g", 0.600 * _TB, 125e12, 24 * _GB, "NVIDIA A10G 24GB (AWS G5)"),
        HardwareProfile("rtx-4090", 1.008 * _TB, 165e12, 24 * _GB, "NVIDIA GeForce RTX 4090 24GB"),
        # Apple quotes GPU FP32 TFLOPS only; its GPUs run FP16 at the FP32 rate, so
        # that figure is the 16-bit one. Bandwidth and memory are the top bins'.
        HardwareProfile(
            "m2-ultra", 0.800 * _TB, 27.2e12, 192 * _GB, "Apple M2 Ultra 76-core GPU, 192GB"
        ),
        HardwareProfile(
            "m3-max", 0.400 * _TB, 16.4e12, 128 * _GB, "Apple M3 Max 40-core GPU, 128GB"
        ),
        HardwareProfile(
            "m4-max", 0.546 * _TB, 18.4e12, 128 * _GB, "Apple M4 Max 40-core GPU, 128GB"
        ),
        # CPU sockets: bandwidth = channels x MT/s x 8 bytes; FLOPs are a rough
        # AVX-512 FP32 figure (tens of cores x 2 FMA units x 16 lanes x 2 x ~2.5 GHz),
        # because decode on a CPU is bound by memory long before compute.
        HardwareProfile(
            "cpu-ddr5-2ch", 89.6 * _GB, 1e12, 64 * _GB, "desktop/laptop CPU, 2ch DDR5-5600"
        ),
        HardwareProfile(
            "cpu-ddr5-8ch", 307.2 * _GB, 4e12, 512 * _GB, "server CPU socket, 8ch DDR5-4800"
        ),
        HardwareProfile(
            "cpu-ddr5-12ch", 460.8 * _GB, 6e12, 768 * _GB, "server CPU socket, 12ch DDR5-4800"
        ),
    )
}

#: Defaults of a custom profile that gives only its bandwidth. The bound line needs
#: bandwidth alone; the simulator's prefill and fit checks need the other two, so they
#: borrow the A100's FLOP-per-byte ratio (~150) and an 80 GB card.
CUSTOM_FLOPS_PER_BYTE = 150.0
CUSTOM_DEFAULT_MEMORY_BYTES = 80 * _GB

_NUMBER = r"((?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?)"
#: Units per key, as documented; matched case-insensitively (decimal except GiB).
_UNITS: dict[str, dict[str, float]] = {
    "bandwidth": {"B/s": 1, "KB/s": 1e3, "MB/s": 1e6, "GB/s": 1e9, "TB/s": 1e12},
    "flops": {"FLOPS": 1, "GFLOPS": 1e9, "TFLOPS": 1e12, "PFLOPS": 1e15},
    "memory": {"GB": 1e9, "GiB": 2**30, "TB": 1e12},
}
_EXAMPLES = {"bandwidth": "900GB/s", "flops": "300TFLOPS", "memory": "48GB"}
_CUSTOM_FORMS = "bandwidth=900GB/s[,flops=300TFLOPS][,memory=48GB] or a .toml file"


def _quantity(spec: str, key: str, text: str) -> float:
    """``text`` (e.g. "900GB/s") in base units; ConfigError naming ``spec`` otherwise."""
    units = {u.lower(): f for u, f in _UNITS[key].items()}
    m = re.fullmatch(_NUMBER + r"\s*([A-Za-z/]+)", text.strip())
    if m is None or m.group(2).lower() not in units:
        raise ConfigError(
            f"hardware {spec!r}: expected {key}=<number><unit> like {_EXAMPLES[key]} "
            f"(units: {', '.join(_UNITS[key])})"
        )
    # float() of the whole literal: an exponent like 1e999 becomes inf (rejected
    # below) instead of an OverflowError from int arithmetic.
    value = float(m.group(1)) * units[m.group(2).lower()]
    if not 0 < value < float("inf"):
        raise ConfigError(f"hardware {spec!r}: {key} must be > 0, got {text.strip()!r}")
    return value


def _custom_fields(spec: str) -> dict[str, str]:
    known = ("bandwidth", "flops", "memory", "name")
    out: dict[str, str] = {}
    for part in spec.split(","):
        key, sep, value = (s.strip() for s in part.partition("="))
        if not sep or key not in known:
            raise ConfigError(
                f"hardware {spec!r}: expected comma-separated key=value with keys "
                f"{', '.join(known)}, got {part.strip()!r}"
            )
        if key in out:
            raise ConfigError(f"hardware {spec!r}: {key} given twice")
        out[key] = value
    if "bandwidth" not in out:
        raise ConfigError(f"hardware {spec!r}: bandwidth=<number><unit> (like 900GB/s) is required")
    return out


def parse_custom(spec: str) -> HardwareProfile:
    """A profile from ``bandwidth=900GB/s[,flops=300TFLOPS][,memory=48GB][,name=NAME]``.

    Units are decimal (GB/s = 1e9 bytes/s) except GiB. A missing ``flops`` is
    :data:`CUSTOM_FLOPS_PER_BYTE` x bandwidth and a missing ``memory``
    :data:`CUSTOM_DEFAULT_MEMORY_BYTES`; the description says which were defaulted.
    """
    raw = _custom_fields(spec)
    bw = _quantity(spec, "bandwidth", raw["bandwidth"])
    parts = [f"{bw / 1e9:g} GB/s"]
    if "flops" in raw:
        flops = _quantity(spec, "flops", raw["flops"])
        parts.append(f"{flops / _TFLOPS:g} TFLOPS")
    else:
        flops = bw * CUSTOM_FLOPS_PER_BYTE
        parts.append(f"{flops / _TFLOPS:g} TFLOPS (default)")
    if "memory" in raw:
        memory = _quantity(spec, "memory", raw["memory"])
        parts.append(f"{memory / _GB:.4g} GB")
    else:
        memory = CUSTOM_DEFAULT_MEMORY_BYTES
        parts.append(f"{memory / _GB:g} GB (default)")
    name = raw.get("name") or "custom"
    return HardwareProfile(name, bw, flops, memory, f"{name}: {', '.join(parts)}")


def load_hardware_file(path: str | Path) -> HardwareProfile:
    """A profile from a TOML file with top-level keys ``bandwidth_gb_s`` (required),
    ``flops_tflops``, ``memory_gb``, ``name`` (default: the file's stem) and
    ``description``; missing numbers default as in :func:`parse_custom`."""
    p = Path(path)
    where = f"hardware file {str(p)!r}"
    data = read_toml(p, where, "file")
    allowed = ("bandwidth_gb_s", "description", "flops_tflops", "memory_gb", "name")
    for key in data:
        if key not in allowed:
            raise ConfigError(f"{where}: unknown key {key!r} (known: {', '.join(allowed)})")
    nums: dict[str, float] = {}
    for key in ("bandwidth_gb_s", "flops_tflops", "memory_gb"):
        v = data.get(key)
        if v is None and key != "bandwidth_gb_s":
            continue
        if isinstance(v, bool) or not isinstance(v, int | float) or not 0 < v < float("inf"):
            raise ConfigError(f"{where}: {key} must be a number > 0, got {v!r}")
        nums[key] = float(v)
    for key in ("name", "description"):
        if not isinstance(data.get(key, ""), str):
            raise ConfigError(f"{where}: {key} must be a string, got {data[key]!r}")
    bw = nums["bandwidth_gb_s"] * _GB
    name = str(data.get("name") or p.stem)
    return HardwareProfile(
        name,
        bw,
        nums.get("flops_tflops", bw * CUSTOM_FLOPS_PER_BYTE / _TFLOPS) * _TFLOPS,
        nums.get("memory_gb", CUSTOM_DEFAULT_MEMORY_BYTES / _GB) * _GB,
        str(data.get("description") or f"{name}: {bw / _GB:g} GB/s (from {p.name})"),
    )


def is_hardware_file(value: str) -> bool:
    """Whether ``value`` is meant as a TOML file rather than a name or custom string."""
    return "=" not in value and value.lower().endswith(".toml")


def get_hardware(name: str) -> HardwareProfile:
    """A profile from a built-in name, a ``bandwidth=...`` string (:func:`parse_custom`)
    or a path ending in ``.toml`` (:func:`load_hardware_file`, relative to the current
    directory). Raises a one-line ConfigError naming the value and the forms."""
    if "=" in name:
        return parse_custom(name)
    if is_hardware_file(name):
        return load_hardware_file(name)
    try:
        return HARDWARE_PROFILES[name]
    except KeyError:
        known = ", ".join(sorted(HARDWARE_PROFILES))
        raise ConfigError(
            f"unknown hardware profile {name!r} (known: {known}; or {_CUSTOM_FORMS})"
        ) from None
