"""EMFILE / ENFILE is the client's ``not_sent`` in every client's classifier, never the
server's ``connect`` (issue 41, item 5). The fast client is run out of descriptors for
real in tests/processes/test_open_files.py; here the exception chains the httpx and
openai paths raise (httpcore maps the OSError into httpx.ConnectError ``from`` it, the
SDK wraps that in APIConnectionError) go through the same classifiers."""

from __future__ import annotations

import errno
import os

import httpx
import openai
import pytest

from tokrate.client.failures import (
    classify_exception,
    classify_httpx_exception,
    out_of_descriptors,
)


def _raised(outer: BaseException, inner: BaseException) -> BaseException:
    try:
        try:
            raise inner
        except OSError as exc:
            raise outer from exc
    except BaseException as caught:  # the chain is what is tested
        return caught


@pytest.mark.parametrize("code", [errno.EMFILE, errno.ENFILE])
def test_a_full_file_table_behind_any_client_error_is_not_sent(code: int) -> None:
    no_fd = OSError(code, os.strerror(code))
    request = httpx.Request("POST", "http://127.0.0.1:9/v1/chat/completions")
    connect = _raised(httpx.ConnectError("cannot connect", request=request), no_fd)
    sdk = _raised(openai.APIConnectionError(request=request), connect)  # type: ignore[arg-type]
    for exc in (connect, sdk):
        assert out_of_descriptors(exc) is not None
        cls, message = classify_httpx_exception(exc, got_headers=False)
        assert cls == "not_sent", message
        assert "no file descriptor left" in message and "ulimit -n" in message
    cls, message = classify_exception(no_fd, connected=False)
    assert cls == "not_sent" and os.strerror(code) in message


def test_other_connect_failures_stay_the_servers() -> None:
    refused = ConnectionRefusedError(errno.ECONNREFUSED, "Connection refused")
    assert out_of_descriptors(refused) is None
    assert classify_exception(refused, connected=False)[0] == "connect"
