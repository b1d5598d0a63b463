"""One exception tree for tokrate.

Everything tokrate raises on purpose derives from :class:`TokrateError`. The CLI
translates these, and only these, into a one-line message and an exit code; any other
exception is a bug.
"""

from __future__ import annotations

__all__ = [
    "ConfigError",
    "EndpointUnreachable",
    "FinishError",
    "ModelNotServed",
    "OutputError",
    "PromptError",
    "RunFolderError",
    "SimulatorError",
    "TokrateError",
    "UsageError",
    "unwrap_tokrate_error",
]


class TokrateError(Exception):
    """Base of every deliberate tokrate error.

    ``exit_code`` is what the CLI exits with; ``str(err)`` is a single line that names
    the file, key, line or request at fault.
    """

    exit_code: int = 1


class UsageError(TokrateError):
    """Bad command-line usage (unknown flag value, conflicting options)."""

    exit_code = 2


class ConfigError(TokrateError):
    """A config file or value is wrong; the message names the file and key."""

    exit_code = 2


class PromptError(TokrateError):
    """A prompt file is unreadable or malformed; the message names file and line."""

    exit_code = 2


class ModelNotServed(ConfigError):
    """Pre-flight: an endpoint does not serve a model the run asks for (its /models list
    lacks it, or a one-token request for it got 404); nothing was sent."""


class EndpointUnreachable(TokrateError):
    """An endpoint failed its readiness check before any load was sent."""

    exit_code = 2


class OutputError(TokrateError):
    """The output folder cannot be created or written (checked before any load)."""

    exit_code = 2


class RunFolderError(TokrateError):
    """A run folder is missing, unreadable, or of an unsupported schema version."""

    exit_code = 2


class FinishError(TokrateError):
    """A step after the load failed in the finishing process (tokrate.finish): the
    run's files could not be finished, or the baseline check could not run. The
    message is that step's one line; ``exit_code`` is its error's (the child reports
    it, the class it had stays in that process). The records are saved either way.
    Also raised when a capacity search's judging child (tokrate.finish.probe_judge)
    fails: the search cannot decide its probes without it."""

    def __init__(self, message: str, exit_code: int = 1) -> None:
        super().__init__(message)
        self.exit_code = exit_code


class SimulatorError(TokrateError):
    """The simulator cannot start (e.g. a tier does not fit its GPUs)."""

    exit_code = 2


def unwrap_tokrate_error(exc: BaseException) -> BaseException:
    """The exception to surface for one that may be an (anyio) ExceptionGroup.

    Task groups wrap what their tasks raise in (nested) ExceptionGroups; when every leaf
    is a deliberate TokrateError, the first leaf is returned, so the CLI prints its one
    line rather than a traceback. Anything else is returned unchanged.
    """
    if isinstance(exc, BaseExceptionGroup):
        leaves: list[BaseException] = []
        stack: list[BaseException] = [exc]
        while stack:
            e = stack.pop(0)
            if isinstance(e, BaseExceptionGroup):
                stack[:0] = list(e.exceptions)
            else:
                leaves.append(e)
        if leaves and all(isinstance(e, TokrateError) for e in leaves):
            return leaves[0]
    return exc
