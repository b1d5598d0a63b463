"""``run_benchmark(spec)``: the whole of ``tokrate run`` as one library call.

Pipeline (each step finishes before the next starts; nothing is sent before step 4):

1. open the run folder (:class:`~tokrate.store.RunStore` checks it is creatable,
   writable and has free space);
2. resolve targets: the configured endpoints x models, or, with no endpoint, the
   embedded simulator (started in-process on 127.0.0.1) with every default tier;
3. readiness check of every endpoint (GET ``{base_url}/models``, falling back to a
   one-token request): unreachable -> EndpointUnreachable (exit 2);
4. load prompts, build the plan, open the backend, and run scenario after scenario,
   feeding every event to the store (the only writer) and to progress;
5. finalize (records.parquet, summary.json, run.json), build the report, check the
   baseline.

Ctrl-C (KeyboardInterrupt) or ``stop.set()``: workers stop scheduling, in-flight
requests get the grace period, the rest are recorded as cancelled, everything is
written with status "interrupted", and the result has ``exit_code`` 130.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as _dt
import itertools
import os
import platform
import signal
import socket
import sys
import threading
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from tokrate.engine import Target, WorkerTask
from tokrate.errors import ConfigError, EndpointUnreachable
from tokrate.events import LoopLag, RequestFinished, WorkerWarning
from tokrate.looplag import MAX_THRESHOLD_MS, P99_THRESHOLD_MS, LagSummary, merge
from tokrate.records import RequestRecord
from tokrate.spec import EndpointSpec, ModelSpec, RunSpec, prompts_base_dir, spec_to_dict
from tokrate.store import RunStore, new_run_id

__all__ = [
    "EMBEDDED_DEFAULTS",
    "SIM_ENDPOINT",
    "RunResult",
    "check_ready",
    "count_outcomes",
    "resolve_targets",
    "run_benchmark",
]

#: Name of the embedded simulator's endpoint in records and reports.
SIM_ENDPOINT: Final = "sim"

#: What ``tokrate run`` with no config and no endpoint uses (each a load_spec dotted
#: override; any flag the user gives wins). Six tiers in parallel on an honest
#: real-time simulator: a sweep of 1 and 8 streams, 8 requests per target and level,
#: 48 output tokens each, so the slowest tier (the largest model) bounds the run well
#: under 60 s.
EMBEDDED_DEFAULTS: Final[Mapping[str, object]] = {
    "load.concurrency": (1, 8),
    "load.requests": 8,
    "load.targets": "parallel",
    "prompts.max_tokens": 48,
}

_READY_TIMEOUT_S: Final = 10.0
_LIBRARIES: Final = (
    "anyio",
    "httpx",
    "httptools",
    "matplotlib",
    "openai",
    "orjson",
    "polars",
    "rich",
    "uvloop",
)


@dataclass(frozen=True, slots=True)
class RunResult:
    """What a run produced. ``exit_code``: 0 ok, 1 baseline regression, 130 interrupted."""

    run_dir: Path
    summary: dict[str, Any] | None
    exit_code: int
    interrupted: bool
    warnings: tuple[str, ...] = ()


# --- targets and readiness -------------------------------------------------------


def _sizes(model: ModelSpec) -> ModelSpec:
    """Fill params from the name ("7b", "8x7b") when the user gave none."""
    if model.params_b is not None:
        return model
    try:
        from tokrate.sizes import infer_size
    except ImportError:  # pragma: no cover - sizes.py lands with the config area
        return model
    inferred = infer_size(model.name)
    if inferred is None:
        return model
    params, active = inferred
    return dataclasses.replace(
        model,
        params_b=params,
        active_params_b=model.active_params_b if model.active_params_b is not None else active,
    )


def resolve_targets(spec: RunSpec, sim_url: str | None = None) -> tuple[Target, ...]:
    """Endpoint x model targets in config order; with ``sim_url`` the simulator's tiers.

    Raises: ConfigError when endpoints are configured but no model, or a model names
    an unknown endpoint.
    """
    if sim_url is not None:
        from tokrate.sim.model import default_tiers

        endpoint = EndpointSpec(name=SIM_ENDPOINT, base_url=sim_url)
        tiers = {tier.name: tier for tier in default_tiers()}
        wanted = [m.name for m in spec.models] or list(tiers)
        unknown = [name for name in wanted if name not in tiers]
        if unknown and spec.simulator.tiers_file is None:
            raise ConfigError(
                f"{spec.source or 'config'}: model {unknown[0]!r} is not a simulator tier"
                f" (tiers: {', '.join(tiers)})"
            )
        targets = []
        for name in wanted:
            tier = tiers.get(name)
            model = ModelSpec(
                endpoint=SIM_ENDPOINT,
                name=name,
                params_b=getattr(tier, "params_b", None),
                active_params_b=getattr(tier, "active_params_b", None),
                bytes_per_param=getattr(tier, "bytes_per_param", None),
                gpus=getattr(tier, "gpus", None),
            )
            targets.append(Target(endpoint=endpoint, model=model, simulated=True))
        return tuple(targets)
    where = spec.source or "config"
    by_name = {e.name: e for e in spec.endpoints}
    if not spec.models:
        raise ConfigError(f"{where}: no [[model]] configured (give -m/--model)")
    targets = []
    for m in spec.models:
        found = by_name.get(m.endpoint)
        if found is None:
            raise ConfigError(f"{where}: model {m.name!r} names unknown endpoint {m.endpoint!r}")
        targets.append(Target(endpoint=found, model=_sizes(m)))
    return tuple(targets)


def api_keys(spec: RunSpec) -> dict[str, str]:
    """Endpoint name -> key, read from each endpoint's env var (never stored elsewhere).

    Raises: ConfigError when a named env var is unset or empty.
    """
    keys = {}
    for e in spec.endpoints:
        if e.api_key_env:
            value = os.environ.get(e.api_key_env)
            if not value:
                raise ConfigError(
                    f"{spec.source or 'config'}: endpoint {e.name!r}: environment variable"
                    f" {e.api_key_env} (api_key_env) is not set"
                )
            keys[e.name] = value
    return keys


def check_ready(
    target: Target, api_key: str | None, *, timeout_s: float = _READY_TIMEOUT_S
) -> None:
    """Fail fast before any load: GET {base_url}/models, else a one-token request.

    Raises: EndpointUnreachable (one line naming endpoint and URL; never the key).
    """
    import httpx

    base = target.base_url.rstrip("/")
    headers = dict(target.endpoint.headers)
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    name = target.endpoint.name
    try:
        with httpx.Client(timeout=timeout_s, headers=headers) as http:
            resp = http.get(f"{base}/models")
            if resp.status_code in (401, 403):
                raise EndpointUnreachable(
                    f"endpoint {name!r} ({base}) answered {resp.status_code}: check its API"
                    f" key (api_key_env); nothing was sent"
                )
            if resp.is_success:
                return
            body = {
                "model": target.model.name,
                "messages": [{"role": "user", "content": "ping"}],
                "max_tokens": 1,
            }
            resp = http.post(f"{base}/chat/completions", json=body)
            if resp.is_success:
                return
            raise EndpointUnreachable(
                f"endpoint {name!r} ({base}): /models and a one-token request both failed"
                f" (HTTP {resp.status_code}); check base_url; nothing was sent"
            )
    except httpx.HTTPError as err:
        reason = type(err).__name__
        detail = str(err).splitlines()[0] if str(err) else ""
        if api_key and api_key in detail:
            detail = detail.replace(api_key, "<redacted>")
        raise EndpointUnreachable(
            f"endpoint {name!r} ({base}) is unreachable: {reason}"
            f"{': ' + detail if detail else ''}; nothing was sent"
        ) from None


# --- run.json contents -----------------------------------------------------------


def _libraries() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for name in _LIBRARIES:
        with contextlib.suppress(PackageNotFoundError):
            out[name] = version(name)
    return out


def _target_row(t: Target) -> dict[str, Any]:
    m = t.model
    return {
        "endpoint": t.endpoint.name,
        "model": m.name,
        "base_url": t.base_url,
        "params_b": m.params_b,
        "active_params_b": m.active_params_b if m.active_params_b is not None else m.params_b,
        "bytes_per_param": m.bytes_per_param,
        "price_in_per_m": m.price_in_per_m,
        "price_out_per_m": m.price_out_per_m,
        "gpu_hourly_usd": m.gpu_hourly_usd,
        "gpus": m.gpus,
        "simulated": t.simulated,
    }


def _scenario_row(s: Any, spec: RunSpec) -> dict[str, Any]:
    rate = getattr(s, "rate_rps", None)
    return {
        "name": str(getattr(s, "name", "")),
        "concurrency": getattr(s, "concurrency", None),
        "rate_rps": rate,
        "arrival": getattr(s, "arrival", spec.load.arrival if rate is not None else None),
    }


def count_outcomes(records: Sequence[RequestRecord]) -> dict[str, int]:
    """scheduled/ok/error/cancelled over the *last attempt* of each planned request
    (a retried request counts once), so scheduled == ok + error + cancelled."""
    last: dict[tuple[str, int], RequestRecord] = {}
    for r in records:
        key = (r.scenario, r.request_index)
        prev = last.get(key)
        if prev is None or r.attempt >= prev.attempt:
            last[key] = r
    counts = {"scheduled": len(last), "ok": 0, "error": 0, "cancelled": 0}
    for r in last.values():
        counts[r.status] += 1
    return counts


# --- the run ---------------------------------------------------------------------


class _Collector:
    """Driver-side event sink: store first (nothing lost), then progress."""

    def __init__(self, store: RunStore, progress: Any) -> None:
        self.store = store
        self.progress = progress
        # Outcome counts kept incrementally (memory stays flat on long runs; the
        # records themselves live on disk only).
        self.counts = {"scheduled": 0, "ok": 0, "error": 0, "cancelled": 0}
        self.lags: list[LagSummary] = []
        self.warnings: list[str] = []

    def __call__(self, event: Any) -> None:
        if isinstance(event, RequestFinished):
            record = event.record
            self.store.append(record)
            if record.attempt > 1:
                # A retry replaces its request's previous (failed) attempt in the counts.
                self.counts["error"] -= 1
            else:
                self.counts["scheduled"] += 1
            self.counts[record.status] += 1
        elif isinstance(event, LoopLag):
            self.lags.append(LagSummary(event.max_ms, event.p99_ms, event.samples))
        elif isinstance(event, WorkerWarning) and event.message not in self.warnings:
            self.warnings.append(event.message)
        if self.progress is not None:
            self.progress.on_event(event)


@contextlib.contextmanager
def _simulator(spec: RunSpec) -> Iterator[str | None]:
    if not spec.uses_simulator:
        yield None
        return
    from tokrate.sim import SimConfig, running_simulator

    s = spec.simulator
    config = SimConfig(
        tiers_file=s.tiers_file,
        hardware=s.hardware,
        efficiency=s.efficiency,
        time_scale=s.time_scale,
        seed=s.seed,
    )
    with running_simulator(config) as url:
        yield url


@contextlib.contextmanager
def _sigint_sets(stop: threading.Event) -> Iterator[None]:
    """While measuring, the first Ctrl-C only sets ``stop`` (workers then stop
    scheduling, run the grace period and record the rest as cancelled), so a signal
    never interrupts the driver mid-write and no event is lost between the backend and
    the store. A second Ctrl-C is ignored (the grace period is short); a third raises
    KeyboardInterrupt to abort waiting. Only in the main thread (signal handlers can
    be installed nowhere else)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    presses = 0

    def handler(signum: int, frame: object) -> None:
        nonlocal presses
        presses += 1
        if presses >= 3:
            raise KeyboardInterrupt
        stop.set()

    previous = signal.signal(signal.SIGINT, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def _short_names(targets: Sequence[Target]) -> list[str]:
    """Model names for sequential scenario names ("c=4 [sim-7b]"), endpoint/model
    where two endpoints serve the same model name."""
    models = [t.model.name for t in targets]
    if len(set(models)) == len(models):
        return models
    return [t.label for t in targets]


def _planned_per_target(scenario: Any, n_targets: int) -> list[int | None]:
    """Requests each target gets in this scenario (None: duration-bound) for progress."""
    indices = getattr(scenario, "target_indices", None)
    if indices is not None and hasattr(scenario, "planned_per_target"):
        per = scenario.planned_per_target
        return [per if t in indices else 0 for t in range(n_targets)]
    cap = 200_000
    counts = [0] * n_targets
    n = 0
    for pr in itertools.islice(scenario.requests(), cap + 1):
        n += 1
        counts[pr.target_index] += 1
    if n > cap:
        return [None] * n_targets
    return list(counts)


def run_benchmark(
    spec: RunSpec,
    *,
    console: Any = None,
    quiet: bool = False,
    stop: threading.Event | None = None,
    base_dir: Path | None = None,
) -> RunResult:
    """Run the benchmark ``spec`` describes and write its run folder (see module doc).

    ``console`` is a rich Console for live progress and warnings (None: no drawing);
    ``quiet`` suppresses the live progress but not warnings. ``base_dir`` resolves
    relative prompt paths (default: the config file's folder, else the cwd).

    Raises: ConfigError, PromptError, OutputError, EndpointUnreachable (all before any
    load is sent); SimulatorError when the embedded simulator cannot start.
    """
    from tokrate.plan import build_plan, shard
    from tokrate.prompts import load_prompts

    stop = stop or threading.Event()
    run_id = spec.output.run_id or new_run_id()
    run_dir = Path(spec.output.dir) / run_id
    if base_dir is None:
        base_dir = prompts_base_dir(spec)
    keys = api_keys(spec)
    prompts = load_prompts(spec.prompts, base_dir=base_dir)
    store = RunStore(run_dir)
    with contextlib.ExitStack() as stack:
        stack.callback(store.close)
        try:
            sim_url = stack.enter_context(_simulator(spec))
            targets = resolve_targets(spec, sim_url)
            for t in targets:
                check_ready(t, keys.get(t.endpoint.name))
            plan = build_plan(spec, len(prompts), len(targets), target_names=_short_names(targets))
            from tokrate.backends import open_backend

            backend = open_backend(spec)
        except BaseException:
            store.discard()
            raise
        stack.callback(backend.close)
        shards = shard(plan, backend.workers) if backend.workers > 1 else (plan,)
        store.start(
            {
                "run_id": run_id,
                "tokrate_version": _version(),
                "python": sys.version.split()[0],
                "platform": platform.platform(),
                "host": socket.gethostname(),
                "libraries": _libraries(),
                "config": spec_to_dict(spec),
                "targets": [_target_row(t) for t in targets],
                "scenarios": [_scenario_row(s, spec) for s in plan.scenarios],
                "slo": dataclasses.asdict(spec.slo),
                "hardware": spec.output.hardware
                if not spec.uses_simulator
                else spec.simulator.hardware,
                "backend": backend.kind,
                "workers": backend.workers,
                "warnings": [],
                "loop_lag": None,
                "counts": None,
            }
        )
        progress = None
        if console is not None:
            from tokrate.progress import RunProgress

            progress = RunProgress(console, [t.label for t in targets], live=not quiet)
            stack.enter_context(progress)
        sink = _Collector(store, progress)
        stack.enter_context(_sigint_sets(stop))
        interrupted = False
        try:
            for k, scenario in enumerate(plan.scenarios):
                if stop.is_set():
                    interrupted = True
                    break
                if progress is not None:
                    progress.start_scenario(
                        str(getattr(scenario, "name", k)),
                        _planned_per_target(scenario, len(targets)),
                    )
                tasks = [
                    WorkerTask(
                        run_id=run_id,
                        worker_id=f"w{w}",
                        scenario=part.scenarios[k],
                        spec=spec,
                        targets=targets,
                        prompts=prompts,
                        api_keys=keys,
                    )
                    for w, part in enumerate(shards)
                ]
                backend.run_scenario(tasks, sink, stop)
                store.end_scenario()
        except KeyboardInterrupt:
            interrupted = True
        if stop.is_set():
            interrupted = True
        if progress is not None:
            progress.close()
        lag = merge(sink.lags)
        loop_lag = {
            "threshold_ms": P99_THRESHOLD_MS,
            "max_threshold_ms": MAX_THRESHOLD_MS,
            "max_ms": round(lag.max_ms, 3),
            "p99_ms": round(lag.p99_ms, 3),
            "samples": lag.samples,
            # Judged per worker and scenario (each against its own sample count).
            "exceeded": any(part.exceeded for part in sink.lags),
        }
        counts = dict(sink.counts)
        status = "interrupted" if interrupted else "complete"
        _frame, summary = store.finalize(
            status=status,
            summarize=_summarizer(),
            warnings=sink.warnings,
            loop_lag=loop_lag,
            counts=counts,
        )
    warnings = list(sink.warnings)
    if spec.output.report:
        _report(run_dir, spec, warnings, console)
    exit_code = 130 if interrupted else 0
    if spec.baseline and not interrupted:
        from tokrate.compare import check_baseline, merge_thresholds, parse_threshold

        thresholds = merge_thresholds(parse_threshold(t) for t in spec.compare.thresholds)
        code = check_baseline(run_dir, spec.baseline, Path(spec.output.dir), thresholds)
        exit_code = max(exit_code, code)
    return RunResult(
        run_dir=run_dir,
        summary=summary,
        exit_code=exit_code,
        interrupted=interrupted,
        warnings=tuple(warnings),
    )


def _summarizer() -> Any:
    """tokrate.metrics.summarize, or None until the metrics module exists."""
    try:
        from tokrate.metrics import summarize
    except ImportError:  # pragma: no cover - metrics lands with the report area
        return None
    return summarize


def _report(run_dir: Path, spec: RunSpec, warnings: list[str], console: Any) -> None:
    """Build the report; the measurements are already safe on disk, so a failing
    report becomes a warning that says how to rebuild it, not a lost run."""
    try:
        from tokrate.report import build_report
    except ImportError:
        return
    try:
        build_report([run_dir], None, formats=spec.output.formats)
    except Exception as err:
        message = (
            f"report not built ({type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''});"
            f" the run is saved, rebuild with: tokrate report {run_dir}"
        )
        warnings.append(message)
        if console is not None:
            console.print(f"[yellow]warning:[/] {message}", markup=True, highlight=False)


def _version() -> str:
    from tokrate import __version__

    return __version__


def _now() -> str:
    return _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")
