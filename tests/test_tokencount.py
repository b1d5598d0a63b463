"""Exact token counts from a local tokenizer: a tokenizer.json trained here (no hub)
counts as the library does; every bad tokenizer setting is one ConfigError line."""

from __future__ import annotations

from pathlib import Path

import pytest

from tokrate.errors import ConfigError
from tokrate.tokencount import load_counter, tiktoken_cache_dir

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
