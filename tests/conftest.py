"""Shared fixtures: the real simulator on 127.0.0.1, port 0.

- ``sim_url``: one session-wide simulator (default tiers, ``time_scale=SIM_TIME_SCALE``,
  seed 0, no faults, no key); yields ``"http://127.0.0.1:PORT/v1"``.
- ``start_sim(**SimConfig kwargs)``: a factory for simulators with their own settings
  (faults, api_key, truth_log, tiers_file, tiers, ...); each one is stopped when the
  test ends. Returns the base URL.
- ``start_sim_process(**SimConfig kwargs)``: the same, but the simulator runs in its own
  process (``tokrate sim``), so it shares no GIL or event loop with the test's client;
  use it where a test asserts on timing.
- ``thinker``: an in-process simulator serving ``helpers.sim_wire.THINKER`` (4 reasoning
  then 6 answer tokens); yields (base URL, truth-log path).
- ``http_client``: a plain ``httpx.Client`` (10 s timeout), closed at the end.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from helpers.sim_wire import start_thinker

from tokrate.sim import SimConfig, running_simulator, simulator_process

#: Time scale of the shared simulator: all modelled durations are divided by this.
SIM_TIME_SCALE = 20.0


@pytest.fixture(scope="session")
def sim_url() -> Iterator[str]:
    with running_simulator(SimConfig(time_scale=SIM_TIME_SCALE)) as url:
        yield url


@pytest.fixture
def start_sim() -> Iterator[Callable[..., str]]:
    with contextlib.ExitStack() as stack:

        def start(**kwargs: Any) -> str:
            kwargs.setdefault("time_scale", SIM_TIME_SCALE)
            return stack.enter_context(running_simulator(SimConfig(**kwargs)))

        yield start


@pytest.fixture
def start_sim_process() -> Iterator[Callable[..., str]]:
    with contextlib.ExitStack() as stack:

        def start(**kwargs: Any) -> str:
            kwargs.setdefault("time_scale", SIM_TIME_SCALE)
            return stack.enter_context(simulator_process(SimConfig(**kwargs)))

        yield start


@pytest.fixture
def thinker(start_sim: Callable[..., str], tmp_path: Path) -> tuple[str, Path]:
    return start_thinker(start_sim, tmp_path)


@pytest.fixture
def http_client() -> Iterator[httpx.Client]:
    with httpx.Client(timeout=10) as c:
        yield c
