"""A request the simulator refuses: :class:`BadRequest`, with the fields of OpenAI's
error object, which each protocol's route answers in its own shape
(:meth:`tokrate.sim.apis.Api.error`)."""

from __future__ import annotations

__all__ = ["BadRequest", "invalid", "model_not_found"]


class BadRequest(Exception):
    """A request the simulator refuses, with the fields of OpenAI's error object."""

    def __init__(self, status: int, message: str, type_: str, param: str | None, code: str | None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.type_ = type_
        self.param = param
        self.code = code


def invalid(message: str, param: str | None = None, code: str | None = None) -> BadRequest:
    return BadRequest(400, message, "invalid_request_error", param, code)


def model_not_found(name: str) -> BadRequest:
    return BadRequest(
        404,
        f"The model {name!r} does not exist or you do not have access to it.",
        "invalid_request_error",
        "model",
        "model_not_found",
    )
