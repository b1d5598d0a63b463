"""``open_client``: the one place a client implementation is chosen and built."""

from __future__ import annotations

import ssl
from typing import Literal

from tokrate.client.base import CLIENT_KINDS, StreamClient
from tokrate.errors import ConfigError
from tokrate.spec import TimeoutsSpec

__all__ = ["open_client"]


def open_client(
    kind: Literal["fast", "httpx", "openai"] | str,
    *,
    pool_size: int,
    timeouts: TimeoutsSpec,
    ssl_context: ssl.SSLContext | None = None,
) -> StreamClient:
    """A new client of ``kind`` whose pool holds ``pool_size`` keep-alive connections
    per origin (size it to the load: the client never caps concurrency below it).

    ``ssl_context`` overrides certificate verification for https (tests, private CAs).
    Must be called where the client will be used (any thread); connections open lazily.

    Raises:
        ConfigError: unknown ``kind`` or ``pool_size < 1``.
    """
    if pool_size < 1:
        raise ConfigError(f"client pool_size must be >= 1, got {pool_size}")
    if kind == "fast":
        from tokrate.client.stream import FastClient

        return FastClient(pool_size=pool_size, timeouts=timeouts, ssl_context=ssl_context)
    if kind == "httpx":
        from tokrate.client.httpx_client import HttpxClient

        return HttpxClient(pool_size=pool_size, timeouts=timeouts, ssl_context=ssl_context)
    if kind == "openai":
        from tokrate.client.sdk import SdkClient

        return SdkClient(pool_size=pool_size, timeouts=timeouts, ssl_context=ssl_context)
    raise ConfigError(
        f"client.kind: unknown client {kind!r} (choose from {', '.join(CLIENT_KINDS)})"
    )
