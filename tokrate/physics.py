"""The physics of LLM serving that the simulator, the report and prompt estimates share.

- Decode reads every active weight once per step, so single-stream decode speed is
  bounded by memory bandwidth: ``tokens/s <= bandwidth / (active params x bytes per
  param)`` (:func:`decode_bound_tps`).
- Prefill is compute-bound: ``2 x active params x input tokens`` FLOPs
  (:func:`prefill_s`).
- Token counts of text a client sends and the simulator receives follow one
  deterministic rule (:func:`count_text_tokens`, :func:`count_chat_tokens`), so both
  sides agree exactly; real tokenizers differ and a real server's usage is the truth.
- :data:`DEFAULT_TIER_SIZES`: the sizes of the built-in simulator tiers (the Llama and
  Mixtral sizes they stand for), which the simulator builds its tiers from and the
  report's synthetic runs reuse.

Units: parameters in billions (``*_b``), bandwidth bytes/s, compute FLOP/s, seconds.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Final

__all__ = [
    "CHAT_MESSAGE_OVERHEAD_TOKENS",
    "CHAT_REPLY_PRIMING_TOKENS",
    "DEFAULT_TIER_SIZES",
    "TierSize",
    "count_chat_tokens",
    "count_text_tokens",
    "decode_bound_tps",
    "prefill_s",
]

#: Tokens a chat template adds around each message (role markers), and once for the
#: assistant reply header. Deterministic stand-ins for a real tokenizer's template.
CHAT_MESSAGE_OVERHEAD_TOKENS: Final = 4
CHAT_REPLY_PRIMING_TOKENS: Final = 2


def count_text_tokens(text: str) -> int:
    """Approximate token count of ``text``: ceil(UTF-8 bytes / 4), at least 1 if non-empty.

    Four bytes per token is the usual rule of thumb for English BPE vocabularies; the
    point is determinism (client and server agree exactly), not tokenizer fidelity.
    """
    n = len(text.encode("utf-8"))
    return (n + 3) // 4


def _content_text(content: object) -> str:
    # Content is a string, or a list of parts ({"type": "text", "text": ...}); other
    # part kinds (images) count as nothing in this approximation.
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            str(p.get("text", "")) for p in content if isinstance(p, dict) and "text" in p
        )
    return ""


def count_chat_tokens(messages: Iterable[Mapping[str, object]]) -> int:
    """Approximate prompt tokens of a chat request.

    ``sum(CHAT_MESSAGE_OVERHEAD_TOKENS + count_text_tokens(content)) +
    CHAT_REPLY_PRIMING_TOKENS`` over the messages; content may be a string or a list
    of text parts.
    """
    total = CHAT_REPLY_PRIMING_TOKENS
    for m in messages:
        total += CHAT_MESSAGE_OVERHEAD_TOKENS + count_text_tokens(_content_text(m.get("content")))
    return total


def decode_bound_tps(
    bandwidth_bytes_per_s: float, active_params_b: float, bytes_per_param: float
) -> float:
    """Single-stream decode ceiling, tokens/s: bandwidth / (active params x bytes).

    Raises ValueError for a size or width that is not positive.
    """
    if active_params_b <= 0 or bytes_per_param <= 0:
        raise ValueError("active_params_b and bytes_per_param must be > 0")
    return bandwidth_bytes_per_s / (active_params_b * 1e9 * bytes_per_param)


def prefill_s(active_params_b: float, input_tokens: int, flops_per_s: float) -> float:
    """Compute-bound prefill of one request: 2 x active params x input tokens FLOPs at
    ``flops_per_s`` (already multiplied by whatever efficiency applies), seconds."""
    return 2.0 * active_params_b * 1e9 * input_tokens / flops_per_s


@dataclass(frozen=True, slots=True)
class TierSize:
    """A model size: total and active parameters (billions), bytes per parameter, and
    the GPUs it is served on."""

    name: str
    params_b: float
    active_params_b: float
    bytes_per_param: float = 2.0
    gpus: int = 1


#: The built-in simulator tiers' sizes (fp16). 1B-34B fit one 80 GB GPU, 70B and the
#: 8x7B mixture of experts (46.7B total, 12.9B active) are served on two.
DEFAULT_TIER_SIZES: Final[tuple[TierSize, ...]] = (
    TierSize("sim-1b", 1.0, 1.0),
    TierSize("sim-7b", 7.0, 7.0),
    TierSize("sim-13b", 13.0, 13.0),
    TierSize("sim-34b", 34.0, 34.0),
    TierSize("sim-70b", 70.0, 70.0, gpus=2),
    TierSize("sim-8x7b", 46.7, 12.9, gpus=2),
)
