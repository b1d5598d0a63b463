"""Write random-weight models for the real-server tests: nothing comes from a model hub.

Run by the cached generator interpreters, never imported by the test process (which has
neither gguf nor torch):

    python modelgen.py tokenizer OUT_DIR                       (modelgen venv: tokenizers)
    python modelgen.py gguf TOKENIZER_JSON OUT.gguf SHAPE_JSON (modelgen venv: gguf, numpy)
    python modelgen.py hf TOKENIZER_JSON OUT_DIR SHAPE_JSON    (transformers venv: torch)

The tokenizer is a byte-level BPE trained on the bundled prompt sets (so every byte is
encodable and the prompts tokenize to realistic lengths), with ChatML control tokens.
SHAPE_JSON is a :class:`tests.real_servers.models.ModelShape` as a dict. Weights are
N(0, 0.02) from a seeded generator, norms 1.0: the text is noise, the timing is real.
The output-projection rows of the control tokens and of tokens that are not complete
UTF-8 on their own are zero, so their logit is 0 while the top logits of 4096 random
ones are far above it: greedy or top-k sampling never stops at an end token (every
request runs to max_tokens without a server-specific ``ignore_eos``) and every token is
printable text (one token, one content chunk, unless the server itself groups them).
Every file is written under a temporary name and renamed, so a killed run never leaves
a half-written model in the cache.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
EOS_TOKEN = "<|im_end|>"
BOS_TOKEN = "<|endoftext|>"
CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
VOCAB_SIZE = 4096


def _corpus() -> list[str]:
    texts: list[str] = []
    files = sorted((REPO / "prompts").glob("*.jsonl"))
    if not files:
        # An empty corpus trains a tokenizer without merges, which llama.cpp refuses.
        raise SystemExit("modelgen: no bundled prompt sets under prompts/")
    for path in files:
        for line in path.read_text(encoding="utf-8").splitlines():
            if not line.strip():
                continue
            item = json.loads(line)
            for message in item.get("messages") or []:
                texts.append(str(message.get("content", "")))
            if item.get("prompt"):
                texts.append(str(item["prompt"]))
    return texts


def write_tokenizer(out_dir: Path) -> None:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_corpus(), trainer=trainer)
    out_dir.mkdir(parents=True, exist_ok=True)
    tmp = out_dir / "tokenizer.json.tmp"
    tok.save(str(tmp))
    os.replace(tmp, out_dir / "tokenizer.json")


def _vocab_and_merges(tokenizer_json: Path) -> tuple[list[str], list[str]]:
    data = json.loads(tokenizer_json.read_text(encoding="utf-8"))
    vocab: dict[str, int] = dict(data["model"]["vocab"])
    for added in data.get("added_tokens", []):
        vocab[added["content"]] = added["id"]
    tokens = [""] * len(vocab)
    for text, index in vocab.items():
        tokens[index] = text
    merges = [m if isinstance(m, str) else " ".join(m) for m in data["model"]["merges"]]
    return tokens, merges


def _byte_decoder() -> dict[str, int]:
    """GPT-2's byte-level alphabet, inverted: token character -> byte."""
    printable = [*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    chars = list(printable)
    extra = 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            chars.append(256 + extra)
            extra += 1
    return {chr(c): b for b, c in zip(printable, chars, strict=True)}


def silent_token_ids(tokens: list[str]) -> list[int]:
    """Ids whose output-projection row is zeroed: control tokens and byte sequences
    that are not valid UTF-8 by themselves."""
    decoder = _byte_decoder()
    out = []
    for index, text in enumerate(tokens):
        if text in SPECIAL_TOKENS:
            out.append(index)
            continue
        try:
            bytes(decoder[c] for c in text).decode("utf-8")
        except (KeyError, UnicodeDecodeError):
            out.append(index)
    return out


def write_gguf(tokenizer_json: Path, out: Path, shape: dict[str, Any]) -> None:
    import gguf
    import numpy as np

    tokens, merges = _vocab_and_merges(tokenizer_json)
    n_vocab = len(tokens)
    d, n_layers, ff = shape["dim"], shape["layers"], shape["ffn_dim"]
    heads, kv_heads = shape["heads"], shape["kv_heads"]
    head_dim = d // heads
    rng = np.random.default_rng(shape["seed"])

    def weight(*dims: int) -> np.ndarray:
        return (rng.standard_normal(dims, dtype=np.float32) * 0.02).astype(np.float16)

    def ones(n: int) -> np.ndarray:
        return np.ones(n, dtype=np.float32)

    tmp = out.with_suffix(".gguf.tmp")
    writer = gguf.GGUFWriter(str(tmp), "llama")
    writer.add_name(shape["name"])
    writer.add_context_length(shape["context"])
    writer.add_embedding_length(d)
    writer.add_block_count(n_layers)
    writer.add_feed_forward_length(ff)
    writer.add_head_count(heads)
    writer.add_head_count_kv(kv_heads)
    writer.add_rope_dimension_count(head_dim)
    writer.add_rope_freq_base(10000.0)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_vocab_size(n_vocab)
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("gpt-2")
    writer.add_token_list(tokens)
    writer.add_token_types(
        [gguf.TokenType.CONTROL if t in SPECIAL_TOKENS else gguf.TokenType.NORMAL for t in tokens]
    )
    writer.add_token_merges(merges)
    writer.add_bos_token_id(tokens.index(BOS_TOKEN))
    writer.add_eos_token_id(tokens.index(EOS_TOKEN))
    writer.add_add_bos_token(False)
    writer.add_chat_template(CHATML_TEMPLATE)

    writer.add_tensor("token_embd.weight", weight(n_vocab, d))
    for i in range(n_layers):
        writer.add_tensor(f"blk.{i}.attn_norm.weight", ones(d))
        writer.add_tensor(f"blk.{i}.attn_q.weight", weight(d, d))
        writer.add_tensor(f"blk.{i}.attn_k.weight", weight(kv_heads * head_dim, d))
        writer.add_tensor(f"blk.{i}.attn_v.weight", weight(kv_heads * head_dim, d))
        writer.add_tensor(f"blk.{i}.attn_output.weight", weight(d, d))
        writer.add_tensor(f"blk.{i}.ffn_norm.weight", ones(d))
        writer.add_tensor(f"blk.{i}.ffn_gate.weight", weight(ff, d))
        writer.add_tensor(f"blk.{i}.ffn_up.weight", weight(ff, d))
        writer.add_tensor(f"blk.{i}.ffn_down.weight", weight(d, ff))
    writer.add_tensor("output_norm.weight", ones(d))
    output = weight(n_vocab, d)
    output[silent_token_ids(tokens)] = 0
    writer.add_tensor("output.weight", output)

    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    os.replace(tmp, out)


def write_hf(tokenizer_json: Path, out_dir: Path, shape: dict[str, Any]) -> None:
    import shutil

    import torch
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    tokens, _ = _vocab_and_merges(tokenizer_json)
    torch.manual_seed(shape["seed"])
    config = LlamaConfig(
        vocab_size=len(tokens),
        hidden_size=shape["dim"],
        intermediate_size=shape["ffn_dim"],
        num_hidden_layers=shape["layers"],
        num_attention_heads=shape["heads"],
        num_key_value_heads=shape["kv_heads"],
        max_position_embeddings=shape["context"],
        rms_norm_eps=1e-5,
        rope_theta=10000.0,
        bos_token_id=tokens.index(BOS_TOKEN),
        eos_token_id=tokens.index(EOS_TOKEN),
        tie_word_embeddings=False,
        initializer_range=0.02,
        torch_dtype="float32",
    )
    model = LlamaForCausalLM(config)
    with torch.no_grad():
        model.lm_head.weight[silent_token_ids(tokens)] = 0.0
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_file=str(tokenizer_json),
        bos_token=BOS_TOKEN,
        eos_token=EOS_TOKEN,
        pad_token=BOS_TOKEN,
    )
    tokenizer.chat_template = CHATML_TEMPLATE
    tmp = out_dir.with_name(out_dir.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    shutil.rmtree(out_dir, ignore_errors=True)
    os.replace(tmp, out_dir)


def main(argv: list[str]) -> int:
    command, *args = argv
    if command == "tokenizer":
        write_tokenizer(Path(args[0]))
    elif command == "gguf":
        write_gguf(Path(args[0]), Path(args[1]), json.loads(args[2]))
    elif command == "hf":
        write_hf(Path(args[0]), Path(args[1]), json.loads(args[2]))
    else:
        print(f"modelgen: unknown command {command!r} (tokenizer, gguf, hf)", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
