"""Pure timing model of the simulator: tiers, placement, step times, token counts.

Nothing here does I/O or reads a clock. Units are in the names: ``_s`` seconds of
*model* time (before ``time_scale``), ``_bytes`` bytes, ``_tokens`` token counts.

Physics (docs/definitions.md): one decode step reads every active weight once plus the KV cache
of every sequence in the batch, so it takes
``(active weight bytes + KV bytes of the batch) / (bandwidth x efficiency)``; a
prefill costs ``2 x active_params x input_tokens / (FLOPs x efficiency)``. Memory left
next to the weights (``GPU_MEMORY_UTILIZATION`` of the GPUs' memory, as vLLM's default)
holds the KV cache and so caps the batch.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from tokrate.errors import SimulatorError
from tokrate.hardware import HardwareProfile
from tokrate.physics import (
    DEFAULT_TIER_SIZES,
    decode_bound_tps,
    prefill_s,
)

__all__ = [
    "GPU_MEMORY_UTILIZATION",
    "Tier",
    "TierTiming",
    "default_tiers",
    "token_bytes",
    "token_text",
]

#: Fraction of GPU memory the engine may use for weights + KV cache (vLLM's default
#: ``gpu_memory_utilization``); the rest is activations and allocator slack.
GPU_MEMORY_UTILIZATION = 0.9

_WORDS = (
    "The",
    " quick",
    " model",
    " streams",
    " tokens",
    " at",
    " the",
    " speed",
    " of",
    " its",
    " memory",
    " bandwidth",
    ",",
    " one",
    " step",
    " each",
    " time",
    ".",
)


def token_text(index: int) -> str:
    """Text of output token ``index`` (0-based): a fixed cycle of plain ASCII words.

    Plain ASCII without quotes or backslashes, so a token is its own JSON string body.
    """
    return _WORDS[index % len(_WORDS)]


_WORD_BYTES = tuple(w.encode("ascii") for w in _WORDS)


def token_bytes(start: int, stop: int) -> bytes:
    """UTF-8 bytes of output tokens ``start`` .. ``stop - 1`` concatenated."""
    if stop - start == 1:
        return _WORD_BYTES[start % len(_WORD_BYTES)]
    return b"".join(_WORD_BYTES[i % len(_WORD_BYTES)] for i in range(start, stop))


@dataclass(frozen=True, slots=True)
class Tier:
    """One simulated model. Raises SimulatorError from ``__post_init__`` on bad values.

    ``params_b``/``active_params_b`` are billions of parameters (active < total for
    MoE). KV shape: ``layers`` x ``kv_heads`` x ``head_dim`` at ``kv_bytes_per_elem``.
    Output length without ``max_tokens`` is uniform in
    [``output_tokens_min``, ``output_tokens_max``] (seeded). ``reasoning_tokens`` of
    the output are emitted as ``reasoning_content`` first. ``tokens_per_chunk`` tokens
    come out of each decode step in one chunk (speculative decoding). ``fixed_ttft_ms``
    and ``fixed_itl_ms`` (both or neither) replace the physics with exact per-request
    timing and no batching limit. ``efficiency`` None uses the server's setting.
    """

    name: str
    params_b: float
    active_params_b: float
    bytes_per_param: float = 2.0
    layers: int = 32
    kv_heads: int = 8
    head_dim: int = 128
    kv_bytes_per_elem: float = 2.0
    context_tokens: int = 8192
    output_tokens_min: int = 32
    output_tokens_max: int = 256
    reasoning_tokens: int = 0
    tokens_per_chunk: int = 1
    gpus: int = 1
    max_batch: int = 256
    efficiency: float | None = None
    fixed_ttft_ms: float | None = None
    fixed_itl_ms: float | None = None
    faults: str | None = None
    #: Probability of answering a checkable prompt right (docs/quality.md), and per task
    #: ("classification=0.95,extraction=0.8"; tasks not named get ``accuracy``).
    accuracy: float = 0.5
    task_accuracy: str | None = None
    #: Speculative decoding: the chance that a drafted token is accepted once every
    #: one before it was (0..1, None: none), ``draft_tokens`` drafted per verification
    #: step (the share of all drafted tokens accepted is (speedup - 1) / draft_tokens). Each step then yields
    #: :attr:`speculative_speedup` tokens on average for one step's memory traffic, so
    #: decode runs that many times past the bandwidth bound.
    speculative_acceptance: float | None = None
    draft_tokens: int = 4

    def __post_init__(self) -> None:
        where = f"tier {self.name!r}"
        if not 0 <= self.accuracy <= 1:
            raise SimulatorError(f"{where}: accuracy must be in [0, 1], got {self.accuracy!r}")
        _parse_task_accuracy(self.task_accuracy, where)
        if not self.name or any(c in self.name for c in " :,=\"'"):
            raise SimulatorError(f"{where}: name must be non-empty without spaces or :,=")
        for f in ("params_b", "active_params_b", "bytes_per_param", "kv_bytes_per_elem"):
            if not getattr(self, f) > 0:
                raise SimulatorError(f"{where}: {f} must be > 0, got {getattr(self, f)!r}")
        if self.active_params_b > self.params_b:
            raise SimulatorError(f"{where}: active_params_b must be <= params_b")
        for f in ("layers", "kv_heads", "head_dim", "context_tokens", "tokens_per_chunk"):
            if getattr(self, f) < 1:
                raise SimulatorError(f"{where}: {f} must be >= 1, got {getattr(self, f)!r}")
        if self.gpus < 1 or self.max_batch < 1:
            raise SimulatorError(f"{where}: gpus and max_batch must be >= 1")
        if not 1 <= self.output_tokens_min <= self.output_tokens_max:
            raise SimulatorError(
                f"{where}: need 1 <= output_tokens_min <= output_tokens_max, got "
                f"{self.output_tokens_min}..{self.output_tokens_max}"
            )
        if self.reasoning_tokens < 0:
            raise SimulatorError(f"{where}: reasoning_tokens must be >= 0")
        self._check_speculative(where)
        if self.efficiency is not None and not 0 < self.efficiency <= 1:
            raise SimulatorError(f"{where}: efficiency must be in (0, 1], got {self.efficiency}")
        if (self.fixed_ttft_ms is None) != (self.fixed_itl_ms is None):
            raise SimulatorError(f"{where}: set both fixed_ttft_ms and fixed_itl_ms or neither")
        for f in ("fixed_ttft_ms", "fixed_itl_ms"):
            v = getattr(self, f)
            if v is not None and not v >= 0:
                raise SimulatorError(f"{where}: {f} must be >= 0, got {v!r}")

    def accuracy_for(self, task: str) -> float:
        """The probability this tier answers a checkable prompt of ``task`` right."""
        return _parse_task_accuracy(self.task_accuracy, self.name).get(task, self.accuracy)

    @property
    def fixed_timing(self) -> bool:
        return self.fixed_itl_ms is not None

    def _check_speculative(self, where: str) -> None:
        a = self.speculative_acceptance
        if a is not None and not 0 <= a < 1:
            raise SimulatorError(f"{where}: speculative_acceptance must be in [0, 1), got {a!r}")
        if self.draft_tokens < 1:
            raise SimulatorError(f"{where}: draft_tokens must be >= 1")

    @property
    def speculative_speedup(self) -> float:
        """Tokens per verification step on average: 1 + a + a^2 + ... + a^k for
        acceptance a and k drafted tokens (each drafted token is kept only when every
        one before it was), 1 without speculative decoding."""
        a = self.speculative_acceptance
        if a is None:
            return 1.0
        return sum(a**i for i in range(self.draft_tokens + 1))

    @property
    def weight_bytes(self) -> float:
        """Bytes of all weights resident on the GPUs."""
        return self.params_b * 1e9 * self.bytes_per_param

    @property
    def active_weight_bytes(self) -> float:
        """Bytes read per decode step (the active parameters)."""
        return self.active_params_b * 1e9 * self.bytes_per_param

    @property
    def kv_bytes_per_token(self) -> float:
        """KV cache bytes per token of context: 2 (K and V) x layers x kv_heads x head_dim x bytes."""
        return 2 * self.layers * self.kv_heads * self.head_dim * self.kv_bytes_per_elem


def _parse_task_accuracy(spec: str | None, where: str) -> dict[str, float]:
    """ "task=p,task=p" as a dict (raises SimulatorError naming the bad part)."""
    out: dict[str, float] = {}
    for part in (spec or "").split(","):
        if not part.strip():
            continue
        task, sep, value = part.partition("=")
        try:
            p = float(value)
        except ValueError:
            p = -1.0
        if not sep or not task.strip() or not 0 <= p <= 1:
            raise SimulatorError(
                f"{where}: task_accuracy {part.strip()!r}: want TASK=P with P in [0, 1]"
            )
        out[task.strip()] = p
    return out


#: The built-in tiers' accuracy on checkable prompts (overall, then the bundled sets'
#: tasks): rising with size, classification easy, extraction harder, as the field's
#: routing advice has it (classification to a 7B, structured extraction larger); the
#: right tool with the right arguments (``tools``) is harder than schema-constrained
#: JSON (``structured``), where the format is enforced and only the content can be wrong.
_DEFAULT_ACCURACY: Final = {
    "sim-1b": (0.45, "classification=0.70,extraction=0.35,tools=0.40,structured=0.50"),
    "sim-7b": (0.65, "classification=0.92,extraction=0.60,tools=0.70,structured=0.80"),
    "sim-13b": (0.75, "classification=0.95,extraction=0.80,tools=0.82,structured=0.88"),
    "sim-34b": (0.85, "classification=0.97,extraction=0.93,tools=0.92,structured=0.95"),
    "sim-70b": (0.92, "classification=0.99,extraction=0.97,tools=0.96,structured=0.98"),
    "sim-8x7b": (0.80, "classification=0.96,extraction=0.88,tools=0.90,structured=0.93"),
}


def default_tiers() -> tuple[Tier, ...]:
    """The built-in tiers (fp16; KV shapes of the Llama/Mixtral family they stand for).

    1B-34B run on one GPU, 70B and the 8x7B MoE (46.7B total, 12.9B active) on two.
    """
    shapes = {
        "sim-1b": dict(layers=16, kv_heads=8, head_dim=64, context_tokens=8192),
        "sim-7b": dict(layers=32, kv_heads=32, head_dim=128, context_tokens=4096),
        "sim-13b": dict(layers=40, kv_heads=40, head_dim=128, context_tokens=4096),
        "sim-34b": dict(layers=48, kv_heads=8, head_dim=128, context_tokens=16384),
        "sim-70b": dict(layers=80, kv_heads=8, head_dim=128, context_tokens=4096),
        "sim-8x7b": dict(layers=32, kv_heads=8, head_dim=128, context_tokens=32768),
    }
    return tuple(
        Tier(
            s.name,
            s.params_b,
            s.active_params_b,
            bytes_per_param=s.bytes_per_param,
            gpus=s.gpus,
            **shapes[s.name],  # type: ignore[arg-type]
            accuracy=_DEFAULT_ACCURACY[s.name][0],
            task_accuracy=_DEFAULT_ACCURACY[s.name][1],
        )
        for s in DEFAULT_TIER_SIZES
    )


@dataclass(frozen=True, slots=True)
class TierTiming:
    """A tier placed on hardware: the numbers the engine schedules with (model time).

    Build with :meth:`place`, which refuses tiers that do not fit.
    """

    tier: Tier
    hardware: HardwareProfile
    """The aggregate of the tier's GPUs (tensor-parallel scaled)."""
    efficiency: float
    kv_capacity_tokens: int
    """Tokens of KV cache that fit next to the weights; caps the batch."""

    @classmethod
    def place(
        cls,
        tier: Tier,
        gpu: HardwareProfile,
        efficiency: float,
        tier_efficiency: Mapping[str, float],
    ) -> TierTiming:
        """Place ``tier`` on ``tier.gpus`` x ``gpu``.

        Efficiency precedence: ``tier_efficiency[name]`` > ``tier.efficiency`` > ``efficiency``.
        Raises SimulatorError when the weights do not fit, or no full-context sequence fits.
        """
        eff = tier_efficiency.get(tier.name, tier.efficiency if tier.efficiency else efficiency)
        if not 0 < eff <= 1:
            raise SimulatorError(f"tier {tier.name!r}: efficiency must be in (0, 1], got {eff}")
        hw = gpu.scaled(tier.gpus)
        usable = hw.memory_bytes * GPU_MEMORY_UTILIZATION
        if tier.fixed_timing:
            # Fixed timing ignores the hardware entirely: no fit check, no batch limit.
            return cls(tier, hw, eff, 2**62)
        if tier.weight_bytes > usable:
            raise SimulatorError(
                f"tier {tier.name!r}: {tier.weight_bytes / 1e9:.1f} GB of weights do not fit "
                f"{tier.gpus} x {gpu.name} ({usable / 1e9:.1f} GB usable at "
                f"{GPU_MEMORY_UTILIZATION:.0%}); raise gpus or lower bytes_per_param"
            )
        kv_tokens = int((usable - tier.weight_bytes) // tier.kv_bytes_per_token)
        if kv_tokens < tier.context_tokens:
            raise SimulatorError(
                f"tier {tier.name!r}: only {kv_tokens} tokens of KV cache fit next to the "
                f"weights on {tier.gpus} x {gpu.name}, less than one {tier.context_tokens}-token "
                "context; raise gpus or lower context_tokens"
            )
        return cls(tier, hw, eff, kv_tokens)

    @property
    def bandwidth_eff(self) -> float:
        return self.hardware.bandwidth_bytes_per_s * self.efficiency

    @property
    def flops_eff(self) -> float:
        return self.hardware.flops_per_s * self.efficiency

    @property
    def decode_bound_tps(self) -> float:
        """Single-stream ceiling: aggregate bandwidth / active weight bytes (tokens/s)."""
        return decode_bound_tps(
            self.hardware.bandwidth_bytes_per_s,
            self.tier.active_params_b,
            self.tier.bytes_per_param,
        )

    @property
    def expected_decode_tps(self) -> float:
        """Single-stream speed at short context: bound x efficiency x tokens per chunk."""
        if self.tier.fixed_timing:
            itl = self.tier.fixed_itl_ms or 0.0
            return math.inf if itl == 0 else 1000.0 / itl * self.tier.tokens_per_chunk
        return (
            self.decode_bound_tps
            * self.efficiency
            * self.tier.tokens_per_chunk
            * self.tier.speculative_speedup
        )

    def prefill_s(self, input_tokens: int) -> float:
        """Compute-bound prefill time of one request (seconds, model time)."""
        return prefill_s(self.tier.active_params_b, input_tokens, self.flops_eff)

    def decode_step_s(self, batch_size: int, batch_context_tokens: int) -> float:
        """One decode step for ``batch_size`` sequences holding ``batch_context_tokens``.

        Roofline: the larger of the memory time (active weights + the batch's KV) and
        the compute time (2 x active params x tokens produced), divided by the
        speculative speedup (a speculative tier verifies several drafted tokens per
        weight pass; the draft model's own cost is not modelled).
        """
        mem = (
            self.tier.active_weight_bytes + self.tier.kv_bytes_per_token * batch_context_tokens
        ) / self.bandwidth_eff
        compute = (
            2.0 * self.tier.active_params_b * 1e9 * batch_size * self.tier.tokens_per_chunk
        ) / self.flops_eff
        return max(mem, compute) / self.tier.speculative_speedup

    def describe(self) -> dict[str, object]:
        """Parameters for GET /v1/models (the non-standard ``tokrate`` field)."""
        t = self.tier
        return {
            "params_b": t.params_b,
            "active_params_b": t.active_params_b,
            "bytes_per_param": t.bytes_per_param,
            "gpus": t.gpus,
            "hardware": self.hardware.name,
            "efficiency": self.efficiency,
            "context_tokens": t.context_tokens,
            "tokens_per_chunk": t.tokens_per_chunk,
            "reasoning_tokens": t.reasoning_tokens,
            "kv_capacity_tokens": None if t.fixed_timing else self.kv_capacity_tokens,
            "decode_bound_tps": None if t.fixed_timing else self.decode_bound_tps,
            "expected_decode_tps": None if t.fixed_timing else self.expected_decode_tps,
            "fixed_ttft_ms": t.fixed_ttft_ms,
            "fixed_itl_ms": t.fixed_itl_ms,
            "accuracy": t.accuracy,
            "task_accuracy": _parse_task_accuracy(t.task_accuracy, t.name),
            "speculative_acceptance": t.speculative_acceptance,
            "draft_tokens": t.draft_tokens if t.speculative_acceptance is not None else None,
        }
