"""Atomic file replacement: the one way tokrate rewrites a file a reader may open.

``write_atomic`` writes a temporary file beside the target, fsyncs it and renames it
over the target, so a reader (or a crash) sees either the old or the new content,
never half of one. The temporary name carries the process id, so two processes
writing the same file (two runs moving one ``latest-good`` pointer) never share one.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

__all__ = ["path_exists", "path_is_dir", "write_atomic"]


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


def write_atomic(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` atomically. Raises OSError (callers turn it into
    their one-line error naming the file)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
