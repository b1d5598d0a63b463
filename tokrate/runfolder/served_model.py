"""What a server says about a model it serves: run.json ``targets[].served``.

Read before any load by the pre-flight (``tokrate.client.preflight``) from ``GET
{base_url}/models``: the context size (llama.cpp ``meta.n_ctx``, vLLM and the
simulator ``max_model_len``) and, from a llama-server, the model itself: ``meta.n_params``
(parameters), ``meta.size`` (bytes of its weights) and ``meta.ftype`` (their type, e.g.
``F16``, ``Q4_K_M``; else ``model_ftype`` of its ``GET /props``). Unknown is None.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["ServedModel"]


@dataclass(frozen=True, slots=True)
class ServedModel:
    """``context_tokens`` per sequence; ``params`` (a count, not billions) and
    ``weight_bytes`` of the weights as loaded; ``weight_type`` as the server names it;
    ``source``: where it said so (``GET /v1/models``, ``GET /props``)."""

    context_tokens: int | None = None
    params: int | None = None
    weight_bytes: int | None = None
    weight_type: str | None = None
    source: str = ""
    #: The model is a tier of a tokrate simulator (its /models entry carries the
    #: simulator's own ``tokrate`` object): a stand-in provider, which is told the
    #: right answer of a checked prompt as the embedded one is (docs/quality.md).
    simulator: bool = False

    @property
    def params_b(self) -> float | None:
        return None if self.params is None else self.params / 1e9

    @property
    def bytes_per_param(self) -> float | None:
        """Weight bytes per parameter (2.0 for F16; Q4_K_M about 0.6, its scales
        included), None unless both are known."""
        if not self.params or not self.weight_bytes:
            return None
        return self.weight_bytes / self.params

    @property
    def knows_size(self) -> bool:
        return self.params is not None

    def describe(self) -> str:
        """``23,468,544 parameters, F16 weights (2.00 bytes per parameter)``."""
        parts = []
        if self.params is not None:
            parts.append(f"{self.params:,} parameters")
        weights = f"{self.weight_type} weights" if self.weight_type else ""
        bpp = self.bytes_per_param
        if bpp is not None:
            weights = f"{weights} ({bpp:.2f} bytes per parameter)".strip()
        if weights:
            parts.append(weights)
        return ", ".join(parts)
