"""The random-weight models the real servers load, made on first use and cached.

Shapes are Llama-architecture (RMSNorm, SwiGLU, RoPE, untied output). ``params`` counts
every weight, as llama.cpp's ``n_params`` does. Files live under
``$TOKRATE_CI_CACHE/models/<kind>-<name>-<key>``, where ``key`` hashes the generator's
source and the shape: editing the generator or a shape makes new files, never stale ones.
Generation runs in the cached generator venvs (``.ci/real-servers-setup``), because the
test process has neither gguf nor torch.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import subprocess
from dataclasses import dataclass
from pathlib import Path

from real_servers.paths import cache_dir, require_python

GENERATOR = Path(__file__).resolve().with_name("modelgen.py")
PROMPTS_DIR = Path(__file__).resolve().parents[2] / "prompts"


@dataclass(frozen=True, slots=True)
class ModelShape:
    name: str
    dim: int
    layers: int
    ffn_dim: int
    heads: int
    kv_heads: int
    context: int = 2048
    seed: int = 0
    vocab: int = 4096

    @property
    def params(self) -> int:
        head_dim = self.dim // self.heads
        kv_dim = self.kv_heads * head_dim
        per_layer = 2 * self.dim * self.dim + 2 * kv_dim * self.dim + 3 * self.dim * self.ffn_dim
        per_layer += 2 * self.dim  # two RMSNorm weights
        return self.layers * per_layer + 2 * self.vocab * self.dim + self.dim

    @property
    def params_b(self) -> float:
        return self.params / 1e9

    def as_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), sort_keys=True)


#: llama.cpp sizes, ~3 M to ~270 M parameters (F16: 7 MB to 540 MB).
GGUF_SHAPES: tuple[ModelShape, ...] = (
    ModelShape("rand-3m", dim=192, layers=4, ffn_dim=512, heads=3, kv_heads=3, seed=1),
    ModelShape("rand-24m", dim=512, layers=6, ffn_dim=1408, heads=8, kv_heads=8, seed=2),
    ModelShape("rand-91m", dim=768, layers=12, ffn_dim=2048, heads=12, kv_heads=12, seed=3),
    ModelShape("rand-265m", dim=1024, layers=20, ffn_dim=2816, heads=16, kv_heads=16, seed=4),
)

#: max_tokens per llama.cpp size: long enough that every decode window lasts ~0.25 s
#: or more, so a millisecond of scheduling jitter at either end stays far below 2%.
GGUF_MAX_TOKENS: dict[str, int] = {
    "rand-3m": 1024,
    "rand-24m": 512,
    "rand-91m": 256,
    "rand-265m": 128,
}

#: transformers sizes (float32 on CPU, eager PyTorch: per-step Python overhead is large,
#: so the sizes step by ~8x to keep the speed differences far above it).
HF_SHAPES: tuple[ModelShape, ...] = (
    ModelShape("hf-rand-3m", dim=192, layers=4, ffn_dim=512, heads=3, kv_heads=3, seed=11),
    ModelShape("hf-rand-24m", dim=512, layers=6, ffn_dim=1408, heads=8, kv_heads=8, seed=12),
    ModelShape("hf-rand-91m", dim=768, layers=12, ffn_dim=2048, heads=12, kv_heads=12, seed=13),
)


def _key(*parts: str) -> str:
    digest = hashlib.sha256(GENERATOR.read_bytes())
    for path in sorted(PROMPTS_DIR.glob("*.jsonl")):  # the tokenizer's training corpus
        digest.update(path.read_bytes())
    for part in parts:
        digest.update(part.encode())
    return digest.hexdigest()[:12]


def _generate(python: Path, *args: str) -> None:
    proc = subprocess.run(
        [str(python), str(GENERATOR), *args], capture_output=True, text=True, timeout=600
    )
    if proc.returncode != 0:
        raise RuntimeError(f"modelgen {args[0]} failed: {proc.stderr.strip()[-2000:]}")


def tokenizer_json() -> Path:
    """The shared byte-level BPE tokenizer (trained once, cached)."""
    folder = cache_dir() / "models" / f"tokenizer-{_key('tokenizer')}"
    path = folder / "tokenizer.json"
    if not path.exists():
        _generate(require_python("modelgen"), "tokenizer", str(folder))
    return path


def gguf_model(shape: ModelShape) -> Path:
    """A cached GGUF file (F16) for ``shape``."""
    tok = tokenizer_json()
    path = cache_dir() / "models" / f"gguf-{shape.name}-{_key('gguf', shape.as_json())}.gguf"
    if not path.exists():
        _generate(require_python("modelgen"), "gguf", str(tok), str(path), shape.as_json())
    return path


def hf_model(shape: ModelShape) -> Path:
    """A cached ``save_pretrained`` folder (float32 safetensors + tokenizer) for ``shape``."""
    tok = tokenizer_json()
    path = cache_dir() / "models" / f"hf-{shape.name}-{_key('hf', shape.as_json())}"
    if not (path / "config.json").exists():
        _generate(require_python("transformers"), "hf", str(tok), str(path), shape.as_json())
    return path
