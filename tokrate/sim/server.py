"""Start the simulator: :class:`SimConfig`, :func:`running_simulator`, :func:`serve`.

The server is uvicorn (httptools parser, uvloop where installed) running
:class:`tokrate.sim.app.SimApp` on a socket this module binds itself, so port 0 works
and the real port is known before the first request. Everything that can be wrong
with a config (tiers that don't fit, bad fault SPEC, unwritable truth log) raises in
the caller's thread before any socket is opened.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import FrameType
from typing import Any, Final

from tokrate.errors import ConfigError, SimulatorError
from tokrate.fileio import write_atomic
from tokrate.hardware import HardwareProfile, get_hardware
from tokrate.sim.app import SimApp, SimState
from tokrate.sim.faults import FaultPlan, FaultRule, parse_faults
from tokrate.sim.model import Tier, TierTiming, default_tiers
from tokrate.sim.tiers import load_tiers_file
from tokrate.sim.truth import TruthLog

__all__ = [
    "SimConfig",
    "build_state",
    "configured_tiers",
    "running_simulator",
    "serve",
    "simulator_process",
    "spawn_simulator",
]

#: Seconds running_simulator waits for uvicorn to report it is serving.
START_TIMEOUT_S = 15.0
#: Environment variable simulator_process sets to its own pid, so the child exits once
#: that parent is gone.
_PARENT_ENV = "TOKRATE_SIM_PARENT_PID"


@dataclass(frozen=True)
class SimConfig:
    """How to run one simulator.

    ``efficiency`` applies to every tier unless ``tier_efficiency`` (tier name ->
    fraction) or the tier's own ``efficiency`` says otherwise (in that order of
    precedence). ``time_scale`` divides every modelled duration (not fault durations).
    ``tiers`` replaces the default tiers in code (``tiers_file`` wins over it).
    ``faults`` is a SPEC string (see :mod:`tokrate.sim.faults`). ``api_key`` set makes
    every /v1 route require ``Authorization: Bearer <key>``.
    """

    host: str = "127.0.0.1"
    port: int = 0
    tiers_file: str | None = None
    hardware: str = "a100-80g"
    efficiency: float = 0.8
    tier_efficiency: Mapping[str, float] = field(default_factory=dict)
    time_scale: float = 1.0
    seed: int = 0
    api_key: str | None = field(default=None, repr=False)
    faults: str | None = None
    truth_log: str | None = None
    tiers: tuple[Tier, ...] | None = None
    hardware_profile: HardwareProfile | None = None
    """Custom accelerator; wins over ``hardware`` (a tiers file's [hardware] wins over both)."""
    request_metrics: bool = False
    """Chat and completions usage chunks carry a vLLM-style per-request ``metrics``
    object (queue, prefill, TTFT, decode, mean ITL, tokens: tokrate.sim.scheduler)."""
    prefix_cache: bool = False
    """Each tier keeps a prefix cache (tokrate.sim.prefix_cache): cached prompt blocks
    skip their prefill and usage reports them as cached_tokens."""
    prefix_cache_cold: bool = False
    """The prefix cache is looked up but keeps nothing (0 blocks): every prompt is
    prefilled in full and usage reports 0 cached tokens, /metrics queries without
    hits; a provider whose cache stopped working. Wins over ``prefix_cache``."""


def _resolve_tiers(
    cfg: SimConfig,
) -> tuple[tuple[Tier, ...], HardwareProfile, dict[str | None, dict[str, FaultRule]]]:
    tiers = cfg.tiers if cfg.tiers is not None else default_tiers()
    hw = cfg.hardware_profile or get_hardware(cfg.hardware)
    rules: dict[str | None, dict[str, FaultRule]] = {}
    if cfg.tiers_file:
        tf = load_tiers_file(cfg.tiers_file)
        tiers = tf.tiers
        hw = tf.hardware or hw
        for k, v in parse_faults(tf.faults, where=f"{cfg.tiers_file}: faults").items():
            rules.setdefault(k, {}).update(v)
    for t in tiers:
        if t.faults:
            tier_rules = parse_faults(t.faults, where=f"tier {t.name!r}: faults")
            if set(tier_rules) - {None}:
                raise ConfigError(
                    f"tier {t.name!r}: faults must not name a tier (it applies to its own)"
                )
            rules.setdefault(t.name, {}).update(tier_rules.get(None, {}))
    for k, v in parse_faults(cfg.faults).items():
        rules.setdefault(k, {}).update(v)
    return tiers, hw, rules


def configured_tiers(cfg: SimConfig) -> tuple[Tier, ...]:
    """The tiers a simulator started with ``cfg`` serves (its tiers file's, else
    ``cfg.tiers``, else the defaults). Raises ConfigError for a bad tiers file."""
    return _resolve_tiers(cfg)[0]


def build_state(cfg: SimConfig) -> SimState:
    """Validate ``cfg`` and place every tier.

    Raises SimulatorError (a tier does not fit), ConfigError (bad value, file, fault
    SPEC), OutputError (truth log not writable).
    """
    if not cfg.time_scale > 0:
        raise ConfigError(f"time_scale must be > 0, got {cfg.time_scale}")
    if not 0 < cfg.efficiency <= 1:
        raise ConfigError(f"efficiency must be in (0, 1], got {cfg.efficiency}")
    tiers, hw, rules = _resolve_tiers(cfg)
    names = tuple(t.name for t in tiers)
    if len(set(names)) != len(names):
        raise ConfigError("tier names must be unique")
    unknown = sorted(set(cfg.tier_efficiency) - set(names))
    if unknown:
        raise ConfigError(f"efficiency: unknown tier {unknown[0]!r} (tiers: {', '.join(names)})")
    timings = {t.name: TierTiming.place(t, hw, cfg.efficiency, cfg.tier_efficiency) for t in tiers}
    plan = FaultPlan(rules, names, cfg.seed)
    truth = TruthLog(cfg.truth_log) if cfg.truth_log else None
    return SimState(
        timings,
        plan,
        cfg.seed,
        cfg.time_scale,
        cfg.api_key,
        truth,
        cfg.prefix_cache,
        cfg.request_metrics,
        cfg.prefix_cache_cold,
    )


def _bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(4096)
    except OSError as err:
        sock.close()
        raise SimulatorError(f"cannot listen on {host}:{port} ({err.strerror})") from None
    sock.setblocking(False)
    return sock


def _uvicorn_server(app: SimApp) -> Any:
    import uvicorn

    from tokrate.sim.arrival import ArrivalStampedProtocol, keep_kernel_stamping

    try:
        import uvloop  # noqa: F401

        loop = "uvloop"
    except ImportError:
        loop = "asyncio"
    config = uvicorn.Config(
        app,
        # uvicorn's httptools protocol, reading each socket with kernel receive stamps:
        # the truth log's arrived_ns (tokrate.sim.arrival).
        http=ArrivalStampedProtocol,
        loop=loop,
        lifespan="off",
        log_level="warning",
        access_log=False,
        server_header=False,
        # Streams still open at shutdown are cut after this, so stopping never hangs.
        timeout_graceful_shutdown=1,
        backlog=4096,
    )
    keep_kernel_stamping()
    return uvicorn.Server(config)


def _base_url(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{port}/v1"


@contextlib.contextmanager
def running_simulator(config: SimConfig | None = None, /, **overrides: Any) -> Iterator[str]:
    """Run a simulator in a background thread; yield its base URL ``http://HOST:PORT/v1``.

    ``overrides`` are SimConfig fields applied on top of ``config``. On exit the server
    stops (open streams are cut after one second) and the truth log is closed.
    Raises SimulatorError/ConfigError/OutputError before starting on a bad config.
    """
    cfg = replace(config or SimConfig(), **overrides) if overrides else (config or SimConfig())
    state = build_state(cfg)
    sock: socket.socket | None = None
    thread: threading.Thread | None = None
    server: Any = None
    app = SimApp(state)
    try:
        sock = _bind(cfg.host, cfg.port)
        server = _uvicorn_server(app)
        thread = threading.Thread(
            target=server.run, kwargs={"sockets": [sock]}, name="tokrate-sim", daemon=True
        )
        thread.start()
        deadline = time.monotonic() + START_TIMEOUT_S
        while not server.started:
            if not thread.is_alive():
                raise SimulatorError("simulator server exited during start-up")
            if time.monotonic() > deadline:
                raise SimulatorError(f"simulator did not start within {START_TIMEOUT_S:g} s")
            time.sleep(0.002)
        yield _base_url(sock)
    finally:
        app.stop_streams()
        if server is not None:
            server.should_exit = True
        if thread is not None:
            thread.join(timeout=10)
        if sock is not None:
            sock.close()
        if state.truth is not None:
            state.truth.close()


def serve(config: SimConfig, *, on_ready: Callable[[str], None] | None = None) -> None:
    """Serve until SIGINT or SIGTERM (main thread only), then stop cleanly and return.

    ``on_ready(base_url)`` is called once the server accepts connections.
    """
    stop = threading.Event()

    def _on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    old = {s: signal.signal(s, _on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    # Started by simulator_process: exit with the parent, even one killed by SIGKILL
    # (which cannot stop its child itself), instead of serving on as an orphan.
    parent = os.environ.get(_PARENT_ENV)
    try:
        with running_simulator(config) as url:
            # Start-up's objects (modules, tiers, uvicorn) are never garbage; frozen, a
            # full collection no longer walks them. Unfrozen, the first gen-2 collection
            # (set off by a burst of new requests) held the event loop 30-44 ms, and the
            # engines then wrote every token that fell due meanwhile in one write.
            gc.collect()
            gc.freeze()
            if on_ready is not None:
                on_ready(url)
            while not stop.wait(0.5):
                if parent is not None and str(os.getppid()) != parent:
                    break
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)


def _toml_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    return json.dumps(str(value))  # a JSON string is a valid TOML basic string


def _tiers_toml(tiers: tuple[Tier, ...], hw: HardwareProfile | None) -> str:
    lines: list[str] = []
    if hw is not None:
        lines += [
            "[hardware]",
            f"name = {_toml_value(hw.name)}",
            f"bandwidth_tb_s = {hw.bandwidth_bytes_per_s / 1e12!r}",
            f"tflops = {hw.flops_per_s / 1e12!r}",
            f"memory_gb = {hw.memory_bytes / 1e9!r}",
        ]
    for tier in tiers:
        lines.append("[[tier]]")
        for f in dataclasses.fields(tier):
            value = getattr(tier, f.name)
            if value is not None:
                lines.append(f"{f.name} = {_toml_value(value)}")
    return "\n".join(lines) + "\n"


@contextlib.contextmanager
def simulator_process(config: SimConfig | None = None, /, **overrides: Any) -> Iterator[str]:
    """Like :func:`running_simulator`, but ``tokrate sim`` runs in its own process
    (:func:`spawn_simulator`, yielding only the base URL)."""
    with spawn_simulator(config, **overrides) as (url, _pid):
        yield url


@contextlib.contextmanager
def spawn_simulator(
    config: SimConfig | None = None, /, **overrides: Any
) -> Iterator[tuple[str, int]]:
    """``tokrate sim`` in its own process: yields (base URL, process id); the pid is
    for benchmarks that measure the server's own CPU.

    For timing-sensitive measurements: an in-process simulator shares the GIL (and a
    core) with the client it serves. The config is validated here first (same errors
    as running_simulator); ``tiers``/``hardware_profile`` travel as a temporary tiers
    file, the API key through an environment variable, never argv. Stops it with
    SIGTERM on exit; the child also exits by itself within a second of this process
    dying (even by SIGKILL). Raises SimulatorError if the process does not come up.
    """
    cfg = replace(config or SimConfig(), **overrides) if overrides else (config or SimConfig())
    state = build_state(cfg)  # raises exactly like running_simulator
    if state.truth is not None:
        state.truth.close()
    if cfg.tiers_file and cfg.hardware_profile is not None:
        raise ConfigError("simulator_process: put [hardware] into the tiers file instead")
    _sweep_leftovers()
    tmp = tempfile.mkdtemp(prefix=f"{_TMP_PREFIX}{os.getpid()}-")
    try:
        args = [sys.executable, "-m", "tokrate", "sim", "--host", cfg.host, "--port", str(cfg.port)]
        tiers_file = cfg.tiers_file
        if tiers_file is None and (cfg.tiers is not None or cfg.hardware_profile is not None):
            tiers_file = str(Path(tmp) / "tiers.toml")
            toml = _tiers_toml(cfg.tiers or default_tiers(), cfg.hardware_profile)
            write_atomic(Path(tiers_file), toml.encode("utf-8"))
        if tiers_file:
            args += ["--tiers", tiers_file]
        args += ["--hardware", cfg.hardware, "--efficiency", repr(cfg.efficiency)]
        for name, eff in cfg.tier_efficiency.items():
            args += ["--efficiency", f"{name}={eff!r}"]
        args += ["--time-scale", repr(cfg.time_scale), "--seed", str(cfg.seed)]
        if cfg.faults:
            args += ["--faults", cfg.faults]
        if cfg.truth_log:
            args += ["--truth-log", cfg.truth_log]
        if cfg.prefix_cache:
            args.append("--prefix-cache")
        if cfg.prefix_cache_cold:
            args.append("--prefix-cache-cold")
        if cfg.request_metrics:
            args.append("--request-metrics")
        env = dict(os.environ)
        env[_PARENT_ENV] = str(os.getpid())
        if cfg.api_key:
            env["TOKRATE_SIM_API_KEY"] = cfg.api_key
            args += ["--api-key", "TOKRATE_SIM_API_KEY"]
        proc = subprocess.Popen(
            args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
        )
        try:
            assert proc.stdout is not None
            url = proc.stdout.readline().strip()
            # The child has read its tiers file once it prints its URL: gone now, so a
            # SIGKILL of this process later leaves nothing in /tmp.
            shutil.rmtree(tmp, ignore_errors=True)
            if not url.startswith("http://"):
                _, err = proc.communicate(timeout=START_TIMEOUT_S)
                last = (err.strip().splitlines() or ["no output"])[-1]
                raise SimulatorError(f"simulator process did not start: {last}")
            yield url, proc.pid
        finally:
            if proc.poll() is None:
                proc.terminate()
            try:
                proc.communicate(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.communicate()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


#: The embedded simulator's temporary folders: tokrate-sim-<pid of its owner>-<random>.
_TMP_PREFIX: Final = "tokrate-sim-"
#: A folder of the old naming (no owner pid) older than this is a leftover.
_UNOWNED_AGE_S: Final = 3600.0


def _sweep_leftovers() -> None:
    """Remove the temporary folders of simulators whose owner died before removing them
    (a SIGKILL in the second between creating one and the child's start): an owner pid
    no process has any more, or, for folders named without one, an hour old."""
    for path in Path(tempfile.gettempdir()).glob(f"{_TMP_PREFIX}*"):
        owner = path.name[len(_TMP_PREFIX) :].split("-", 1)[0]
        try:
            if owner.isdigit():
                if _alive(int(owner)):
                    continue
            elif time.time() - path.stat().st_mtime < _UNOWNED_AGE_S:
                continue
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path, ignore_errors=True)
        except OSError:
            continue  # another user's folder, or gone meanwhile


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process
    return True
