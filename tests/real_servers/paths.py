"""Where the cached real-server installs live, and what a missing one means.

``.ci/real-servers-setup`` installs each part into its own venv under the cache (default
``~/.cache/tokrate-ci``, or ``$TOKRATE_CI_CACHE``) and writes a ``.ready`` stamp last.
A part without its stamp is *missing*: under CI (``CI=true``) that fails the test, since
.ci/run installs every part first; elsewhere the test is skipped with one line naming
the setup command, so ``python -m pytest`` works on a machine that never built them.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

SETUP_SCRIPT = ".ci/real-servers-setup"


class ServerMissing(Exception):
    """A cached install is absent or incomplete; the message names the setup command."""


def cache_dir() -> Path:
    return Path(os.environ.get("TOKRATE_CI_CACHE", Path.home() / ".cache" / "tokrate-ci"))


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() in {"1", "true", "yes"}


def venv_dir(part: str) -> Path:
    return cache_dir() / part / "venv"


def require_python(part: str) -> Path:
    """The interpreter of the cached venv ``part`` (modelgen, llama, transformers, litellm)."""
    venv = venv_dir(part)
    if not (venv / ".ready").exists():
        raise ServerMissing(f"{part} is not installed in {venv}: run {SETUP_SCRIPT} {part}")
    return venv / "bin" / "python"


def missing(reason: str) -> None:
    """Fail under CI, skip elsewhere (one line naming the setup script)."""
    if in_ci():
        pytest.fail(f"real server missing under CI: {reason}", pytrace=False)
    pytest.skip(reason)
