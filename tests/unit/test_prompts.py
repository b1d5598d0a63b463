"""Prompt loading: JSONL, text, folders, bundled sets, synthetic lengths, errors."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from tokrate.errors import PromptError
from tokrate.inputs.prompt_base import Prompt, estimate_input_tokens, estimate_tokens, prompt_text
from tokrate.inputs.prompts import load_prompts, synthetic_prompts
from tokrate.physics import count_chat_tokens, count_text_tokens
from tokrate.spec.bundled import SHIPPED_SETS, bundled_sets
from tokrate.spec.types import PromptsSpec, SyntheticSpec


def load(tmp_path: Path, *paths: str, **kw: object) -> tuple[Prompt, ...]:
    return load_prompts(PromptsSpec(paths=paths, **kw), base_dir=tmp_path)  # type: ignore[arg-type]


def test_jsonl_messages_and_prompt_with_defaults(tmp_path: Path) -> None:
    (tmp_path / "support.jsonl").write_text(
        '{"id": "a", "task": "triage", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 9}\n'
        "\n"
        '{"prompt": "Once upon", "label": "ignored"}\n'
        '{"id": 7, "messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": [{"type": "text", "text": "why?"}]}]}\n',
        encoding="utf-8",
    )
    a, b, c = load(tmp_path, "support.jsonl")
    assert (a.id, a.task, a.max_tokens, a.source) == ("a", "triage", 9, "support.jsonl line 1")
    assert a.messages == ({"role": "user", "content": "hi"},) and a.prompt is None
    assert (b.id, b.task, b.prompt, b.messages, b.max_tokens) == (
        "support:3",
        "support",
        "Once upon",
        None,
        None,
    )
    assert c.id == "7"
    assert prompt_text(c.messages, None) == "be brief\n\nwhy?"
    # The simulator's chat count: 2 + (4 + ceil(8/4)) + (4 + ceil(4/4)).
    assert c.input_tokens_est == count_chat_tokens(c.messages or ()) == 13
    assert estimate_input_tokens(c.messages, None, "completions") == 4
    # A plain prompt goes out as one user message: 2 + 4 + ceil(9/4).
    assert b.input_tokens_est == 9


def test_estimate_is_the_simulators_ceil_utf8_bytes_over_4() -> None:
    texts = ("", "a", "abcd", "abcde", "é" * 3)
    assert [estimate_tokens(s) for s in texts] == [0, 1, 1, 2, 2]
    assert [estimate_tokens(s) for s in texts] == [count_text_tokens(s) for s in texts]


def test_text_blocks_and_whole_file(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text(
        "First prompt\nstill first\n\n\nSecond prompt\r\n\r\nThird\n", encoding="utf-8"
    )
    blocks = load(tmp_path, "notes.txt")
    assert [p.messages[0]["content"] for p in blocks if p.messages] == [
        "First prompt\nstill first",
        "Second prompt",
        "Third",
    ]
    assert [p.id for p in blocks] == ["notes:1", "notes:5", "notes:7"]
    whole = load(tmp_path, "notes.txt", text_split="file")
    assert len(whole) == 1 and whole[0].task == "notes"


def test_folder_is_read_recursively_in_path_order(tmp_path: Path) -> None:
    root = tmp_path / "set"
    (root / "sub").mkdir(parents=True)
    (root / "b.txt").write_text("bee", encoding="utf-8")
    (root / "a.jsonl").write_text('{"prompt": "ay"}\n', encoding="utf-8")
    (root / "sub" / "c.md").write_text("sea", encoding="utf-8")
    (root / "ignored.csv").write_text("x", encoding="utf-8")
    got = load(tmp_path, "set")
    assert [p.id for p in got] == ["a:1", "b:1", "c:1"]
    assert got[2].source == str(Path("set") / "sub" / "c.md") + " line 1"


def test_bundled_sets_are_real_and_varied() -> None:
    assert bundled_sets() == (
        "chat",
        "classification",
        "code",
        "extraction",
        "structured",
        "summarization",
        "tools",
    )
    prompts = load_prompts(PromptsSpec(), base_dir=".")  # no sources: the default sets
    by_task = Counter(p.task for p in prompts)
    assert set(by_task) == set(SHIPPED_SETS)
    assert all(16 <= n <= 30 for n in by_task.values()), by_task
    assert len({p.id for p in prompts}) == len(prompts)
    for p in prompts:
        assert p.messages and p.max_tokens and p.max_tokens > 0
        assert p.source.startswith(f"set:{p.task} line ")
    texts = [prompt_text(p.messages, p.prompt) for p in prompts]
    assert len(set(texts)) == len(texts)
    summ = [p.input_tokens_est for p in prompts if p.task == "summarization"]
    assert all(1000 <= n <= 3000 for n in summ), summ
    short = [p.max_tokens or 0 for p in prompts if p.task == "classification"]
    assert max(short) <= 16  # labels, not essays


def test_sets_paths_synthetic_combine_then_limit_and_max_tokens(tmp_path: Path) -> None:
    (tmp_path / "x.jsonl").write_text('{"prompt": "p"}\n', encoding="utf-8")
    spec = PromptsSpec(
        paths=("x.jsonl",),
        sets=("chat",),
        synthetic=SyntheticSpec(count=2, input_tokens=10),
        max_tokens=5,
    )
    got = load_prompts(spec, base_dir=tmp_path)
    assert [p.task for p in got][:2] == ["x", "chat"] and got[-1].task == "synthetic"
    assert len(got) == 1 + 20 + 2
    assert {p.max_tokens for p in got} == {5}
    limited = load_prompts(PromptsSpec(sets=("code",), limit=3), base_dir=tmp_path)
    assert [p.id for p in limited] == ["code-001", "code-002", "code-003"]


def test_synthetic_lengths_are_exact_seeded_and_varied() -> None:
    spec = SyntheticSpec(count=40, input_tokens=300, input_stddev=60, output_tokens=64, seed=3)
    a = synthetic_prompts(spec)
    assert a == synthetic_prompts(spec)
    assert a != synthetic_prompts(
        SyntheticSpec(count=40, input_tokens=300, input_stddev=60, seed=4)
    )
    lengths = [p.input_tokens_est for p in a]
    assert 250 < sum(lengths) / len(lengths) < 350 and len(set(lengths)) > 20
    for p in a:
        text = prompt_text(p.messages, p.prompt)
        assert text.isascii() and estimate_tokens(text) == p.input_tokens_est - 6
        assert count_chat_tokens(p.messages or ()) == p.input_tokens_est
        words = text.split()
        assert len(set(words)) > len(words) / 5  # varied text, not one repeated word
    fixed = synthetic_prompts(SyntheticSpec(count=3, input_tokens=17, output_tokens=9))
    assert [(p.input_tokens_est, p.max_tokens) for p in fixed] == [(17, 9)] * 3
    for dist in ("uniform", "lognormal"):
        got = synthetic_prompts(
            SyntheticSpec(count=200, input_tokens=100, input_stddev=20, distribution=dist)  # type: ignore[arg-type]
        )
        mean = sum(p.input_tokens_est for p in got) / len(got)
        assert 92 < mean < 108, (dist, mean)


BAD_FILES = [
    ("empty.jsonl", b"", "empty.jsonl: empty (no prompts)"),
    ("blank.jsonl", b"\n  \n", "blank.jsonl: empty (no prompts)"),
    ("blank.txt", b"\n\n", "blank.txt: empty (no prompts)"),
    (
        "latin1.jsonl",
        b'{"prompt": "ok"}\n{"prompt": "caf\xe9"}\n',
        "latin1.jsonl line 2: not valid UTF-8",
    ),
    ("bad.jsonl", b'{"prompt": "ok"}\n\n{"prompt": \n', "bad.jsonl line 3: invalid JSON"),
    (
        "none.jsonl",
        b'{"id": "x"}\n',
        "none.jsonl line 1: needs exactly one of 'messages' or 'prompt' (has neither)",
    ),
    (
        "both.jsonl",
        b'{"prompt": "a", "messages": []}\n',
        "both.jsonl line 1: needs exactly one of 'messages' or 'prompt' (has both)",
    ),
    ("list.jsonl", b"[1, 2]\n", "list.jsonl line 1: expected a JSON object, got list"),
    (
        "msgs.jsonl",
        b'{"messages": "hi"}\n',
        "msgs.jsonl line 1: 'messages' must be a non-empty list",
    ),
    (
        "role.jsonl",
        b'{"messages": [{"role": "robot", "content": "x"}]}\n',
        "role.jsonl line 1: messages[0].role must be one of",
    ),
    (
        "mt.jsonl",
        b'{"prompt": "a", "max_tokens": 0}\n',
        "mt.jsonl line 1: 'max_tokens' must be a positive integer, got 0",
    ),
    (
        "dup.jsonl",
        b'{"id": "a", "prompt": "x"}\n{"id": "a", "prompt": "y"}\n',
        "dup.jsonl line 2: duplicate prompt id 'a' (first at dup.jsonl line 1)",
    ),
    ("data.csv", b"a,b\n", "data.csv: unknown prompt file type '.csv'"),
]


@pytest.mark.parametrize(("name", "data", "message"), BAD_FILES, ids=[b[0] for b in BAD_FILES])
def test_bad_prompt_files_name_file_and_line(
    tmp_path: Path, name: str, data: bytes, message: str
) -> None:
    (tmp_path / name).write_bytes(data)
    with pytest.raises(PromptError) as info:
        load(tmp_path, name)
    assert str(info.value).startswith(message), str(info.value)
    assert "\n" not in str(info.value) and info.value.exit_code == 2


def test_missing_paths_and_sets(tmp_path: Path) -> None:
    with pytest.raises(PromptError, match=r"^nope\.jsonl: prompt file not found"):
        load(tmp_path, "nope.jsonl")
    (tmp_path / "emptydir").mkdir()
    with pytest.raises(PromptError, match="folder has no prompt files"):
        load(tmp_path, "emptydir")
    with pytest.raises(PromptError, match=r"no bundled prompt set 'zzz' \(known: chat, "):
        load_prompts(PromptsSpec(sets=("zzz",)), base_dir=tmp_path)


def test_bom_is_accepted(tmp_path: Path) -> None:
    (tmp_path / "bom.jsonl").write_bytes("\ufeff".encode() + json.dumps({"prompt": "x"}).encode())
    assert load(tmp_path, "bom.jsonl")[0].prompt == "x"


def test_unicode_line_separators_inside_json_strings(tmp_path: Path) -> None:
    # U+2028 is legal unescaped inside a JSON string; it must not split the line.
    (tmp_path / "u.jsonl").write_bytes('{"prompt": "a\u2028b\x85c"}\r\n{"prompt": "d"}\n'.encode())
    got = load(tmp_path, "u.jsonl")
    assert [p.prompt for p in got] == ["a\u2028b\x85c", "d"]
    assert got[1].source == "u.jsonl line 2"


def test_sources_file_by_file_with_tasks_and_what_limit_cut(tmp_path: Path) -> None:
    """run.json ``prompts``: one entry per file (a folder counts file by file), set
    and generator, in load order; ``limit`` cuts from the end and says where."""
    from tokrate.inputs.prompts import load_prompt_sources
    from tokrate.load.prompt_use import source_text
    from tokrate.runfolder.prompt_sources import PromptSourceInfo

    folder = tmp_path / "prompts"
    folder.mkdir()
    (folder / "a.jsonl").write_text(
        "\n".join(
            json.dumps({"prompt": f"q{i}", "task": "qa" if i else "triage"}) for i in range(3)
        ),
        encoding="utf-8",
    )
    (folder / "b.txt").write_text("one\n\ntwo\n", encoding="utf-8")
    spec = PromptsSpec(
        paths=("prompts",), sets=("chat",), synthetic=SyntheticSpec(count=4), limit=25
    )
    loaded = load_prompt_sources(spec, base_dir=tmp_path)
    assert loaded.sources == (
        PromptSourceInfo("file", "prompts/a.jsonl", 3, (("qa", 2), ("triage", 1))),
        PromptSourceInfo("file", "prompts/b.txt", 2, (("b", 2),)),
        PromptSourceInfo("set", "chat", 20, (("chat", 20),)),
        PromptSourceInfo("generated", "synthetic", 0, (), cut_by_limit=4),
    )
    assert [loaded.sources[i].name for i in loaded.origin] == (
        ["prompts/a.jsonl"] * 3 + ["prompts/b.txt"] * 2 + ["chat"] * 20
    )
    assert source_text(loaded.sources) == (
        "file prompts/a.jsonl 3 (tasks qa 2, triage 1); file prompts/b.txt 2; set chat 20;"
        " synthetic prompts 0 (+4 cut by limit)"
    )
    # With no source named, the five shipped sets, each its own entry.
    default = load_prompt_sources(PromptsSpec())
    assert [(s.kind, s.name, s.prompts) for s in default.sources] == [
        ("set", "chat", 20),
        ("set", "classification", 24),
        ("set", "code", 20),
        ("set", "extraction", 20),
        ("set", "summarization", 16),
    ]
