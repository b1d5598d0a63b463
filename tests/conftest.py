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
- ``shared_default_run``: the real default ``tokrate run`` (~40 s of real time), once per
  worker, for the modules of the ``default_run`` unit (``helpers.default_run``).

Under pytest-xdist (``-n auto --dist loadscope``, the default addopts) each test goes
to whichever worker is free, except the tests of a module that declares a module-,
class- or package-scoped fixture (sent whole to one worker, so the fixture is built
once) and a few modules that go together (:data:`_SHARED_UNITS`): every real-server
test to one worker (the package's servers start once, never twice at a time), every
Ray test, local or multi-node, to one worker (``ray="auto"`` finds the cluster that is
running, which must be its own test's), and the modules that read the real default run
to one worker (it runs once).
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import httpx
import pytest
from helpers.sim_wire import start_thinker

from tokrate.sim.server import SimConfig, running_simulator, simulator_process

if TYPE_CHECKING:
    from helpers.default_run import DefaultRun

#: Time scale of the shared simulator: all modelled durations are divided by this.
SIM_TIME_SCALE = 20.0


#: Work units that span modules: the modules (or folders) whose tests one xdist worker
#: runs one after another.
_SHARED_UNITS: Final = {
    "real_server": ("tests/real_servers/",),
    "ray": ("tests/cluster/", "tests/processes/test_ray.py"),
    "default_run": (
        "tests/loopback/test_run_default.py",
        "tests/processes/test_report_chromium.py",
    ),
}
#: The folder that holds no ``slow`` test (its answer stays under a minute).
_QUICK_FOLDER: Final = "tests/unit/"
#: The unit a test with this marker must be in.
_UNIT_OF_MARKER: Final = {"real_server": "real_server", "ray": "ray", "cluster": "ray"}


#: How a module declares a fixture it shares between its tests (ruff keeps the quotes).
_SHARED_FIXTURE: Final = re.compile(r'scope="(?:module|class|package)"')
#: Node ids are relative to the repository root (pyproject.toml's folder).
_ROOT: Final = Path(__file__).resolve().parents[1]


@functools.cache
def _shares_a_fixture(path: str) -> bool:
    """Whether the test module at ``path`` declares a module-, class- or package-scoped
    fixture (no conftest below tests/ outside a shared unit does)."""
    try:
        return _SHARED_FIXTURE.search((_ROOT / path).read_text(encoding="utf-8")) is not None
    except OSError:
        return True


def _work_unit(nodeid: str) -> str:
    """The xdist work unit of a test: the shared unit its path is in; else its module,
    where the module shares a fixture between its tests; else the test alone."""
    path = nodeid.split("::", 1)[0]
    shared = next((u for u, prefixes in _SHARED_UNITS.items() if path.startswith(prefixes)), None)
    if shared is not None:
        return shared
    return path if _shares_a_fixture(path) else nodeid


def pytest_configure(config: pytest.Config) -> None:
    """One polars thread per process (``POLARS_MAX_THREADS``, unless set): xdist already
    runs a worker per core, and each worker's polars pool, a thread per core, only
    oversubscribed the cores for the suite's small frames (summaries, reports: 20-25%
    slower per query on the busy 2-core machine). Set before the first query, which
    builds the pool; the processes the tests start inherit it.

    Bytecode: where ``PYTHONDONTWRITEBYTECODE`` is set (this machine's shells set it),
    every process a test starts (each run's finishing child, each ``tokrate`` command,
    simulator and worker process) compiled tokrate's sources anew: ~0.8 CPU-s for a
    finishing child's imports, paid by hundreds of runs. The caches go to a folder of
    their own outside the tree instead (``PYTHONPYCACHEPREFIX``), unless one is set, so
    the tree stays as clean as the setting meant it to."""
    os.environ.setdefault("POLARS_MAX_THREADS", "1")
    if os.environ.get("PYTHONDONTWRITEBYTECODE") and not os.environ.get("PYTHONPYCACHEPREFIX"):
        prefix = str(Path(tempfile.gettempdir()) / f"tokrate-tests-pycache-{os.getuid()}")
        del os.environ["PYTHONDONTWRITEBYTECODE"]
        os.environ["PYTHONPYCACHEPREFIX"] = prefix
        sys.pycache_prefix = prefix
        sys.dont_write_bytecode = False


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """``--dist loadscope`` with the work units of :func:`_work_unit`: a module with a
    shared fixture runs whole on one worker, in order (the fixture is built once), and
    each shared unit's modules too; any other test goes alone to the first free
    worker. The controller sees node ids only, so the units are named by path;
    :func:`pytest_collection_modifyitems` checks the shared ones against the markers."""
    if config.getvalue("dist") != "loadscope":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class KindScheduling(LoadScopeScheduling):  # type: ignore[misc]
        def _split_scope(self, nodeid: str) -> str:
            return _work_unit(nodeid)

    return KindScheduling(config, log)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A test marked ``real_server``, ``ray`` or ``cluster`` must sit in its shared unit
    (a Ray test run beside another worker's Ray cluster would join that one); a ``slow``
    test must not sit in tests/unit. The units that cannot be split start first, the
    longest kinds first (each test keeps its place within its unit): the shared units
    (the real servers take minutes), then every unit holding a ``slow`` test, then the
    other modules with a shared fixture; the single tests last, to fill the gaps.
    Started late, a long unit would leave one worker idle while the other finished it
    (the 200-run history module, ~1 min, came last)."""
    for item in items:
        if item.get_closest_marker("slow") and item.nodeid.startswith(_QUICK_FOLDER):
            # tests/unit is the folder a developer runs after every change: it answers
            # in under a minute only while nothing slow joins it.
            raise pytest.UsageError(
                f"{item.nodeid}: a 'slow' test does not belong in {_QUICK_FOLDER} "
                "(tests/README.md: where a test goes)"
            )
        for marker, unit in _UNIT_OF_MARKER.items():
            if item.get_closest_marker(marker) and _work_unit(item.nodeid) != unit:
                raise pytest.UsageError(
                    f"{item.nodeid}: a {marker!r} test must live under "
                    f"{' or '.join(_SHARED_UNITS[unit])} (tests/conftest.py _SHARED_UNITS)"
                )
    units = {item.nodeid: _work_unit(item.nodeid) for item in items}
    slow = {units[item.nodeid] for item in items if item.get_closest_marker("slow")}

    def rank(item: pytest.Item) -> int:
        unit = units[item.nodeid]
        if unit in _SHARED_UNITS:
            return 0
        if unit in slow:
            return 1
        return 2 if unit != item.nodeid else 3

    items.sort(key=rank)


@pytest.fixture(scope="session")
def sim_url() -> Iterator[str]:
    with running_simulator(SimConfig(time_scale=SIM_TIME_SCALE)) as url:
        yield url


@pytest.fixture(scope="session")
def shared_default_run(tmp_path_factory: pytest.TempPathFactory) -> DefaultRun:
    from helpers.default_run import run_default  # the CLI's imports, only where it runs

    return run_default(tmp_path_factory.mktemp("default-run"))


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
