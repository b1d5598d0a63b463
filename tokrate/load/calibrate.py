"""This machine's measurement floor: the load loop of ``tokrate calibrate``.

:func:`calibrate` runs the fast client (closed loop, uvloop, as ``tokrate run`` does)
against ``tokrate sim`` in its own process with a truth log, one fixed-timing tier whose
tokens arrive in aligned bursts across all streams (the hard case), at each
concurrency. Per level: stamp lag = client stamp - the simulator's write time of the
same token (both CLOCK_MONOTONIC, ms; every token of every measured request), CPU per
token (user + sys of this process over the load / tokens received, µs), and the
event-loop lag the client had meanwhile (tokrate.load.worker.looplag, ms). The concurrency at
which the p99 stamp lag is first over 1 ms / 5 ms is the floor's headline.

The result is a :class:`~tokrate.runfolder.calibration.Calibration` (the file format and
its reader/writer live there); :mod:`tokrate.analysis.calibration` judges a run against
it and :func:`tokrate.report.calibration.render_calibration` draws it.
"""

from __future__ import annotations

import datetime
import math
import os
import resource
import socket
import statistics
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Final

import orjson

from tokrate._version import __version__
from tokrate.errors import UsageError
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
) -> Calibration:
    """Measure the floor at each concurrency (module docstring). Raises SimulatorError
    when the simulator cannot start."""
    from tokrate.sim import SimConfig, Tier, spawn_simulator

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
                level = _measure_level(
                    base_url, truth_path, n, requests_per_stream, tokens, kernel_stamps
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


def _measure_level(
    base_url: str, truth_path: Path, streams: int, per_stream: int, tokens: int, mode: str
) -> LevelFloor:
    import uvloop

    from tokrate.client.result import StreamResult

    results: list[StreamResult] = []
    cpu_s, lag = uvloop.run(_load(base_url, streams, per_stream, tokens, mode, results))
    truth = _truth(truth_path)
    lags_ms: list[float] = []
    received = 0
    errors = 0
    sources = set()
    for r in results:
        received += len(r.chunk_ns)
        writes = truth.get(r.response_id or "")
        if not r.ok or writes is None or len(writes) != len(r.chunk_ns):
            errors += not r.ok
            continue
        sources.add(r.stamp_source)
        lags_ms.extend((got - wrote) / 1e6 for got, wrote in zip(r.chunk_ns, writes, strict=True))
    ordered = sorted(lags_ms)
    p99 = ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))] if ordered else math.nan
    return LevelFloor(
        concurrency=streams,
        requests=len(results),
        errors=errors,
        tokens=received,
        stamp_source=sources.pop() if len(sources) == 1 else ("mixed" if sources else "none"),
        lag_mean_ms=round(statistics.fmean(ordered), 4) if ordered else math.nan,
        lag_p99_ms=round(p99, 4),
        cpu_us_per_token=round(cpu_s / max(1, received) * 1e6, 2),
        loop_lag_p99_ms=round(lag[0], 3),
        loop_lag_max_ms=round(lag[1], 3),
    )


async def _load(
    base_url: str, streams: int, per_stream: int, tokens: int, mode: str, out: list[Any]
) -> tuple[float, tuple[float, float]]:
    """Closed loop: every stream sends ``per_stream`` requests back to back; the pool
    is opened first so the CPU and lag figures are the streaming alone's."""
    import anyio

    from tokrate.client import open_client
    from tokrate.load.worker.looplag import LagMonitor
    from tokrate.spec import TimeoutsSpec

    req = sim_request(base_url, tokens)
    timeouts = TimeoutsSpec(connect_s=30, first_byte_s=120, idle_s=60, total_s=600)
    client = open_client("fast", pool_size=streams, timeouts=timeouts, kernel_stamps=mode)
    try:
        await client.preconnect(f"{base_url}/models", streams)
        monitor = LagMonitor()

        async def stream() -> None:
            for _ in range(per_stream):
                out.append(await client.stream(req))

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
    from tokrate.client import RequestSettings, build_request
    from tokrate.inputs.prompt_base import Prompt
    from tokrate.inputs.targets import Target
    from tokrate.spec import EndpointSpec, ModelSpec

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
