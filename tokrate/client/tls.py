"""The certificates every client verifies an https server with: one rule for the
fast, httpx and openai clients, the pre-flight and the metrics scrape.

A private CA is named by the standard variables: ``SSL_CERT_FILE`` (a PEM bundle)
and/or ``SSL_CERT_DIR`` (a folder of hashed certificates, as ``c_rehash`` makes it);
when either is set, only what they name is trusted. Without them, the system's store
and certifi's roots are (httpx alone trusted only certifi's, the fast client only the
system's; and httpx read only one of the two variables when both were set).
"""

from __future__ import annotations

import os
import ssl

from tokrate.errors import ConfigError

__all__ = ["verify_context"]


def verify_context() -> ssl.SSLContext:
    """A new client-side TLS context by the rule above (hostnames checked).

    Raises:
        ConfigError: SSL_CERT_FILE or SSL_CERT_DIR names nothing readable as
            certificates (one line naming the variable and its path).
    """
    cafile = os.environ.get("SSL_CERT_FILE") or None
    capath = os.environ.get("SSL_CERT_DIR") or None
    if cafile is None and capath is None:
        ctx = ssl.create_default_context()
        try:
            import certifi
        except ImportError:  # pragma: no cover - httpx depends on it
            return ctx
        ctx.load_verify_locations(cafile=certifi.where())
        return ctx
    if capath is not None and not os.path.isdir(capath):
        raise ConfigError(f"SSL_CERT_DIR={capath}: not a folder of certificates")
    try:
        return ssl.create_default_context(cafile=cafile, capath=capath)
    except (OSError, ssl.SSLError) as err:
        reason = getattr(err, "strerror", None) or getattr(err, "reason", None) or err
        raise ConfigError(
            f"SSL_CERT_FILE={cafile}: cannot load its certificates ({reason});"
            " it names a PEM file of the CA certificates to trust"
        ) from None
