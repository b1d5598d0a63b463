"""Every file tokrate writes, and the one guard every file it reads back goes through.

Writing (a run folder may be a CI artifact from elsewhere, so nothing in it is trusted):

- :func:`write_atomic` / :func:`write_atomic_with`: the new content goes to a temporary
  file created beside the target with ``O_CREAT | O_EXCL | O_NOFOLLOW`` under a random
  name (a name planted in advance, a symlink or a file, makes the create fail and
  another name is drawn), is fsynced and renamed over the target. A reader (or a crash)
  sees the old content or the new, never half of one, and an existing path is never
  opened to write: a symlink at the target's name is replaced, not followed.
- :func:`create_new`: a file that must not exist yet (records.jsonl), opened for
  appending with the same flags.
- :func:`open_log`: the one file appended to by design, a log the user names (the
  simulator's truth log): created when missing, never opened through a symlink
  (``O_NOFOLLOW``), refused when it is not a regular file.
- :func:`make_folder`: a folder tokrate writes into (charts/), refused when the name is
  a symlink out of the folder it belongs to, or not a folder.

Reading: :func:`read_regular` (and :func:`open_regular` for readers that take a file)
checks before a byte is read that the path is a regular file of at most a given size
(a FIFO with no writer would hang the reader on its first read; ``/dev/zero`` would be
read until the memory is gone), opens it without blocking, checks again on the open
descriptor, and stops reading past the limit (a file that grows while read).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import stat
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import BinaryIO, Final

__all__ = [
    "FileRefused",
    "create_new",
    "cut_after_last_line",
    "make_folder",
    "open_log",
    "open_regular",
    "path_exists",
    "path_is_dir",
    "read_regular",
    "size_text",
    "write_atomic",
    "write_atomic_with",
]

#: Flags of every file tokrate creates: a new name only, never through a link, not
#: inherited by a child process.
_CREATE: Final = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
#: Temporary names drawn before giving up (each is 64 random bits: a clash is a name
#: someone planted, and a hostile folder cannot plant all of them).
_TEMP_TRIES: Final = 16
#: Characters of the target's name kept in its temporary name (NAME_MAX is 255 bytes).
_NAME_CHARS: Final = 160


class FileRefused(ValueError):
    """A path that names no regular file of a readable size, or a folder tokrate will
    not write into; the message says why ("is a FIFO (named pipe), not a regular
    file", "2.0 GiB, over the 512.0 MiB limit", "is a symlink")."""


def path_is_dir(path: Path) -> bool:
    """``path.is_dir()``, False for a path the OS cannot even look up (a name over
    its length limit, a NUL byte), which pathlib raises for instead: such a path is
    reported as missing, one line, never a traceback."""
    try:
        return path.is_dir()
    except (OSError, ValueError):
        return False


def path_exists(path: Path) -> bool:
    """``path.exists()``, False for a path the OS cannot look up (see path_is_dir)."""
    try:
        return path.exists()
    except (OSError, ValueError):
        return False


# --- writing ------------------------------------------------------------------------------


def _create_temp(path: Path) -> tuple[Path, int]:
    """A new temporary file beside ``path`` (module doc) and its descriptor."""
    for _ in range(_TEMP_TRIES):
        tmp = path.with_name(f".{path.name[:_NAME_CHARS]}.{secrets.token_hex(8)}.tmp")
        try:
            return tmp, os.open(tmp, _CREATE, 0o644)
        except FileExistsError:
            continue
    raise FileExistsError(f"{path}: {_TEMP_TRIES} temporary names beside it were all taken")


def write_atomic_with(path: Path, write: Callable[[BinaryIO], None]) -> None:
    """Replace ``path`` atomically with what ``write`` writes into the file object it
    is given (a parquet writer, a chart): module doc. Raises OSError (callers turn it
    into their one-line error naming the file); the temporary file is removed on any
    failure."""
    tmp, fd = _create_temp(path)
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise


def write_atomic(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` atomically (module doc). Raises OSError."""

    def write(f: BinaryIO) -> None:
        f.write(data)

    write_atomic_with(path, write)


def create_new(path: Path) -> int:
    """A descriptor of the new, empty file ``path``, opened for appending (module doc).
    Raises OSError: FileExistsError when anything (a file, a link) has that name."""
    return os.open(path, _CREATE | os.O_APPEND, 0o644)


def open_log(path: Path) -> BinaryIO:
    """``path`` opened for appending (module doc). Raises FileRefused (not a regular
    file), OSError (a symlink: ELOOP; unwritable)."""
    fd = os.open(
        path,
        os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK,
        0o644,
    )
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise FileRefused("is not a regular file")
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return os.fdopen(fd, "ab")


def cut_after_last_line(fd: int, path: Path) -> None:
    """Truncate the file ``path`` (open for writing as ``fd``, e.g. from
    :func:`create_new`) to its last whole line: what follows the last newline is a line
    a refused write left half-written. Raises OSError."""
    size = os.fstat(fd).st_size
    end = size
    with open_regular(path, size) as f:
        while end > 0:
            start = max(0, end - 65536)
            f.seek(start)
            newline = f.read(end - start).rfind(b"\n")
            if newline >= 0:
                end = start + newline + 1
                break
            end = start
    if end < size:
        os.ftruncate(fd, end)


def make_folder(path: Path, *, inside: Path | None = None) -> None:
    """Create the folder ``path`` (and its parents) unless it is one already. A symlink
    at that name is followed only when it leads to a folder below ``inside`` (a run
    folder's own ``charts -> drawn``); any other link is refused: writing through it
    would put files wherever it points.

    Raises:
        FileRefused: a symlink out of ``inside`` (or any symlink without ``inside``),
            or a name that is not a folder.
        OSError: the folder cannot be created.
    """
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        path.mkdir(parents=True, exist_ok=True)
        st = os.lstat(path)  # created, or raced by another process: look again
    if stat.S_ISLNK(st.st_mode):
        target = path.resolve()
        if inside is None or not target.is_relative_to(inside.resolve()):
            where = f"outside {inside}" if inside is not None else "elsewhere"
            raise FileRefused(
                f"is a symlink to {target}, {where}; not writing through it (remove the link)"
            )
        st = os.stat(path)
    if not stat.S_ISDIR(st.st_mode):
        raise FileRefused("is not a folder")


# --- reading ------------------------------------------------------------------------------

_KINDS: Final = (
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISDIR, "a directory"),
)


@contextlib.contextmanager
def open_regular(path: Path, limit_bytes: int) -> Iterator[BinaryIO]:
    """The regular file ``path`` (symlinks followed) opened for reading, at most
    ``limit_bytes`` long. The type and size are checked before it is opened and again
    on the open descriptor (module doc).

    Raises:
        FileRefused: not a regular file, or larger than ``limit_bytes``.
        OSError: missing, unreadable (callers name the file in one line).
    """
    st = os.stat(path)
    _check(st, limit_bytes)
    # O_NONBLOCK: if the path was swapped for a FIFO since the stat, open does not wait
    # for a writer (and the fstat below refuses it).
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    with os.fdopen(fd, "rb") as f:
        _check(os.fstat(fd), limit_bytes)
        yield f


def _check(st: os.stat_result, limit_bytes: int) -> None:
    for test, kind in _KINDS:
        if test(st.st_mode):
            raise FileRefused(f"is {kind}, not a regular file")
    if not stat.S_ISREG(st.st_mode):
        raise FileRefused("is not a regular file")
    if st.st_size > limit_bytes:
        raise FileRefused(f"{size_text(st.st_size)}, over the {size_text(limit_bytes)} limit")


def read_regular(path: Path, limit_bytes: int) -> bytes:
    """The bytes of the regular file ``path``, at most ``limit_bytes`` (see
    :func:`open_regular`; the read stops past the limit, for a file that grows while
    read). Raises FileRefused or OSError."""
    with open_regular(path, limit_bytes) as f:
        data = f.read(limit_bytes + 1)
    if len(data) > limit_bytes:
        raise FileRefused(f"over the {size_text(limit_bytes)} limit")
    return data


def size_text(n: int) -> str:
    """A byte count as a reader says it: "1,234 bytes", "12.5 MiB", "3.0 GiB"."""
    if n < 1 << 20:
        return f"{n:,} bytes"
    return f"{n / (1 << 20):,.1f} MiB" if n < 1 << 30 else f"{n / (1 << 30):,.1f} GiB"
