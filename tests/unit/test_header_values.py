"""Keys, header values and prompts that cannot be sent are refused when the run's
settings load (issue 41, item 7): one line naming the variable, key or line and the
position, never the value, exit 2 (the old run ended in a UnicodeEncodeError
traceback inside the pre-flight for a non-ASCII key or header, reported a key with a
CR/LF as an unreachable endpoint and could print part of it, and a lone surrogate in a
prompt ended in a traceback when the request was encoded). Nothing here reaches a
server: every check runs before the pre-flight."""

from __future__ import annotations

from pathlib import Path

import pytest

from tokrate.cli import main
from tokrate.spec.header_values import header_value_problem

#: No server listens here: a check that let the run go on would fail to connect.
_NOWHERE = "http://127.0.0.1:9/v1"


def _error(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err
    assert "Traceback" not in err
    (line,) = err.strip().splitlines()
    assert line.startswith("tokrate: error: ")
    return line


@pytest.mark.parametrize(
    ("key", "problem"),
    [
        ("sk-abcé-0123456789", "character 7 is not ASCII"),
        ("sk-0123456789abcdef\n", "character 20 is a line break (CR/LF) (a trailing newline?)"),
        ("sk-0123\r\nX-Evil: 1", "character 8 is a line break (CR/LF)"),
        ("sk-01\x0723456789", "character 6 is a control character"),
    ],
)
def test_an_api_key_that_cannot_be_a_header_is_one_line_without_it(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    key: str,
    problem: str,
) -> None:
    monkeypatch.setenv("I41_KEY", key)
    argv = ["run", "--base-url", _NOWHERE, "-m", "m", "--api-key-env", "I41_KEY"]
    assert main([*argv, "--output-dir", str(tmp_path), "--requests", "1"]) == 2
    line = _error(capsys)
    assert f"environment variable I41_KEY (api_key_env): {problem};" in line
    assert "(the value is not shown)" in line
    for part in ("sk-abc", "0123456789", "X-Evil", "abcdef"):
        assert part not in line.replace("I41_KEY", "")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("équipe", "character 1 is not ASCII"),
        ("a\\r\\nX-Evil: 1", "character 2 is a line break (CR/LF)"),
        ("a\\u0000b", "character 2 is a control character"),
    ],
)
def test_a_config_header_value_that_cannot_be_sent_is_one_line_without_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], value: str, problem: str
) -> None:
    config = tmp_path / "bench.toml"
    config.write_text(
        f'[[endpoint]]\nname = "e"\nbase_url = "{_NOWHERE}"\n'
        f'headers = {{ X-Team = "{value}" }}\n\n[[model]]\nendpoint = "e"\nname = "m"\n',
        encoding="utf-8",
    )
    assert main(["run", "-c", str(config), "--output-dir", str(tmp_path / "out")]) == 2
    line = _error(capsys)
    assert "headers.X-Team" in line and problem in line and "(the value is not shown)" in line
    assert "équipe" not in line and "X-Evil" not in line


def test_the_rule_takes_tabs_and_printable_ascii() -> None:
    assert header_value_problem("Bearer sk-abc\tdef ~!") is None
    assert header_value_problem("a\x7fb") == "character 2 is a control character"


@pytest.mark.parametrize(
    ("line", "where"),
    [
        (
            '{"messages": [{"role": "user", "content": "hi \\ud800 there"}]}',
            "messages[0].content: character 4",
        ),
        ('{"prompt": "\\udfff"}', "prompt: character 1"),
        ('{"id": "x", "turns": ["ok", "bad \\ud83d"]}', "turns[1]: character 5"),
    ],
)
def test_a_lone_surrogate_in_a_prompt_is_one_line_naming_line_key_and_position(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], line: str, where: str
) -> None:
    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"prompt": "fine \\ud83d\\ude00 pair"}\n' + line + "\n", encoding="utf-8")
    argv = ["run", "--base-url", _NOWHERE, "-m", "m", "--prompts", str(prompts)]
    assert main([*argv, "--output-dir", str(tmp_path / "out")]) == 2
    error = _error(capsys)
    assert f"p.jsonl line 2: {where} is a lone surrogate" in error
    assert "there" not in error and not (tmp_path / "out").exists()


def test_a_lone_surrogate_in_a_sharegpt_file_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = tmp_path / "chats.json"
    data.write_text(
        '[{"id": "c1", "conversations": [{"from": "human", "value": "x\\ud800"},'
        ' {"from": "gpt", "value": "y"}]}]',
        encoding="utf-8",
    )
    argv = ["run", "--base-url", _NOWHERE, "-m", "m", "--prompts", str(data)]
    assert main([*argv, "--output-dir", str(tmp_path / "out")]) == 2
    assert "[0].conversations[0].value: character 2 is a lone surrogate" in _error(capsys)
