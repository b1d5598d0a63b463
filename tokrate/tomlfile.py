"""Reading the files a user names. :func:`read_user_file`: a regular file of bounded
size, checked before a byte is read (a FIFO with no writer would hang the run on its
first read; ``/dev/zero`` would be read until the memory is gone), for prompt files and
TOML alike. :func:`read_toml`: a TOML file (a config, a simulator tiers file, a hardware
profile) with every failure one ConfigError line naming the file: missing, a folder,
unreadable, not UTF-8, invalid TOML, nested too deeply, an integer past Python's digit
limit."""

from __future__ import annotations

import os
import stat
import tomllib
from pathlib import Path
from typing import Any

from tokrate.errors import ConfigError

__all__ = ["MAX_TOML_BYTES", "FileRefused", "read_toml", "read_user_file"]

#: A config, tiers file or hardware profile is a few KiB; 16 MiB is no real one.
MAX_TOML_BYTES = 16 << 20


class FileRefused(ValueError):
    """A path that names no regular file of a readable size; the message says why
    ("a FIFO, not a regular file", "2.0 GiB, over the 512 MiB limit")."""


_KINDS = (
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISDIR, "a directory"),
)


def read_user_file(path: Path, limit_bytes: int) -> bytes:
    """The bytes of the regular file ``path`` (symlinks followed), at most
    ``limit_bytes``. The type and size are checked before it is opened, and the read
    stops past the limit (a file that grows while read).

    Raises:
        FileRefused: not a regular file, or larger than ``limit_bytes``.
        OSError: missing, unreadable (callers name the file in one line).
    """
    st = os.stat(path)
    for test, kind in _KINDS:
        if test(st.st_mode):
            raise FileRefused(f"is {kind}, not a regular file")
    if st.st_size > limit_bytes:
        raise FileRefused(f"{_mib(st.st_size)}, over the {_mib(limit_bytes)} limit")
    # O_NONBLOCK: if the path was swapped for a FIFO since the stat, open does not wait
    # for a writer (and the fstat below refuses it).
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise FileRefused("is not a regular file")
        data = f.read(limit_bytes + 1)
    if len(data) > limit_bytes:
        raise FileRefused(f"over the {_mib(limit_bytes)} limit")
    return data


def _mib(n: int) -> str:
    if n < 1 << 20:
        return f"{n:,} bytes"
    return f"{n / (1 << 20):,.1f} MiB" if n < 1 << 30 else f"{n / (1 << 30):,.1f} GiB"


def read_toml(path: Path, where: str, kind: str) -> dict[str, Any]:
    """The parsed document; ``where`` starts every message (usually the path) and
    ``kind`` names what the file is ("config file", "tiers file", ...)."""
    try:
        data = read_user_file(path, MAX_TOML_BYTES)
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
