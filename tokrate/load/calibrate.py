"""This machine's measurement floor (``tokrate calibrate``), and whether a run stayed
inside it.

:func:`calibrate` runs the fast client (closed loop, uvloop, as ``tokrate run`` does)
against ``tokrate sim`` in its own process with a truth log, one fixed-timing tier whose
tokens arrive in aligned bursts across all streams (the hard case), at each
concurrency. Per level: stamp lag = client stamp - the simulator's write time of the
same token (both CLOCK_MONOTONIC, ms; every token of every measured request), CPU per
token (user + sys of this process over the load / tokens received, µs), and the
event-loop lag the client had meanwhile (tokrate.load.looplag, ms). The concurrency at
which the p99 stamp lag is first over 1 ms / 5 ms is the floor's headline.

:func:`judge_run` compares a run with a saved calibration: the floor holds for a run
whose loop lag p99 and send delay p99 stay within the loop lag the client had at the
calibrated level that covers the run's concurrency (plus :data:`LAG_TOLERANCE_MS`):
then its stamps are as far from the server's write times as the calibration measured,
no further. The result is run.json's ``calibration`` object.

The calibration file is JSON (:data:`CALIBRATION_VERSION`), by default
``$TOKRATE_CALIBRATION``, else ``$XDG_CACHE_HOME/tokrate/calibration.json`` (else
``~/.cache/tokrate/calibration.json``).
"""

from __future__ import annotations

import datetime
import math
import os
import resource
import socket
import statistics
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Final

import orjson

from tokrate._version import __version__
from tokrate.errors import UsageError

__all__ = [
    "CALIBRATION_VERSION",
    "DEFAULT_CONCURRENCY",
    "LAG_MARKS_MS",
    "LAG_TOLERANCE_MS",
    "Calibration",
    "LevelFloor",
    "calibrate",
    "default_calibration_path",
    "judge_run",
    "load_calibration",
    "parse_concurrency",
    "render_calibration",
    "run_envelope",
    "save_calibration",
    "sim_request",
]

CALIBRATION_VERSION: Final = 1
DEFAULT_CONCURRENCY: Final = (1, 32, 256, 1024)
#: Stamp-lag marks the calibration reports the passing concurrency of (ms, p99).
LAG_MARKS_MS: Final = (1.0, 5.0)
#: Slack on the calibrated loop lag before a run counts as outside (scheduler jitter).
LAG_TOLERANCE_MS: Final = 1.0
_CONCURRENCY_MAX: Final = 10_000


@dataclass(frozen=True, slots=True)
class LevelFloor:
    """One concurrency's floor (module docstring for every figure)."""

    concurrency: int
    requests: int
    errors: int
    tokens: int
    #: "kernel", "user", or "mixed" (some requests each way).
    stamp_source: str
    lag_mean_ms: float
    lag_p99_ms: float
    cpu_us_per_token: float
    loop_lag_p99_ms: float
    loop_lag_max_ms: float


@dataclass(frozen=True, slots=True)
class Calibration:
    created_at: str
    host: str
    tokrate_version: str
    kernel_stamps: str
    ttft_ms: float
    itl_ms: float
    tokens_per_request: int
    #: 1-minute load average before and after (the machine is often shared).
    load_before: float
    load_after: float
    levels: tuple[LevelFloor, ...]

    def first_over(self, mark_ms: float) -> LevelFloor | None:
        """The lowest calibrated level whose p99 stamp lag is over ``mark_ms``."""
        for level in sorted(self.levels, key=lambda lv: lv.concurrency):
            if level.lag_p99_ms > mark_ms:
                return level
        return None

    def level_for(self, concurrency: int) -> LevelFloor | None:
        """The smallest calibrated level at or above ``concurrency`` (None: beyond)."""
        for level in sorted(self.levels, key=lambda lv: lv.concurrency):
            if level.concurrency >= concurrency:
                return level
        return None

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["version"] = CALIBRATION_VERSION
        out["levels"] = [asdict(level) for level in self.levels]
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], where: str) -> Calibration:
        if data.get("version") != CALIBRATION_VERSION:
            raise UsageError(
                f"{where}: calibration version {data.get('version')!r} is not"
                f" {CALIBRATION_VERSION}; run tokrate calibrate again"
            )
        try:
            levels = tuple(LevelFloor(**level) for level in data["levels"])
            fields = {k: data[k] for k in cls.__dataclass_fields__ if k != "levels"}
            return cls(**fields, levels=levels)
        except (KeyError, TypeError) as err:
            raise UsageError(f"{where}: not a tokrate calibration ({err})") from None


def default_calibration_path() -> Path:
    env = os.environ.get("TOKRATE_CALIBRATION")
    if env:
        return Path(env)
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "tokrate" / "calibration.json"


def parse_concurrency(text: str) -> tuple[int, ...]:
    """ "1,32,256" -> (1, 32, 256), sorted and unique. Raises UsageError."""
    try:
        values = sorted({int(part) for part in text.split(",") if part.strip()})
    except ValueError:
        raise UsageError(f"expected comma-separated integers, got {text!r}") from None
    if not values or values[0] < 1 or values[-1] > _CONCURRENCY_MAX:
        raise UsageError(f"concurrency levels must be 1..{_CONCURRENCY_MAX}, got {text!r}")
    return tuple(values)


def save_calibration(calibration: Calibration, path: Path) -> None:
    from tokrate.fileio import write_atomic

    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, orjson.dumps(calibration.to_dict(), option=orjson.OPT_INDENT_2))
    except OSError as err:
        raise UsageError(f"{path}: cannot write the calibration ({err.strerror})") from None


def load_calibration(path: Path) -> Calibration | None:
    """The calibration saved at ``path``; None when there is none. Raises UsageError
    for a file that is not one."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as err:
        raise UsageError(f"{path}: cannot read the calibration ({err.strerror})") from None
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError as err:
        raise UsageError(f"{path}: not JSON ({err})") from None
    if not isinstance(data, dict):
        raise UsageError(f"{path}: not a tokrate calibration (not an object)")
    return Calibration.from_dict(data, str(path))


# --- the run's verdict ------------------------------------------------------------------


def judge_run(
    calibration: Calibration | None,
    *,
    path: Path,
    concurrency: int,
    loop_lag_p99_ms: float,
    send_delay_p99_ms: float | None,
    stamp_source: str | None = None,
) -> dict[str, Any]:
    """run.json's ``calibration`` object: ``inside`` True/False (None: no calibration)
    and one ``reason`` line a reader can act on. ``stamp_source``: the run's stamps
    ("kernel", "user", "mixed"); a run with user stamps is outside a floor measured
    with kernel stamps."""
    out: dict[str, Any] = {
        "path": str(path),
        "inside": None,
        "concurrency": concurrency,
        "loop_lag_p99_ms": round(loop_lag_p99_ms, 3),
        "send_delay_p99_ms": None if send_delay_p99_ms is None else round(send_delay_p99_ms, 3),
    }
    if calibration is None:
        out["reason"] = "this machine is not calibrated (run tokrate calibrate)"
        return out
    out["created_at"] = calibration.created_at
    level = calibration.level_for(concurrency)
    if level is None:
        top = max(lv.concurrency for lv in calibration.levels)
        out["inside"] = False
        out["reason"] = f"concurrency {concurrency} is beyond the calibrated {top}"
        return out
    bound = level.loop_lag_p99_ms + LAG_TOLERANCE_MS
    out.update(
        level=level.concurrency,
        bound_ms=round(bound, 3),
        stamp_lag_mean_ms=level.lag_mean_ms,
        stamp_lag_p99_ms=level.lag_p99_ms,
        stamp_source=level.stamp_source,
    )
    worst = [("loop lag p99", loop_lag_p99_ms)]
    if send_delay_p99_ms is not None:
        worst.append(("send delay p99", send_delay_p99_ms))
    over = [(name, v) for name, v in worst if v > bound]
    user_run = stamp_source is not None and stamp_source != "kernel"
    out["inside"] = not over and not (user_run and level.stamp_source == "kernel")
    if not over and not out["inside"]:
        out["reason"] = (
            f"the run's stamps are {stamp_source}, the c={level.concurrency} floor was"
            " measured with kernel stamps: user stamps carry the loop's lag"
        )
    elif over:
        name, value = over[0]
        out["reason"] = (
            f"{name} {value:.1f} ms > {bound:.1f} ms calibrated at c={level.concurrency}:"
            " stamps may be later than the calibrated floor"
        )
    else:
        out["reason"] = (
            f"within the c={level.concurrency} floor: stamp lag {level.lag_mean_ms:.2f} ms mean"
            f" / {level.lag_p99_ms:.2f} ms p99 ({level.stamp_source} stamps)"
        )
    return out


def run_envelope(frame: Any, loop_lag_p99_ms: float, path: Path | None = None) -> dict[str, Any]:
    """:func:`judge_run` for a finished run's records (a polars frame, the measured
    ones count): its concurrency is the largest closed-loop level, else (open loop)
    the peak of requests in flight; its send delay the p99 of ``send_delay_s``. A
    calibration file that cannot be read is said in ``reason``, never raised: the
    run's measurements are already saved."""
    import polars as pl

    path = path or default_calibration_path()
    measured = frame.filter(~pl.col("warmup")) if frame.height else frame
    levels = measured["concurrency"].drop_nulls() if measured.height else None
    if levels is not None and len(levels):
        concurrency = int(levels.max())
    else:
        concurrency = _peak_in_flight(measured)
    delays = measured["send_delay_s"].drop_nulls() if measured.height else None
    send_p99 = (
        float(delays.quantile(0.99, "higher")) * 1e3 if delays is not None and len(delays) else None
    )
    sources = set(measured["stamp_source"].drop_nulls().to_list()) if measured.height else set()
    stamps = sources.pop() if len(sources) == 1 else ("mixed" if sources else None)
    try:
        calibration = load_calibration(path)
    except UsageError as err:
        out = judge_run(None, path=path, concurrency=concurrency,
                        loop_lag_p99_ms=loop_lag_p99_ms, send_delay_p99_ms=send_p99)  # fmt: skip
        out["reason"] = f"calibration not read: {err}"
        return out
    return judge_run(calibration, path=path, concurrency=concurrency,
                     loop_lag_p99_ms=loop_lag_p99_ms, send_delay_p99_ms=send_p99,
                     stamp_source=stamps)  # fmt: skip


def _peak_in_flight(frame: Any) -> int:
    if not frame.height:
        return 0
    events: list[tuple[float, int]] = []
    for start, e2e in zip(frame["started_at"], frame["e2e_s"], strict=True):
        events.append((start, 1))
        events.append((start + (e2e or 0.0), -1))
    events.sort()
    peak = now = 0
    for _, step in events:
        now += step
        peak = max(peak, now)
    return peak


# --- measuring --------------------------------------------------------------------------


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
        "calibration", 7.0, 7.0, fixed_ttft_ms=ttft_ms, fixed_itl_ms=itl_ms,
        output_tokens_min=tokens, output_tokens_max=tokens,
    )  # fmt: skip
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
    from tokrate.load.looplag import LagMonitor
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
    from tokrate.inputs.prompts import Prompt
    from tokrate.inputs.targets import Target
    from tokrate.spec import EndpointSpec, ModelSpec

    target = Target(
        EndpointSpec(name="sim", base_url=base_url), ModelSpec(endpoint="sim", name=model)
    )
    prompt = Prompt(
        id="calibrate", task="calibrate", messages=({"role": "user", "content": "hello"},),
        prompt=None, max_tokens=tokens, input_tokens_est=8, source="calibrate",
    )  # fmt: skip
    settings = RequestSettings(ignore_eos=True, unique_prompts=False)
    return build_request(target, prompt, settings, include_usage=True, unique_prefix=None,
                         api_key=None)  # fmt: skip


def _truth(path: Path) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for line in path.read_bytes().splitlines():
        obj = orjson.loads(line)
        out[obj["id"]] = obj["content_write_ns"]
    return out


# --- rendering --------------------------------------------------------------------------


def _streams(n: int) -> str:
    return f"{n} stream{'s' if n != 1 else ''}"


def _mark_line(c: Calibration, mark_ms: float) -> str:
    """Where the p99 stamp lag stays within ``mark_ms`` and where it is over it, with
    the figure there ("within" and "over": never a word that reads both ways)."""
    levels = sorted(c.levels, key=lambda lv: lv.concurrency)
    over = c.first_over(mark_ms)
    if over is None:
        top = _streams(levels[-1].concurrency)
        return f"stamp lag p99 within {mark_ms:g} ms at every level (up to {top})"
    figure = f"{over.lag_p99_ms:.1f} ms at {_streams(over.concurrency)}"
    below = [lv for lv in levels if lv.concurrency < over.concurrency]
    if not below:
        return f"stamp lag p99 over {mark_ms:g} ms from the first level: {figure}"
    within = _streams(below[-1].concurrency)
    return f"stamp lag p99 within {mark_ms:g} ms up to {within}; {figure}"


def render_calibration(calibration: Calibration, path: Path | None = None) -> list[str]:
    """The floor as lines of at most 80 columns."""
    c = calibration
    lines = [
        f"measurement floor of {c.host}, {c.created_at} (tokrate {c.tokrate_version})",
        f"machine load average (1 min): {c.load_before:g} before, {c.load_after:g} after",
        f"simulator in its own process: TTFT {c.ttft_ms:g} ms, ITL {c.itl_ms:g} ms,"
        f" {c.tokens_per_request} tokens, aligned streams",
        "",
        f"{'streams':>7}  {'stamps':<6}  {'lag mean ms':>11}  {'lag p99 ms':>10}"
        f"  {'CPU µs/tok':>10}  {'loop lag p99':>12}  {'errors':>6}",
    ]
    for lv in c.levels:
        lines.append(
            f"{lv.concurrency:>7}  {lv.stamp_source:<6}  {lv.lag_mean_ms:>11.3f}"
            f"  {lv.lag_p99_ms:>10.3f}  {lv.cpu_us_per_token:>10.1f}"
            f"  {lv.loop_lag_p99_ms:>12.1f}  {lv.errors:>6}"
        )
    lines.append("")
    lines += [_mark_line(c, mark) for mark in LAG_MARKS_MS]
    if path is not None:
        lines.append(f"saved: {path}")
    return lines
