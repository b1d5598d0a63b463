"""Reading the TOML files a user names. :func:`read_toml`: a TOML file (a config, a
simulator tiers file, a hardware profile) read through the one guard
(:func:`tokrate.fileio.read_regular`: a regular file of bounded size), with every failure
one ConfigError line naming the file: missing, a folder, not a regular file, too large,
unreadable, not UTF-8, invalid TOML, nested too deeply, an integer past Python's digit
limit."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

from tokrate.errors import ConfigError
from tokrate.fileio import FileRefused, read_regular

__all__ = ["MAX_TOML_BYTES", "read_toml"]

#: A config, tiers file or hardware profile is a few KiB; 16 MiB is no real one.
MAX_TOML_BYTES = 16 << 20


def read_toml(path: Path, where: str, kind: str) -> dict[str, Any]:
    """The parsed document; ``where`` starts every message (usually the path) and
    ``kind`` names what the file is ("config file", "tiers file", ...)."""
    try:
        data = read_regular(path, MAX_TOML_BYTES)
    except FileRefused as err:
        raise ConfigError(f"{where}: {kind} {err}") from None
    except FileNotFoundError:
        raise ConfigError(f"{where}: {kind} not found") from None
    except IsADirectoryError:
        raise ConfigError(f"{where}: is a directory, not a {kind}") from None
    except (OSError, ValueError) as err:  # ValueError: a NUL byte in the path
        reason = getattr(err, "strerror", None) or str(err)
        raise ConfigError(f"{where}: cannot read {kind} ({reason})") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        line = data[: err.start].count(b"\n") + 1
        raise ConfigError(f"{where}: line {line}: not valid UTF-8") from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        message = str(err).splitlines()[0] if str(err) else "invalid TOML"
        raise ConfigError(f"{where}: invalid TOML: {message}") from None
    except RecursionError:
        # tomllib parses nested arrays and inline tables recursively.
        raise ConfigError(f"{where}: invalid TOML: arrays or tables nested too deeply") from None
    except ValueError as err:
        # Python's int-to-str limit (4300 digits), raised from inside tomllib.
        message = str(err).splitlines()[0] if str(err) else "invalid value"
        raise ConfigError(f"{where}: invalid TOML: {message}") from None
