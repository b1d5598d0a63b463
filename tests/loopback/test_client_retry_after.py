"""A 429's Retry-After reaches the record on every client path (the retry policy reads it)."""

from __future__ import annotations

import pytest
import uvloop
from helpers.requests import record, request

from tokrate.client.accumulate import parse_retry_after
from tokrate.client.factory import open_client
from tokrate.sim.server import SimConfig, running_simulator
from tokrate.spec.types import TimeoutsSpec


@pytest.mark.parametrize("kind", ["fast", "httpx", "openai"])
def test_429_retry_after_is_recorded(kind: str) -> None:
    cfg = SimConfig(time_scale=20.0, faults="http_429=1.0:retry_after=3")
    with running_simulator(cfg) as base:
        req = request(base, "sim-1b", ignore_eos=True, max_tokens=4)

        async def main() -> object:
            client = open_client(kind, pool_size=1, timeouts=TimeoutsSpec())  # type: ignore[arg-type]
            try:
                return await client.stream(req)
            finally:
                await client.aclose()

        result = uvloop.run(main())
    rec = record(result)  # type: ignore[arg-type]
    assert rec.status == "error"
    assert rec.error_class == "http_429"
    assert rec.http_status == 429
    assert rec.extra["retry_after_s"] == 3.0


@pytest.mark.parametrize(
    ("header", "expected"),
    [("2", 2.0), (" 0.5 ", 0.5), ("-4", 0.0), ("soon", None), ("inf", None)],
)
def test_parse_retry_after(header: str, expected: float | None) -> None:
    assert parse_retry_after(header) == expected


def test_parse_retry_after_http_date_in_the_past_is_zero() -> None:
    assert parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT") == 0.0
