"""Exact token counts from a local tokenizer: a tokenizer.json trained here (no hub)
counts as the library does; every bad tokenizer setting is one ConfigError line."""

from __future__ import annotations

from pathlib import Path

import pytest

from tokrate.errors import ConfigError
from tokrate.inputs.tokencount import load_counter, tiktoken_cache_dir

tokenizers = pytest.importorskip("tokenizers")


def train_tokenizer(path: Path, vocab_size: int = 300) -> Path:
    """A small byte-level BPE trained on a few sentences, saved as tokenizer.json."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    corpus = ["the quick brown fox jumps over the lazy dog"] * 50 + ["tokens per second"] * 50
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        special_tokens=["<s>", "</s>"],
    )
    tok.train_from_iterator(corpus, trainer)
    tok.save(str(path))
    return path


def test_a_tokenizer_json_counts_like_the_library(tmp_path: Path) -> None:
    path = train_tokenizer(tmp_path / "tokenizer.json")
    counter = load_counter("tokenizer.json", base_dir=tmp_path)
    reference = tokenizers.Tokenizer.from_file(str(path))
    for text in ["the quick brown fox", "tokens per second, unseen words ü", ""]:
        expected = len(reference.encode(text, add_special_tokens=False).ids) if text else 0
        assert counter.count(text) == expected
    assert counter.name == "tokenizer.json"
    # Trained merges make known words cheaper than bytes: the count is not bytes / 4.
    assert counter.count("the quick brown fox jumps") < len("the quick brown fox jumps") / 2


def test_special_token_text_in_a_prompt_is_not_a_special_token(tmp_path: Path) -> None:
    counter = load_counter(str(train_tokenizer(tmp_path / "t.json")))
    assert counter.count("<s>") >= 1


@pytest.mark.parametrize(
    ("spec", "words"),
    [
        ("missing.json", "not found"),
        ("tiktoken:no-such-encoding", "unknown tiktoken encoding"),
    ],
)
def test_bad_tokenizers_are_one_line_config_errors(tmp_path: Path, spec: str, words: str) -> None:
    with pytest.raises(ConfigError) as err:
        load_counter(spec, base_dir=tmp_path, where="bench.toml: [[model]] 'm'")
    message = str(err.value)
    assert "\n" not in message and words in message and message.startswith("bench.toml")


def test_a_file_that_is_no_tokenizer_is_named(tmp_path: Path) -> None:
    bad = tmp_path / "tokenizer.json"
    bad.write_text('{"not": "a tokenizer"}')
    with pytest.raises(ConfigError, match=r"is not a tokenizer\.json"):
        load_counter(str(bad))


def test_an_uncached_tiktoken_encoding_is_refused_without_download(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("tiktoken")
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path / "empty-cache"))
    assert tiktoken_cache_dir() == tmp_path / "empty-cache"
    with pytest.raises(ConfigError, match=r"not in the cache .*tokrate never downloads"):
        load_counter("tiktoken:cl100k_base")


def test_a_run_without_usage_counts_the_answer_with_the_models_tokenizer(tmp_path: Path) -> None:
    """The simulator without usage (include_usage off): every ok record's output tokens
    are the tokenizer's count of the answer the simulator wrote (token_bytes of its
    tokens), tagged "tokenizer"; input tokens are the tokenizer's count of the prompt;
    a model without a tokenizer in the same run keeps the chunk count."""
    import polars as pl

    from tokrate.inputs.prompt_base import prompt_text
    from tokrate.inputs.prompts import load_prompts
    from tokrate.load.run import run_benchmark
    from tokrate.runfolder.loaded_run import load_run
    from tokrate.sim.model import token_bytes
    from tokrate.spec.config_file import load_spec

    train_tokenizer(tmp_path / "tokenizer.json")
    config = tmp_path / "bench.toml"
    config.write_text(
        '[[model]]\nendpoint = "sim"\nname = "sim-1b"\ntokenizer = "tokenizer.json"\n'
        '[[model]]\nendpoint = "sim"\nname = "sim-7b"\n'
        "[client]\ninclude_usage = false\nunique_prompts = false\n"
        '[load]\nrequests = 4\n[prompts]\nsets = ["chat"]\nmax_tokens = 12\n'
        f'[output]\ndir = "{tmp_path / "out"}"\nreport = false\n'
    )
    spec = load_spec(str(config))
    assert spec.models[0].tokenizer == str(tmp_path / "tokenizer.json")  # from the file's folder
    result = run_benchmark(spec)
    assert result.exit_code == 0
    records = load_run(result.run_dir).records.filter(pl.col("status") == "ok")
    counter = load_counter(str(tmp_path / "tokenizer.json"))
    counted = records.filter(pl.col("model") == "sim-1b")
    assert counted.height >= 4 and set(counted["tokens_source"]) == {"tokenizer"}
    for row in counted.iter_rows(named=True):
        text = token_bytes(0, row["content_chunks"]).decode()
        assert row["output_tokens"] == counter.count(text)
    assert (counted["output_tokens"] != counted["content_chunks"]).any()  # not chunks
    prompts = {p.id: p for p in load_prompts(spec.prompts)}
    for row in counted.iter_rows(named=True):
        p = prompts[row["prompt_id"]]
        assert row["input_tokens"] == counter.count(prompt_text(p.messages, p.prompt))
    plain = records.filter(pl.col("model") == "sim-7b")
    assert set(plain["tokens_source"]) == {"chunks"}
    assert (plain["output_tokens"] == plain["content_chunks"]).all()


def test_a_missing_tokenizer_file_is_refused_before_any_load(tmp_path: Path) -> None:
    import subprocess
    import sys

    config = tmp_path / "bench.toml"
    config.write_text('[[model]]\nendpoint = "sim"\nname = "sim-1b"\ntokenizer = "nope.json"\n')
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "tokrate",
            "run",
            "-c",
            str(config),
            "--output-dir",
            str(tmp_path / "out"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "model[0].tokenizer" in lines[0] and "not found" in lines[0]
    assert "Traceback" not in done.stderr and not (tmp_path / "out").exists()
