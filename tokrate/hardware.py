"""Published accelerator figures, shared by the simulator and the report's bound line.

Figures are vendor datasheet numbers for one GPU: HBM/GDDR bandwidth in bytes/s, dense
(non-sparse) 16-bit tensor throughput in FLOP/s, and memory in bytes. They are the
ceilings the physics in DESIGN.md divides by; real engines reach a fraction of them
(the simulator's ``efficiency``).
"""

from __future__ import annotations

from dataclasses import dataclass

from tokrate.errors import ConfigError

__all__ = [
    "HARDWARE_PROFILES",
    "TENSOR_PARALLEL_EFFICIENCY",
    "HardwareProfile",
    "get_hardware",
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

HARDWARE_PROFILES: dict[str, HardwareProfile] = {
    p.name: p
    for p in (
        HardwareProfile("a100-80g", 2.039 * _TB, 312e12, 80 * _GB, "NVIDIA A100 80GB SXM"),
        HardwareProfile("h100-sxm", 3.35 * _TB, 989e12, 80 * _GB, "NVIDIA H100 SXM5 80GB"),
        HardwareProfile("h200", 4.8 * _TB, 989e12, 141 * _GB, "NVIDIA H200 141GB"),
        HardwareProfile("l4", 0.300 * _TB, 121e12, 24 * _GB, "NVIDIA L4 24GB"),
        HardwareProfile("rtx-4090", 1.008 * _TB, 165e12, 24 * _GB, "NVIDIA GeForce RTX 4090 24GB"),
    )
}


def get_hardware(name: str) -> HardwareProfile:
    """Look up a profile by name; raises ConfigError naming the known profiles."""
    try:
        return HARDWARE_PROFILES[name]
    except KeyError:
        known = ", ".join(sorted(HARDWARE_PROFILES))
        raise ConfigError(f"unknown hardware profile {name!r} (known: {known})") from None
