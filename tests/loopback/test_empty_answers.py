"""An ok request that streamed no content (transformers serve once streamed 64 tokens
of empty text and counted them in its usage) is an empty answer: a warning names the
target and the tokens the server counted, those tokens stay out of throughput, and the
request misses every SLO (docs/definitions.md "empty answer").

Against the hostile server's ``ok`` mode with option ``empty`` (every content delta
"", the usage still counting the tokens) beside a normal endpoint on the same server.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest
from helpers.hostile_server import HostileServer

from tokrate.cli import main


@pytest.fixture(scope="module")
def hostile() -> Iterator[HostileServer]:
    with HostileServer() as s:
        yield s


def test_an_empty_answer_warns_and_its_tokens_do_not_count(
    hostile: HostileServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "bench.toml"
    config.write_text(
        f'[[endpoint]]\nname = "fine"\nbase_url = "{hostile.base_url("ok", tokens=4)}"\n\n'
        f'[[endpoint]]\nname = "blank"\nbase_url = "{hostile.base_url("ok", tokens=4, empty=1)}"'
        '\n\n[[model]]\nname = "m"\nendpoint = "fine"\n\n[[model]]\nname = "m"\n'
        'endpoint = "blank"\n\n[slo]\nttft_s = 10.0\n'
        # Only the chat set: a checked prompt keeps its own larger limit, which this
        # 4-token server answers with 'length' (docs/quality.md).
        '\n[prompts]\nsets = ["chat"]\n',
        encoding="utf-8",
    )
    argv = [
        "run",
        "-c",
        str(config),
        "--output-dir",
        str(tmp_path),
        "--no-report",
        "--requests",
        "3",
        "--max-tokens",
        "4",
        "--run-id",
        "r",
    ]
    code = main(argv)
    err = capsys.readouterr().err
    assert code == 0, err
    run_dir = tmp_path / "r"
    line = (
        "target blank/m: 3 of 3 ok requests streamed no content (no answer, reasoning or"
        " tool-call text) although the server counted 12 output tokens for them; their"
        " tokens are left out of throughput and they miss every SLO: check the server's"
        " chat template and detokenizer with one request by hand"
    )
    warnings = orjson.loads((run_dir / "run.json").read_bytes())["warnings"]
    assert line in warnings
    assert not [w for w in warnings if w.startswith("target fine/m")]
    assert "streamed no content" in err
    groups = {
        g["endpoint"]: g for g in orjson.loads((run_dir / "summary.json").read_bytes())["groups"]
    }
    blank, fine = groups["blank"], groups["fine"]
    # Still ok (the HTTP exchange succeeded), but nothing delivered: no tokens, no SLO.
    assert blank["counts"]["ok"] == 3 and blank["output_tokens_total"] == 0
    assert blank["aggregate_output_tps"] == 0 and blank["slo_met_fraction"] == 0
    assert blank["ttft_s"]["n"] == 0
    assert fine["counts"]["ok"] == 3 and fine["output_tokens_total"] == 12
    assert fine["slo_met_fraction"] == 1.0 and fine["aggregate_output_tps"] > 0
