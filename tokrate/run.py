"""``run_benchmark(spec)``: the whole of ``tokrate run`` as one library call.

Pipeline (each step finishes before the next starts; nothing is sent before step 4):

1. open the run folder (:class:`~tokrate.store.RunStore` checks it is creatable,
   writable and has free space);
2. resolve targets: the configured endpoints x models, or, with no endpoint, the
   embedded simulator (``tokrate sim`` in its own process on 127.0.0.1, so it shares
   no interpreter lock with the measuring loop) with every default tier; targets are
   ordered by endpoint (config order), then model size, then name;
3. pre-flight of every endpoint (:mod:`tokrate.preflight`): it answers, and serves
   every model (its /models list, or one tiny request per model); otherwise
   EndpointUnreachable / ModelNotServed (exit 2), showing the server's reply;
4. load prompts, build the plan, open the backend, and run scenario after scenario,
   feeding every event to the store (the only writer) and to progress;
5. finalize (records.parquet, summary.json, run.json), build the report, check the
   baseline. A target that got no ok request at all makes the exit code 1, with one
   line per such target naming its error classes and counts.

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
from tokrate.errors import ConfigError
from tokrate.events import LoopLag, Preconnected, RequestFinished, WorkerWarning
from tokrate.looplag import MAX_THRESHOLD_MS, P99_THRESHOLD_MS, LagSummary, merge
from tokrate.records import RequestRecord
from tokrate.spec import EndpointSpec, ModelSpec, RunSpec, prompts_base_dir, spec_to_dict
from tokrate.store import RunStore, new_run_id

__all__ = [
    "EMBEDDED_DEFAULTS",
    "SIM_ENDPOINT",
    "RunResult",
    "collapse_warnings",
    "count_outcomes",
    "resolve_targets",
    "run_benchmark",
]

#: Name of the embedded simulator's endpoint in records and reports.
SIM_ENDPOINT: Final = "sim"

#: What ``tokrate run`` with no config and no endpoint uses (each a load_spec dotted
#: override; any flag the user gives wins). Six tiers in parallel on an honest
#: real-time simulator: a sweep of 1 and 8 streams per tier, 30 requests per target and
#: level (what a stable p95 needs, so the demo triggers none of the small-sample
#: warnings), 16 output tokens each (15 decode gaps: TPOT is exact on the simulator),
#: so the slowest tier (the largest model) bounds the run well under 60 s; and demo SLOs (TTFT <= 0.5 s, TPOT <= 30 ms: at least ~33
#: tok/s per stream), so the tier pick table shows a real decision: the large tiers
#: miss them, the small ones meet them.
EMBEDDED_DEFAULTS: Final[Mapping[str, object]] = {
    "load.concurrency": (1, 8),
    "load.requests": 30,
    "load.targets": "parallel",
    "prompts.max_tokens": 16,
    "slo.ttft_s": 0.5,
    "slo.tpot_s": 0.03,
}

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
    """What a run produced. ``exit_code``: 0 ok; 1 a baseline regression or a target
    that got no ok request; 130 interrupted.

    ``warnings`` are one line each (repeats of one kind collapsed, see
    :func:`collapse_warnings`); ``failed_targets`` the lines naming every target with
    no ok request (its error classes with counts); ``comparison`` the
    ``tokrate.compare.Comparison`` of a ``baseline`` check (None without one or when
    there was no baseline yet); ``baseline_result`` a one-line verdict of that check.
    """

    run_dir: Path
    summary: dict[str, Any] | None
    exit_code: int
    interrupted: bool
    warnings: tuple[str, ...] = ()
    failed_targets: tuple[str, ...] = ()
    label: str | None = None
    comparison: Any = None
    baseline_result: str | None = None


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
        return _by_size(targets, [SIM_ENDPOINT])
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
    return _by_size(targets, [e.name for e in spec.endpoints])


def _by_size(targets: Sequence[Target], endpoint_order: Sequence[str]) -> tuple[Target, ...]:
    """Targets by endpoint (config order), then model size (active parameters, else
    total; unknown last), then name: how a reader scans a size comparison."""
    rank = {name: i for i, name in enumerate(endpoint_order)}

    def key(t: Target) -> tuple[int, float, str]:
        m = t.model
        size = m.active_params_b if m.active_params_b is not None else m.params_b
        return (rank.get(t.endpoint.name, len(rank)), size if size else float("inf"), m.name)

    return tuple(sorted(targets, key=key))


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


def collapse_warnings(warnings: Sequence[tuple[str, str]]) -> list[str]:
    """One line per kind of warning, in order of first appearance: ``(kind, message)``
    pairs of one kind (a non-empty kind) become the first message plus how many more
    there were; pairs without a kind are only de-duplicated."""
    return [line for line, _n in _collapsed(warnings)]


def _collapsed(warnings: Sequence[tuple[str, str]]) -> list[tuple[str, int]]:
    groups: dict[str, list[str]] = {}
    for kind, message in warnings:
        bucket = groups.setdefault(kind or f"\x00{message}", [])
        if message not in bucket:
            bucket.append(message)
    out = []
    for messages in groups.values():
        extra = len(messages) - 1
        more = f" (and {extra} more like it)" if extra else ""
        out.append((messages[0] + more, len(messages)))
    return out


class _TargetOutcomes:
    """Per target: ok requests, and failures by error class with a first example."""

    __slots__ = ("errors", "example", "ok", "total")

    def __init__(self) -> None:
        self.ok = 0
        self.total = 0
        self.errors: dict[str, int] = {}
        self.example: str | None = None

    def add(self, record: RequestRecord) -> None:
        self.total += 1
        if record.status == "ok":
            self.ok += 1
            return
        cls = record.error_class or record.status
        self.errors[cls] = self.errors.get(cls, 0) + 1
        if self.example is None and record.error_message:
            self.example = record.error_message

    def failure_line(self, label: str) -> str:
        if self.total == 0:
            return f"target {label} got no request (the run ended before its turn)"
        classes = ", ".join(f"{cls} {n}" for cls, n in sorted(self.errors.items()))
        example = f"; first: {self.example}" if self.example else ""
        return f"target {label} got 0 ok requests of {self.total} ({classes}){example}"


class _Collector:
    """Driver-side event sink: store first (nothing lost), then progress."""

    def __init__(self, store: RunStore, progress: Any, targets: Sequence[Target]) -> None:
        self.store = store
        self.progress = progress
        # Outcome counts kept incrementally (memory stays flat on long runs; the
        # records themselves live on disk only).
        self.counts = {"scheduled": 0, "ok": 0, "error": 0, "cancelled": 0}
        self.lags: list[LagSummary] = []
        self.raw_warnings: list[tuple[str, str]] = []
        self.labels = [t.label for t in targets]
        self.outcomes = {label: _TargetOutcomes() for label in self.labels}
        #: Preconnected set-up times per (scenario, endpoint), for run.json.
        self.connections: dict[tuple[str, str], list[float | None]] = {}

    @property
    def warnings(self) -> list[str]:
        return collapse_warnings(self.raw_warnings)

    def warn(self, message: str, kind: str = "") -> None:
        self.raw_warnings.append((kind, message))

    def failed_targets(self) -> list[str]:
        return [
            outcome.failure_line(label)
            for label, outcome in self.outcomes.items()
            if outcome.ok == 0
        ]

    def connections_json(self) -> list[dict[str, Any]]:
        return [
            {
                "scenario": scenario,
                "endpoint": endpoint,
                "opened": sum(1 for v in values if v is not None),
                "failed": sum(1 for v in values if v is None),
                "connect_s": [round(v, 6) for v in values if v is not None],
            }
            for (scenario, endpoint), values in self.connections.items()
        ]

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
            outcome = self.outcomes.get(f"{record.endpoint}/{record.model}")
            if outcome is not None:
                outcome.add(record)
        elif isinstance(event, LoopLag):
            self.lags.append(LagSummary(event.max_ms, event.p99_ms, event.samples))
        elif isinstance(event, WorkerWarning):
            self.warn(event.message, event.kind)
        elif isinstance(event, Preconnected):
            key = (event.scenario, event.endpoint)
            self.connections.setdefault(key, []).extend(event.connect_s)
        if self.progress is not None:
            self.progress.on_event(event)


@contextlib.contextmanager
def _simulator(spec: RunSpec) -> Iterator[str | None]:
    """The embedded simulator, in its own process: sharing this interpreter would put
    its CPU work (and its lock) on the measuring loop's timestamps."""
    if not spec.uses_simulator:
        yield None
        return
    from tokrate.sim import SimConfig, simulator_process

    s = spec.simulator
    config = SimConfig(
        tiers_file=s.tiers_file,
        hardware=s.hardware,
        efficiency=s.efficiency,
        time_scale=s.time_scale,
        seed=s.seed,
    )
    with simulator_process(config) as url:
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


def _scenario_info(scenario: Any, n_targets: int) -> Any:
    from tokrate.progress import ScenarioInfo

    return ScenarioInfo(
        name=str(getattr(scenario, "name", "")),
        planned=tuple(_planned_per_target(scenario, n_targets)),
        duration_s=getattr(scenario, "duration_s", None),
        concurrency=getattr(scenario, "concurrency", None),
        rate_rps=getattr(scenario, "rate_rps", None),
    )


def run_benchmark(
    spec: RunSpec,
    *,
    console: Any = None,
    quiet: bool = False,
    stop: threading.Event | None = None,
    base_dir: Path | None = None,
) -> RunResult:
    """Run the benchmark ``spec`` describes and write its run folder (see module doc).

    ``console`` is a rich Console for live progress and warnings (None: no drawing; a
    console that is not a terminal gets one plain progress line every
    ``spec.output.progress_interval_s``); ``quiet`` suppresses the progress but not
    warnings or the lines naming failed targets. ``base_dir`` resolves relative prompt
    paths (default: the config file's folder, else the cwd).

    Raises: ConfigError (ModelNotServed among them), PromptError, OutputError,
    EndpointUnreachable (all before any load is sent); SimulatorError when the
    embedded simulator cannot start.
    """
    from tokrate.engine import STOP_GRACE_S
    from tokrate.plan import build_plan, shard
    from tokrate.preflight import check_targets
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
            check_targets(targets, keys, api=spec.client.api)
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
                "label": spec.output.label,
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
                "preconnect": spec.client.preconnect,
                "connections": [],
                "warnings": [],
                "loop_lag": None,
                "counts": None,
            }
        )
        progress = None
        if console is not None and not quiet:
            from tokrate.progress import RunProgress

            progress = RunProgress(
                console,
                [t.label for t in targets],
                [_scenario_info(sc, len(targets)) for sc in plan.scenarios],
                title=f"tokrate run {spec.output.label or run_id}",
                stop=stop,
                grace_s=STOP_GRACE_S,
                interval_s=spec.output.progress_interval_s,
            )
            stack.enter_context(progress)
        sink = _Collector(store, progress, targets)
        stack.enter_context(_sigint_sets(stop))
        interrupted = False
        try:
            for k, _scenario in enumerate(plan.scenarios):
                if stop.is_set():
                    interrupted = True
                    break
                if progress is not None:
                    progress.start_scenario(k)
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
        failed = [] if interrupted else sink.failed_targets()
        for line in failed:
            sink.warn(line, "no_ok_requests")
        counts = dict(sink.counts)
        status = "interrupted" if interrupted else "complete"
        _frame, summary = store.finalize(
            status=status,
            summarize=_summarizer(),
            warnings=sink.warnings,
            loop_lag=loop_lag,
            counts=counts,
            connections=sink.connections_json(),
        )
    warnings = list(sink.warnings)
    if console is not None:
        _print_warnings(console, sink, failed)
    if spec.output.report:
        _report(run_dir, spec, warnings, console)
    exit_code = 130 if interrupted else (1 if failed else 0)
    comparison: list[Any] = []
    baseline_result = None
    if spec.baseline and not interrupted:
        from tokrate.compare import check_baseline, merge_thresholds, parse_threshold

        thresholds = merge_thresholds(parse_threshold(t) for t in spec.compare.thresholds)
        code = check_baseline(
            run_dir,
            spec.baseline,
            Path(spec.output.dir),
            thresholds,
            on_comparison=comparison.append,
        )
        exit_code = max(exit_code, code)
        baseline_result = _baseline_line(spec.baseline, comparison[0] if comparison else None)
    return RunResult(
        run_dir=run_dir,
        summary=summary,
        exit_code=exit_code,
        interrupted=interrupted,
        warnings=tuple(warnings),
        failed_targets=tuple(failed),
        label=spec.output.label,
        comparison=comparison[0] if comparison else None,
        baseline_result=baseline_result,
    )


def _print_warnings(console: Any, sink: _Collector, failed: Sequence[str]) -> None:
    """After the run. With live progress the first warning of each kind was printed as
    it came, so only kinds that repeated print again, collapsed with their count;
    without it (``--quiet``) every collapsed warning prints now. Then one error line
    per target without a single ok request."""
    live = sink.progress is not None
    for line, n in _collapsed(sink.raw_warnings):
        if line in failed or (live and n == 1):
            continue
        console.print(f"warning: {line}", markup=False, highlight=False, soft_wrap=True)
    for line in failed:
        console.print(f"error: {line}", markup=False, highlight=False, soft_wrap=True)


def _baseline_line(baseline: str, comparison: Any) -> str:
    """One line: what the baseline check decided."""
    if comparison is None:
        return f"baseline {baseline}: no baseline run yet; this run becomes {baseline}"
    n = comparison.counts
    word = {"regressed": "REGRESSION", "ok": "no regression", "not_comparable": "not comparable"}[
        comparison.verdict
    ]
    return (
        f"baseline {comparison.baseline_run_id}: {word} ({n['regressed']} regressed,"
        f" {n['improved']} improved, {n['unchanged']} unchanged,"
        f" {n['not_comparable']} not comparable)"
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
            console.print(
                f"[yellow]warning:[/] {message}", markup=True, highlight=False, soft_wrap=True
            )


def _version() -> str:
    from tokrate import __version__

    return __version__


def _now() -> str:
    return _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")
