"""A hosted target's token prices, and what one request costs at them: the one rule
(docs/definitions.md "cost") that the spend cap (``--max-cost``, tokrate.load.spend)
applies to each record as it arrives and the summary (tokrate.analysis.cost, its
vectorised form, checked against this one by a test) to the stored records.

A request costs its uncached input tokens at ``in_per_m``, its cached input tokens
(capped at the input) at ``cached_in_per_m`` and its output tokens at ``out_per_m``,
USD per million; output tokens are the server's count, reasoning included, as
providers bill them. Pure Python: the measuring process prices records as they end.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

__all__ = ["Priced", "TokenPrices"]


class Priced(Protocol):
    """Anything that carries a target's prices (a ``[[model]]`` spec, run.json's target)."""

    @property
    def price_in_per_m(self) -> float | None: ...

    @property
    def price_cached_in_per_m(self) -> float | None: ...

    @property
    def price_out_per_m(self) -> float | None: ...


@dataclass(frozen=True, slots=True)
class TokenPrices:
    """USD per million input, cached input and output tokens."""

    in_per_m: float
    cached_in_per_m: float
    out_per_m: float

    @classmethod
    def of(cls, target: Priced) -> TokenPrices | None:
        """The token prices of ``target``, or None when it has no input and output
        price (a self-hosted target priced by GPU-hours, or an unpriced one)."""
        pin, pout = target.price_in_per_m, target.price_out_per_m
        if pin is None or pout is None:
            return None
        cached = target.price_cached_in_per_m
        return cls(float(pin), float(pin if cached is None else cached), float(pout))

    def cost_usd(self, input_tokens: int, cached_tokens: int, output_tokens: int) -> float:
        """USD of one request: uncached input, cached input (capped at the input) and
        output tokens at their prices. Counts below 0 count as 0."""
        inputs = max(0, input_tokens)
        cached = min(max(0, cached_tokens), inputs)
        outputs = max(0, output_tokens)
        return (
            (inputs - cached) * self.in_per_m
            + cached * self.cached_in_per_m
            + outputs * self.out_per_m
        ) / 1e6
