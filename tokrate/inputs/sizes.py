"""Model sizes inferred from model names.

:func:`infer_size` reads a parameter count out of names such as ``llama-3.1-8b``,
``Qwen2.5-0.5B-Instruct``, ``70B-instruct``, ``mixtral-8x7b`` or ``qwen3-30b-a3b`` and
returns ``(params_b, active_params_b)`` in billions of parameters. A size the user
gives in the config always wins; this is only the fallback.

Rules, first match wins:

1. Known models (:data:`KNOWN_SIZES`), matched as a substring of the lower-cased name
   after the last ``/``: published totals and active counts (e.g. mixtral-8x7b is
   46.7B total, 12.9B active).
2. ``<E>x<S>b`` (mixture of experts, E experts of S billion): experts share attention
   and embeddings, so the total is ``E x S x 0.834`` (Mixtral's published ratio), and a
   token reads two experts plus the shared weights: ``active = 2 x S x 0.834 x 1.1``.
   For 8x7b that gives 46.7 / 12.8.
3. ``<T>b-a<A>b`` (Qwen-style MoE names: T total, A active): ``(T, A)``.
4. ``<N>b`` or ``<N>m`` as its own token (``7b``, ``0.5B``, ``135m``): dense, so
   ``active == total``. Version numbers (``3.1``) never match because they have no unit.

Anything else (``gpt-4o``, ``claude-sonnet``) gives ``None``: unknown, never a guess.
"""

from __future__ import annotations

import re
from typing import Final

__all__ = [
    "KNOWN_SIZES",
    "MOE_ACTIVE_SHARED_FACTOR",
    "MOE_SHARED_FACTOR",
    "fill_sizes",
    "infer_bytes_per_param",
    "infer_size",
]

#: Total = experts x expert size x this (attention/embeddings are shared, not replicated).
MOE_SHARED_FACTOR: Final = 0.834
#: Active = 2 experts x expert size x MOE_SHARED_FACTOR x this (the shared weights every
#: token also reads).
MOE_ACTIVE_SHARED_FACTOR: Final = 1.1

#: Published (total, active) billions of parameters for names the rules get wrong.
#: Longer keys are tried first, so "mixtral-8x22b" never matches "mixtral-8x2".
KNOWN_SIZES: Final[dict[str, tuple[float, float]]] = {
    "mixtral-8x7b": (46.7, 12.9),
    "mixtral-8x22b": (140.6, 39.1),
    "deepseek-v3": (671.0, 37.0),
    "deepseek-r1": (671.0, 37.0),
    "deepseek-v2-lite": (15.7, 2.4),
    "deepseek-v2": (236.0, 21.0),
    "dbrx": (132.0, 36.0),
    "gpt-oss-120b": (117.0, 5.1),
    "gpt-oss-20b": (21.0, 3.6),
    "llama-4-scout": (109.0, 17.0),
    "llama-4-maverick": (400.0, 17.0),
    "qwen3-235b-a22b": (235.0, 22.0),
    "qwen3-30b-a3b": (30.5, 3.3),
}

_KNOWN_ORDER: Final = sorted(KNOWN_SIZES, key=len, reverse=True)
# A size token stands alone: not preceded by a letter/digit/dot, not followed by one.
_MOE = re.compile(r"(?<![a-z0-9.])(\d+)x(\d+(?:\.\d+)?)b(?![a-z0-9])")
_TOTAL_ACTIVE = re.compile(r"(?<![a-z0-9.])(\d+(?:\.\d+)?)b[-_]a(\d+(?:\.\d+)?)b(?![a-z0-9])")
_DENSE = re.compile(r"(?<![a-z0-9.])(\d+(?:\.\d+)?)([bm])(?![a-z0-9])")


def infer_size(model_name: str) -> tuple[float, float] | None:
    """``(params_b, active_params_b)`` in billions inferred from ``model_name``, or None.

    Pure; never raises. See the module docstring for the rules.
    """
    name = model_name.rsplit("/", 1)[-1].lower()
    for key in _KNOWN_ORDER:
        if key in name:
            return KNOWN_SIZES[key]
    if m := _MOE.search(name):
        experts, expert_b = int(m.group(1)), float(m.group(2))
        if experts < 1 or expert_b <= 0:
            return None
        total = experts * expert_b * MOE_SHARED_FACTOR
        active = min(total, 2 * expert_b * MOE_SHARED_FACTOR * MOE_ACTIVE_SHARED_FACTOR)
        return round(total, 1), round(active, 1)
    if m := _TOTAL_ACTIVE.search(name):
        total, active = float(m.group(1)), float(m.group(2))
        if 0 < active <= total:
            return total, active
    if m := _DENSE.search(name):
        value = float(m.group(1))
        size = value / 1000 if m.group(2) == "m" else value
        if size > 0:
            return size, size
    return None


_QUANT: Final = (
    (
        re.compile(
            r"(?<![a-z0-9])(?:int4|w4a16|awq|gptq|4bit|q4(?:_[a-z0-9]+)*|nf4|mxfp4)(?![a-z0-9])"
        ),
        0.5,
    ),
    (re.compile(r"(?<![a-z0-9])(?:fp8|int8|w8a8|w8a16|8bit|q8(?:_0)?)(?![a-z0-9])"), 1.0),
    (re.compile(r"(?<![a-z0-9])(?:fp16|bf16|f16)(?![a-z0-9])"), 2.0),
)


def infer_bytes_per_param(model_name: str) -> float | None:
    """Bytes per weight from a quantisation tag in the name (``-fp8`` 1.0, ``-awq``,
    ``-int4``, ``-gptq``, ``q4_k_m`` 0.5, ``-bf16`` 2.0), or None when the name says
    nothing (the report then assumes 16-bit and says so)."""
    name = model_name.rsplit("/", 1)[-1].lower()
    for pattern, value in _QUANT:
        if pattern.search(name):
            return value
    return None


def fill_sizes(
    name: str,
    params_b: float | None,
    active_params_b: float | None,
    bytes_per_param: float | None,
) -> tuple[float | None, float | None, float | None]:
    """(params_b, active_params_b, bytes_per_param) with what the user left unset
    inferred from ``name`` — the one place sizes are inferred. A user-given size always
    wins; a user-given total with an inferred MoE name keeps the inferred active/total
    ratio; a model is dense unless told (or named) otherwise."""
    params, active = params_b, active_params_b
    inferred = infer_size(name)
    if inferred is not None:
        total_i, active_i = inferred
        if params is None:
            params = total_i
            if active is None:
                active = active_i
        elif active is None and active_i < total_i:
            # A mixture-of-experts name: keep its active share of the total the user
            # gave (unrounded: a rounded active size would read as MoE on a dense model).
            active = params * active_i / total_i
    if active is None:
        active = params
    bpp = bytes_per_param if bytes_per_param is not None else infer_bytes_per_param(name)
    return params, active, bpp
