"""``open_client``: the one place a client implementation is chosen and built."""

from __future__ import annotations

import ssl
from typing import Literal

from tokrate.client.base import CLIENT_KINDS, StreamClient
from tokrate.client.tls import verify_context
from tokrate.errors import ConfigError
from tokrate.spec.types import TimeoutsSpec

__all__ = ["open_client"]


def open_client(
    kind: Literal["fast", "httpx", "openai"] | str,
    *,
    pool_size: int,
    timeouts: TimeoutsSpec,
    ssl_context: ssl.SSLContext | None = None,
    kernel_stamps: str = "auto",
) -> StreamClient:
    """A new client of ``kind`` whose pool holds ``pool_size`` keep-alive connections
    per origin (size it to the load: the client never caps concurrency below it).

    ``ssl_context`` overrides certificate verification for https (tests); without it
    every client verifies by one rule (tokrate.client.tls: SSL_CERT_FILE / SSL_CERT_DIR
    for a private CA).
    ``kernel_stamps`` ("auto" | "on" | "off"): the fast client stamps reads with the
    kernel's receive time where the platform can (tokrate.client.kernel_stamps); the
    httpx and SDK clients always stamp in user space (said in ``notices`` for "on";
    their records say ``stamp_source = "user"`` either way).
    Must be called where the client will be used (any thread); connections open lazily.

    Raises:
        ConfigError: unknown ``kind`` or ``pool_size < 1``; SSL_CERT_FILE or
            SSL_CERT_DIR names no certificates.
    """
    if pool_size < 1:
        raise ConfigError(f"client pool_size must be >= 1, got {pool_size}")
    if ssl_context is None:
        ssl_context = verify_context()
    if kind == "fast":
        from tokrate.client.stream import FastClient

        return FastClient(
            pool_size=pool_size,
            timeouts=timeouts,
            ssl_context=ssl_context,
            kernel_stamps=kernel_stamps,
        )
    client: StreamClient
    if kind == "httpx":
        from tokrate.client.httpx_client import HttpxClient

        client = HttpxClient(pool_size=pool_size, timeouts=timeouts, ssl_context=ssl_context)
    elif kind == "openai":
        from tokrate.client.sdk import SdkClient

        client = SdkClient(pool_size=pool_size, timeouts=timeouts, ssl_context=ssl_context)
    else:
        raise ConfigError(
            f"client.kind: unknown client {kind!r} (choose from {', '.join(CLIENT_KINDS)})"
        )
    if kernel_stamps == "on":  # asked for; "auto" means "where there are any"
        client.notices.append(
            f"the {kind} client stamps reads in user space (stamp_source 'user');"
            ' kernel receive stamps need client.kind = "fast"'
        )
    return client
