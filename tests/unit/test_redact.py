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


def test_the_pass_rate_bar_is_not_a_password() -> None:
    """issue 38: `[slo] min_pass_rate` (and per task) is shown as written in run.json
    and the report; an X-Pass header or a password field still is redacted."""
    from tokrate.redact import REDACTED, Redactor, is_secret_name

    assert not is_secret_name("min_pass_rate") and not is_secret_name("min_pass_rate_by_task")
    assert is_secret_name("X-Pass") and is_secret_name("db_password")
    slo = {"min_pass_rate": 0.9, "min_pass_rate_by_task": {"extraction": 0.95}}
    assert Redactor().value({"slo": slo}) == {"slo": slo}
    assert Redactor().value({"password": "hunter22"}) == {"password": REDACTED}
