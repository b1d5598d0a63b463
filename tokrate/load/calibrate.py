"""This machine's measurement floor: the load loop of ``tokrate calibrate``.

:func:`calibrate` runs the fast client (closed loop, uvloop, as ``tokrate run`` does:
with the workers a default run picks at that many streams,
:func:`tokrate.load.backends.selection.workers_for_streams`, each its own process with
its share of the streams started together, and each loop's request work paced as a
worker paces it, :mod:`tokrate.load.worker.pacing`) against ``tokrate sim`` in its own
process with a truth log, one fixed-timing tier whose tokens arrive in aligned bursts
across all streams (the hard case), at each concurrency. Per level: stamp lag = client stamp - the simulator's write time of the
same token (both CLOCK_MONOTONIC, ms; every token of every measured request), CPU per
token (user + sys of this process over the load / tokens received, µs), and the
event-loop lag the client had meanwhile (tokrate.load.worker.looplag, ms). The concurrency at
which the p99 stamp lag is first over 1 ms / 5 ms is the floor's headline.

The result is a :class:`~tokrate.runfolder.calibration.Calibration` (the file format and
its reader/writer live there); :mod:`tokrate.analysis.calibration` judges a run against
it and :func:`tokrate.report.calibration.render_calibration` draws it.
"""

from __future__ import annotations

import dataclasses
import datetime
import math
import os
import resource
import socket
import statistics
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import orjson

from tokrate._version import __version__
from tokrate.errors import UsageError
from tokrate.load.backends.selection import workers_for_streams
from tokrate.runfolder.calibration import Calibration, LevelFloor

__all__ = ["DEFAULT_CONCURRENCY", "calibrate", "parse_concurrency", "sim_request"]

DEFAULT_CONCURRENCY: Final = (1, 32, 256, 1024)
_CONCURRENCY_MAX: Final = 10_000


def parse_concurrency(text: str) -> tuple[int, ...]:
    """ "1,32,256" -> (1, 32, 256), sorted and unique. Raises UsageError."""
    try:
        values = sorted({int(part) for part in text.split(",") if part.strip()})
    except ValueError:
        raise UsageError(f"expected comma-separated integers, got {text!r}") from None
    if not values or values[0] < 1 or values[-1] > _CONCURRENCY_MAX:
        raise UsageError(f"concurrency levels must be 1..{_CONCURRENCY_MAX}, got {text!r}")
    return tuple(values)


def calibrate(
    concurrency: Sequence[int] = DEFAULT_CONCURRENCY,
    *,
    kernel_stamps: str = "auto",
    ttft_ms: float = 50.0,
    itl_ms: float = 20.0,
    tokens: int = 32,
    requests_per_stream: int = 2,
    on_level: Callable[[LevelFloor], None] | None = None,
    workers: int | str = "auto",
) -> Calibration:
    """Measure the floor at each concurrency (module docstring); ``workers`` processes
    per level ("auto": what a default run picks for that many streams, at most one per
    stream). Raises SimulatorError when the simulator cannot start."""
    from tokrate.sim.model import Tier
    from tokrate.sim.server import SimConfig, spawn_simulator

    tier = Tier(
        "calibration",
        7.0,
        7.0,
        fixed_ttft_ms=ttft_ms,
        fixed_itl_ms=itl_ms,
        output_tokens_min=tokens,
        output_tokens_max=tokens,
    )
    load_before = os.getloadavg()[0]
    levels: list[LevelFloor] = []
    with tempfile.TemporaryDirectory(prefix="tokrate-calibrate-") as tmp:
        truth_path = Path(tmp) / "truth.jsonl"
        config = SimConfig(tiers=(tier,), time_scale=1.0, truth_log=str(truth_path))
        with spawn_simulator(config) as (base_url, _pid):
            for n in concurrency:
                processes = workers_for_streams(n) if workers == "auto" else int(workers)
                level = _measure_level(
                    base_url,
                    truth_path,
                    _Load(n, requests_per_stream, tokens, kernel_stamps),
                    max(1, min(processes, n)),
                )
                levels.append(level)
                if on_level is not None:
                    on_level(level)
    return Calibration(
        created_at=datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        host=socket.gethostname(),
        tokrate_version=__version__,
        kernel_stamps=kernel_stamps,
        ttft_ms=ttft_ms,
        itl_ms=itl_ms,
        tokens_per_request=tokens,
        load_before=round(load_before, 2),
        load_after=round(os.getloadavg()[0], 2),
        levels=tuple(levels),
    )


def _cpu_s() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


@dataclass(frozen=True, slots=True)
class _Load:
    """One level's load: streams, requests per stream, tokens each, stamp mode."""

    streams: int
    per_stream: int
    tokens: int
    mode: str

    def share(self, index: int, processes: int) -> _Load:
        """The streams of process ``index`` of ``processes`` (as even as can be)."""
        streams = self.streams // processes + (index < self.streams % processes)
        return dataclasses.replace(self, streams=streams)


#: What one process measured: CPU seconds, loop lag p99 and max (ms), and per request
#: (ok, response id, stamp source, content chunk stamps).
_Share = tuple[float, float, float, list[tuple[bool, str, str, tuple[int, ...]]]]


def _measure_level(base_url: str, truth_path: Path, load: _Load, processes: int) -> LevelFloor:
    if processes == 1:
        shares = [_run_share(base_url, load, None)]
    else:
        shares = _in_processes(base_url, load, processes)
    truth = _truth(truth_path)
    lags_ms: list[float] = []
    received = requests = errors = 0
    sources = set()
    for _cpu, _p99, _max, results in shares:
        requests += len(results)
        for ok, response_id, stamp_source, chunk_ns in results:
            received += len(chunk_ns)
            writes = truth.get(response_id)
            if not ok or writes is None or len(writes) != len(chunk_ns):
                errors += not ok
                continue
            sources.add(stamp_source)
            lags_ms.extend((got - wrote) / 1e6 for got, wrote in zip(chunk_ns, writes, strict=True))
    ordered = sorted(lags_ms)
    p99 = ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))] if ordered else math.nan
    cpu_s = sum(share[0] for share in shares)
    return LevelFloor(
        concurrency=load.streams,
        requests=requests,
        errors=errors,
        tokens=received,
        stamp_source=sources.pop() if len(sources) == 1 else ("mixed" if sources else "none"),
        lag_mean_ms=round(statistics.fmean(ordered), 4) if ordered else math.nan,
        lag_p99_ms=round(p99, 4),
        cpu_us_per_token=round(cpu_s / max(1, received) * 1e6, 2),
        loop_lag_p99_ms=round(max(share[1] for share in shares), 3),
        loop_lag_max_ms=round(max(share[2] for share in shares), 3),
        workers=processes,
    )


def _in_processes(base_url: str, load: _Load, processes: int) -> list[_Share]:
    """``load`` shared by ``processes`` spawned processes, their loads started together
    (each opens its connections first, then waits for the others)."""
    import multiprocessing

    ctx = multiprocessing.get_context("spawn")
    ready = ctx.Barrier(processes)
    pipes = []
    children = []
    for index in range(processes):
        here, there = ctx.Pipe(duplex=False)
        child = ctx.Process(
            target=_share_child,
            args=(base_url, load.share(index, processes), ready, there),
            name=f"tokrate-calibrate-{index}",
            daemon=True,
        )
        child.start()
        there.close()
        pipes.append(here)
        children.append(child)
    shares = []
    try:
        for here in pipes:
            try:
                shares.append(here.recv())
            except EOFError:
                raise UsageError("tokrate calibrate: a worker process died") from None
    finally:
        for child in children:
            child.join(timeout=30)
            if child.is_alive():
                child.kill()
    return shares


def _share_child(base_url: str, load: _Load, ready: Any, out: Any) -> None:
    """A calibration worker process: its share of the level, sent back on ``out``."""
    out.send(_run_share(base_url, load, ready))
    out.close()


def _run_share(base_url: str, load: _Load, ready: Any) -> _Share:
    import gc

    import uvloop

    # As the engine does: what start-up made is no garbage for a collection to walk.
    gc.collect()
    gc.freeze()
    results: list[Any] = []
    cpu_s, lag = uvloop.run(_load(base_url, load, results, ready))
    kept = [(r.ok, r.response_id or "", r.stamp_source, tuple(r.chunk_ns)) for r in results]
    return cpu_s, lag[0], lag[1], kept


async def _load(
    base_url: str, load: _Load, out: list[Any], ready: Any
) -> tuple[float, tuple[float, float]]:
    """Closed loop: every stream sends ``per_stream`` requests back to back, each in its
    turn of the loop (:class:`~tokrate.load.worker.pacing.Pacer`, as a worker paces
    them); the pool is opened first (then ``ready``, a barrier shared with the level's
    other processes, is passed) so the CPU and lag figures are the streaming alone's."""
    import anyio

    from tokrate.client.factory import open_client
    from tokrate.load.worker.looplag import LagMonitor
    from tokrate.load.worker.pacing import Pacer
    from tokrate.spec.types import TimeoutsSpec

    req = sim_request(base_url, load.tokens)
    timeouts = TimeoutsSpec(connect_s=30, first_byte_s=120, idle_s=60, total_s=600)
    streams = load.streams
    client = open_client("fast", pool_size=streams, timeouts=timeouts, kernel_stamps=load.mode)
    pacer = Pacer()
    try:
        await client.preconnect(f"{base_url}/models", streams)
        if ready is not None:
            await anyio.to_thread.run_sync(ready.wait)
        monitor = LagMonitor()

        async def stream() -> None:
            for _ in range(load.per_stream):
                await pacer.turn()
                result = await client.stream(req)
                await pacer.turn()
                out.append(result)

        cpu0 = _cpu_s()
        async with anyio.create_task_group() as outer:
            outer.start_soon(monitor.run)
            async with anyio.create_task_group() as tg:
                for _ in range(streams):
                    tg.start_soon(stream)
            outer.cancel_scope.cancel()
        cpu = _cpu_s() - cpu0
    finally:
        await client.aclose()
    summary = monitor.summary()
    return cpu, (summary.p99_ms, summary.max_ms)


def sim_request(base_url: str, tokens: int, model: str = "calibration") -> Any:
    """A chat request for ``tokens`` tokens (ignore_eos) to the simulator at
    ``base_url``, as the calibration (and the client benchmarks) send it."""
    from tokrate.client.request import RequestSettings, build_request
    from tokrate.inputs.prompt_base import Prompt
    from tokrate.inputs.targets import Target
    from tokrate.spec.types import EndpointSpec, ModelSpec

    target = Target(
        EndpointSpec(name="sim", base_url=base_url), ModelSpec(endpoint="sim", name=model)
    )
    prompt = Prompt(
        id="calibrate",
        task="calibrate",
        messages=({"role": "user", "content": "hello"},),
        prompt=None,
        max_tokens=tokens,
        input_tokens_est=8,
        source="calibrate",
    )
    settings = RequestSettings(ignore_eos=True, unique_prompts=False)
    return build_request(
        target, prompt, settings, include_usage=True, unique_prefix=None, api_key=None
    )


def _truth(path: Path) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for line in path.read_bytes().splitlines():
        obj = orjson.loads(line)
        out[obj["id"]] = obj["content_write_ns"]
    return out
