"""Package fixtures: real inference servers on 127.0.0.1, started once for this package
and stopped when its last test ends (so they hold no memory while the rest of the suite
runs).

- ``llama_servers``: one llama-server per GGUF size in ``GGUF_SHAPES`` (``-t 1 -np 4``),
  name -> :class:`Server`. Idle servers cost memory, not CPU, so all run at once.
- ``hf_server``: one ``transformers serve`` (continuous batching) for every ``HF_SHAPES``
  checkpoint; a request's ``model`` is the checkpoint folder (``Server.models``).
- ``litellm``: a LiteLLM proxy (master key) routing ``gw-llama`` to the 91 M llama-server
  and ``gw-hf`` to the 24 M transformers checkpoint.

Every test module here sets ``pytestmark = pytest.mark.real_server``. A server whose cached install is
missing fails the test under CI and skips it elsewhere, naming ``.ci/real-servers-setup``.
Logs go to ``$TOKRATE_CI_CACHE/logs/`` (kept after the session, for a failed CI run).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from real_servers import models as model_files
from real_servers.paths import ServerMissing, cache_dir, missing
from real_servers.servers import Server, litellm_proxy, llama_server, transformers_server


def _logs() -> Path:
    path = cache_dir() / "logs"
    path.mkdir(parents=True, exist_ok=True)
    return path


@pytest.fixture(scope="package")
def llama_servers() -> Iterator[dict[str, Server]]:
    with contextlib.ExitStack() as stack:
        servers: dict[str, Server] = {}
        try:
            for shape in model_files.GGUF_SHAPES:
                path = model_files.gguf_model(shape)
                log = _logs() / f"llama-{shape.name}.log"
                # 4 slots, each with room for a prompt and the size's max_tokens.
                context = 4 * (model_files.GGUF_MAX_TOKENS[shape.name] + 512)
                server = llama_server(path, shape.name, log, context=context)
                servers[shape.name] = stack.enter_context(server)
        except ServerMissing as exc:
            missing(str(exc))
        yield servers


@pytest.fixture(scope="package")
def hf_server() -> Iterator[Server]:
    try:
        checkpoints = {s.name: model_files.hf_model(s) for s in model_files.HF_SHAPES}
        server = transformers_server(checkpoints, _logs() / "transformers-serve.log")
        with server as srv:
            for folder in srv.models.values():
                # transformers loads a checkpoint, and sets up its paged cache, on the first
                # request for it (tens of seconds on a busy machine): do that here, not
                # inside a measured run and its client timeouts.
                body = {"model": folder, "messages": [{"role": "user", "content": "hi"}]}
                reply = httpx.post(
                    srv.base_url + "/chat/completions",
                    json={**body, "max_tokens": 2},
                    timeout=600.0,
                )
                assert reply.status_code == 200, reply.text
            yield srv
    except ServerMissing as exc:
        missing(str(exc))


@pytest.fixture(scope="package")
def litellm(llama_servers: dict[str, Server], hf_server: Server) -> Iterator[Server]:
    llama = llama_servers["rand-91m"]
    routes = {
        "gw-llama": f"{llama.base_url}|rand-91m",
        "gw-hf": f"{hf_server.base_url}|{hf_server.models['hf-rand-24m']}",
    }
    try:
        with litellm_proxy(routes, _logs() / "litellm.log", _logs() / "litellm.yaml") as srv:
            yield srv
    except ServerMissing as exc:
        missing(str(exc))
