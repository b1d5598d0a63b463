"""The redactor's bearer shape: credentials go, a server's own words stay."""

from __future__ import annotations

import pytest

from tokrate.redact import redact_text


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Missing bearer token in header", "Missing bearer token in header"),
        ("Missing bearer authentication in header.", "Missing bearer authentication in header."),
        ("Bearer token required", "Bearer token required"),
        ('WWW-Authenticate: Bearer realm="api", error="invalid_token"', 'WWW-Authenticate: Bearer realm="api", error="invalid_token"'),
        ("Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.e30.sig", "Authorization: Bearer <redacted>"),
        ("Bearer abc", "Bearer <redacted>"),
        ("bearer Tokenabc", "bearer <redacted>"),
        ("Bearer token=abcd1234secret", "Bearer <redacted>"),
        ("Bearer <redacted>", "Bearer <redacted>"),
    ],
)  # fmt: skip
def test_bearer_values_are_redacted_and_words_are_not(text: str, expected: str) -> None:
    assert redact_text(text) == expected
