"""Secrets by value: canaries put in the environment key, a header with an innocent name,
the base URL's password and a server's in-stream error event reach no output file and
no terminal line; terminal control characters from a server are stripped."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest
from helpers.hostile_server import hostile_server
from helpers.protocol_server import ProtocolServer

KEY = "canary-env-key-7f3a9c"
HEADER = "canary-header-51d2e8"
PASSWORD = "canary-url-pass-90b4"
CONTROLS = ("\x1b[2J", "\x1b]0;", "\x07")


def _texts(run_dir: Path) -> dict[str, str]:
    """Every output file as text; parquet through polars (its pages are compressed)."""
    out = {}
    for path in run_dir.rglob("*"):
        if not path.is_file():
            continue
        if path.suffix == ".parquet":
            frame = pl.read_parquet(path)
            out[path.name] = "\n".join(str(row) for row in frame.iter_rows())
        elif path.suffix in (".json", ".jsonl", ".md", ".html", ".svg"):
            out[path.name] = path.read_text(encoding="utf-8", errors="replace")
    return out


def test_no_secret_reaches_any_output(tmp_path: Path) -> None:
    with hostile_server() as server:
        url = server.base_url("echo_secrets").replace("http://", f"http://user:{PASSWORD}@")
        cfg = tmp_path / "bench.toml"
        cfg.write_text(
            f"""
[[endpoint]]
name = "echo"
base_url = "{url}"
api_key_env = "ECHO_KEY"
headers = {{ "X-Pass" = "{HEADER}", "X-Tenant" = "acme-tenant" }}

[[model]]
endpoint = "echo"
name = "m"

[load]
concurrency = [1]
requests = 3
warmup_requests = 0
""",
            encoding="utf-8",
        )
        env = {**os.environ, "ECHO_KEY": KEY, "COLUMNS": "200"}
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "tokrate",
                "run",
                "-c",
                str(cfg),
                "--output-dir",
                str(tmp_path / "out"),
                "--run-id",
                "echo",
            ],
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
        )
        sent = list(server.requests)
    assert proc.returncode in (0, 1), proc.stderr
    assert "Traceback" not in proc.stderr
    # The key went out as the Bearer token (not the URL's Basic auth), and the server's
    # error events quoted it back.
    auth = [r["headers"].get("authorization") for r in sent if r["path"].endswith("/completions")]
    assert auth and all(a == f"Bearer {KEY}" for a in auth), auth
    files = _texts(tmp_path / "out" / "echo")
    assert {"run.json", "records.jsonl", "records.parquet", "summary.json", "summary.md"} <= set(
        files
    )
    records = pl.read_parquet(tmp_path / "out" / "echo" / "records.parquet")
    messages = [m for m in records["error_message"].to_list() if m]
    assert messages and all("denied" in m and "<redacted>" in m for m in messages), messages
    outputs = {**files, "stdout": proc.stdout, "stderr": proc.stderr}
    for name, text in outputs.items():
        for canary in (KEY, HEADER, PASSWORD):
            assert canary not in text, f"{canary} in {name}"
        for control in CONTROLS:
            assert control not in text, f"{control!r} in {name}"
    assert "acme-tenant" in files["run.json"]  # only secrets go, not every header value


@pytest.mark.parametrize(
    ("api", "client"),
    [
        ("chat", "fast"),
        ("chat", "httpx"),
        ("chat", "openai"),
        ("anthropic", "fast"),
        ("responses", "httpx"),
    ],
)
def test_a_key_echoed_as_the_model_name_is_redacted(tmp_path: Path, api: str, client: str) -> None:
    """A server that answers as model '<the caller's key>' (and puts it in the response
    id): the key is in no record, no file and no terminal line, live warning included."""
    with ProtocolServer(itl_ms=1) as server:
        cfg = tmp_path / "bench.toml"
        cfg.write_text(
            f"""
[[endpoint]]
name = "echo"
base_url = "{server.url("echo_key")}"
api_key_env = "ECHO_KEY"
api = "{api}"

[[model]]
endpoint = "echo"
name = "m"

[client]
kind = "{client}"

[load]
concurrency = [1]
requests = 3
warmup_requests = 0
""",
            encoding="utf-8",
        )
        env = {**os.environ, "ECHO_KEY": KEY, "COLUMNS": "200"}
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "tokrate",
                "run",
                "-c",
                str(cfg),
                "--output-dir",
                str(tmp_path / "out"),
                "--run-id",
                "echo",
            ],
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
        )
        sent = [r for r in server.requests if r["body"].get("stream")]
    assert proc.returncode in (0, 1), proc.stderr
    assert "Traceback" not in proc.stderr
    assert sent and all(KEY in str(r["headers"]) for r in sent)  # the key did go out
    records = pl.read_parquet(tmp_path / "out" / "echo" / "records.parquet")
    assert records.height == 3 and set(records["status"]) == {"ok"}, records
    # The echoed value is the whole header: "Bearer <key>" or, for anthropic, the key.
    for column in ("response_model", "response_id"):
        assert all("<redacted>" in value for value in records[column]), records[column]
    outputs = {**_texts(tmp_path / "out" / "echo"), "stdout": proc.stdout, "stderr": proc.stderr}
    for name, text in outputs.items():
        assert KEY not in text, f"the key in {name}"
    assert "<redacted>', not the 'm' requested" in " ".join((proc.stdout + proc.stderr).split())


def test_sim_api_key_given_as_a_value_is_not_echoed() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "tokrate", "sim", "--api-key", "sk-live-canary-123456789"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert "canary" not in proc.stderr and "Traceback" not in proc.stderr
    assert "NAME of an environment variable" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_a_message_cut_inside_a_secret_keeps_no_part_of_it() -> None:
    from tokrate.redact import REDACTED, redact_text

    secret = "abcdefgh12345678"
    assert redact_text(f"echo {secret}"[:14], [secret]) == f"echo {REDACTED}"
    assert redact_text(f"echo {secret}"[:12] + "...", [secret]) == f"echo {REDACTED}..."
    assert redact_text("echo abc", [secret]) == "echo abc"  # 3 chars: too short to tell
