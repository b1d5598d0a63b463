"""``run_benchmark(spec)``: the whole of ``tokrate run`` as one library call.

A short pipeline, each step finishing before the next starts; nothing is sent before
*measure*:

- **prepare** (:func:`_prepare`): read the API keys and prompts, open the run folder
  (:class:`~tokrate.runfolder.store.RunStore` checks it is creatable, writable and has free
  space), start the embedded simulator when no endpoint is configured (in its own
  process, so it shares no interpreter lock with the measuring loop), resolve the
  targets (:func:`tokrate.inputs.targets.resolve_targets`), run the pre-flight
  (:func:`tokrate.client.preflight.check_targets`: every endpoint answers and serves
  every model, else exit 2 with the server's reply), build the plan and open the
  backend. Any failure here leaves no run folder behind.
- **measure** (:func:`_measure`): scenario after scenario, the backend runs the
  workers' shards and every event goes to the :class:`~tokrate.load.collector.Collector`
  (the store first, then live progress). Meanwhile a
  :class:`~tokrate.load.scrape.MetricsSampler` scrapes every endpoint's
  ``metrics_url`` in a thread of its own (server_metrics.jsonl, which the finishing
  child turns into server_metrics.parquet; a failed scrape is one warning, never a
  failed run).
  With ``[load] capacity`` the scenarios are the capacity search's probes instead
  (:mod:`tokrate.load.capacity_search`), each run through the same backend.
- **finish** (:func:`_finish`): run.json gets what the load learned (counts, warnings,
  loop lag, connections, scrapes; capacity.json after a search), then one child
  process (:mod:`tokrate.finish.child`: ``python -m tokrate.finish``) writes
  records.parquet, server_metrics.parquet, summary.json and the final run.json, builds the report and runs the
  baseline check; this process reads summary.json and comparison.json back with their
  readers. It never imports polars, numpy or matplotlib for any of it. A target that
  got no ok request at all makes the exit code 1, with one line per such target naming
  its error classes and counts.

Ctrl-C, SIGTERM (what ``timeout`` and CI schedulers send) and SIGHUP all stop the run
the same way, in every phase (tokrate.load.signals): before the load, at once, leaving
no run folder; during it, workers stop scheduling, in-flight requests get the grace
period, the rest are recorded as cancelled, everything is written with status
"interrupted"; after it, the finishing child still writes records.parquet,
summary.json and the final run.json, skips the report and the baseline check, and
this process waits for it. The exit code is 128 + the signal (130 for Ctrl-C, 143 for
SIGTERM, 129 for SIGHUP). A third signal during the load ends the grace period at once
(in-flight requests recorded as cancelled, every file still written).
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from tokrate.errors import FinishError, OutputError, TokrateError
from tokrate.finish.child import ChildStop, FinishOutcome, FinishRequest, run_finish
from tokrate.inputs.prompt_base import Prompt, check_entries
from tokrate.inputs.prompts import LoadedPrompts
from tokrate.inputs.targets import Target, api_keys, resolve_targets, run_redactor
from tokrate.inputs.workloads import UNIQUE_TAG_TOKENS
from tokrate.load.auto_sample import AutoSample, SampleNeeds
from tokrate.load.backends.clocks import clock_warnings
from tokrate.load.collector import Collector
from tokrate.load.notices import finishing_line, print_notice, said_if_slow
from tokrate.load.plan import Plan, ScenarioPlan
from tokrate.load.prompt_use import implied_checks_text, source_text, unsent_warnings, with_sent
from tokrate.load.record_warnings import RecordWarnings
from tokrate.load.run_start import start_info
from tokrate.load.scrape import MetricsSampler
from tokrate.load.signals import SignalStopper, stop_on_signals
from tokrate.load.spend import PlanCost, SpendMeter, check_cap, estimate_line, estimate_plan
from tokrate.load.stop_rules import StopRules
from tokrate.load.worker.engine import STOP_GRACE_S, WorkerTask
from tokrate.load.worker.events import Event, WorkerWarning
from tokrate.load.worker.looplag import MAX_THRESHOLD_MS, P99_THRESHOLD_MS, merge
from tokrate.load.worker.settings import WorkerSettings
from tokrate.load.worker.stopping import Stop
from tokrate.redact import Redactor
from tokrate.runfolder.prompt_sources import PromptSourceInfo
from tokrate.runfolder.run_info import BenchmarkInfo, LoopLagInfo, SamplingStop, ScenarioLag
from tokrate.runfolder.store import (
    RunStore,
    iso_now,
    load_summary,
    new_run_id,
    write_capacity,
    write_checks,
)
from tokrate.runfolder.summary import Summary
from tokrate.spec.config_file import prompts_base_dir
from tokrate.spec.types import RunSpec
from tokrate.textfmt import nice_bin_width

if TYPE_CHECKING:
    from rich.console import Console

    from tokrate.load.backends import Backend
    from tokrate.load.capacity_search import CapacityRun
    from tokrate.load.progress import RunProgress
    from tokrate.load.worker.events import Emit
    from tokrate.runfolder.comparison import Comparison

__all__ = [
    "RunResult",
    "run_benchmark",
]


@dataclass(frozen=True, slots=True)
class RunResult:
    """What a run produced. ``exit_code``: 0 ok; 1 a baseline regression (confirmed by
    a re-measurement unless ``compare.confirm`` is off) or a target that got no ok
    request; 2 nothing comparable with the baseline; 3 no regression, but a verdict
    was inconclusive (client overloaded, too few samples); 128 + signal when a signal
    stopped it (130 Ctrl-C, 143 SIGTERM).

    ``warnings`` are one line each (repeats of one kind collapsed); ``failed_targets``
    the lines naming every target with no ok request (its error classes with counts);
    ``comparison`` the Comparison of a ``baseline`` check, as comparison.json holds it
    (None without one, or when there was no baseline yet); ``baseline_result`` a
    one-line verdict of that check.
    """

    run_dir: Path
    summary: Summary | None
    exit_code: int
    interrupted: bool
    warnings: tuple[str, ...] = ()
    failed_targets: tuple[str, ...] = ()
    label: str | None = None
    comparison: Comparison | None = None
    baseline_result: str | None = None
    #: The signal (``SIGTERM``) that came after the load, while its files were being
    #: finished: the load is whole, the report or baseline check skipped (warnings).
    stopped_by: str | None = None


# --- run.json ---------------------------------------------------------------------------


# --- prepare ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Prepared:
    run_id: str
    targets: tuple[Target, ...]
    prompts: tuple[Prompt, ...]
    plan: Plan
    shards: tuple[Plan, ...]
    keys: Mapping[str, str]
    backend: Backend
    store: RunStore
    redactor: Redactor
    #: The prompts' sources (run.json ``prompts``; what was sent is added at the end).
    loaded: LoadedPrompts
    #: Pre-flight warnings (prompts that cannot fit a server's context), for run.json.
    notices: tuple[str, ...] = ()
    #: Targets sized from what their server reported (said before the load), and
    #: configured sizes a server contradicts (warnings).
    size_notes: tuple[str, ...] = ()
    size_warnings: tuple[str, ...] = ()
    #: The plan priced at the targets' token prices (None: no target has them).
    cost: PlanCost | None = None


@contextlib.contextmanager
def _simulator(spec: RunSpec) -> Iterator[tuple[str, Sequence[Any]] | None]:
    """The embedded simulator (base URL and tiers), or None when endpoints are set."""
    if not spec.uses_simulator:
        yield None
        return
    from tokrate.sim.server import SimConfig, configured_tiers, simulator_process

    s = spec.simulator
    config = SimConfig(
        tiers_file=s.tiers_file,
        hardware=s.hardware,
        efficiency=s.efficiency,
        time_scale=s.time_scale,
        seed=s.seed,
        prefix_cache=s.prefix_cache,
        prefix_cache_cold=s.prefix_cache_cold,
        request_metrics=s.request_metrics,
    )
    tiers = configured_tiers(config)
    with simulator_process(config) as url:
        yield url, tiers


def _short_names(targets: Sequence[Target]) -> list[str]:
    """Model names for sequential scenario names ("c=4 [sim-7b]"), endpoint/model
    where two endpoints serve the same model name."""
    models = [t.model.name for t in targets]
    if len(set(models)) == len(models):
        return models
    return [t.label for t in targets]


def _prepare(
    spec: RunSpec,
    base_dir: Path | None,
    stack: contextlib.ExitStack,
    console: Console | None,
    stopper: SignalStopper,
    notify: Callable[[str, str], None] | None = None,
) -> _Prepared:
    """Everything before the first request (see the module doc); ``console`` hears
    that the pre-flight is running when it takes more than a second; ``stopper``
    moves on to its measure phase once the run folder is complete. The plan's cost at
    the targets' token prices is told to ``notify(kind, line)`` and checked against
    ``--max-cost`` before the pre-flight sends anything. Raises ConfigError (a plan
    over the cost cap among them), PromptError, OutputError, RunFolderError (an
    unreadable baseline), EndpointUnreachable, ModelNotServed, SimulatorError,
    RunInterrupted (a stop signal); a failure leaves no run folder behind."""
    from tokrate.client.preflight import check_targets, unfit_prompts
    from tokrate.client.request import RequestSettings, check_translations
    from tokrate.inputs.prompts import load_prompt_sources
    from tokrate.inputs.served_sizes import with_served_sizes
    from tokrate.inputs.tokencount import check_tokenizers
    from tokrate.load.backends.selection import open_backend
    from tokrate.load.open_files import ensure_open_files
    from tokrate.load.plan import build_plan, shard

    run_id = spec.output.run_id or new_run_id()
    keys = api_keys(spec)
    redactor = run_redactor(spec, keys)
    if spec.baseline is not None:
        from tokrate.finish.baseline_ref import check_baseline_ref

        check_baseline_ref(spec.baseline, spec.output.dir, spec.compare.thresholds_from_history)
    check_tokenizers(spec.models, spec.source or "command line")
    loaded = load_prompt_sources(
        spec.prompts,
        base_dir=base_dir or prompts_base_dir(spec),
        # Grid prompts leave room for the cache-busting tag: the server counts exactly.
        reserve_tokens=UNIQUE_TAG_TOKENS if spec.client.unique_prompts else 0,
    )
    prompts = loaded.prompts
    store = RunStore(Path(spec.output.dir) / run_id)
    stack.callback(store.close)
    try:
        simulator = stack.enter_context(_simulator(spec))
        targets = resolve_targets(spec, simulator)
        # Nothing is sent before every prompt's fields reach every target's protocol.
        check_translations(targets, prompts, RequestSettings(api=spec.client.api))
        # Priced before anything is sent, the pre-flight's one-token probes included.
        plan = build_plan(spec, len(prompts), len(targets), target_names=_short_names(targets))
        cost = estimate_plan(spec, plan, prompts, targets)
        check_cap(cost, spec.load.max_cost_usd)
        if cost is not None and notify is not None:
            notify("cost", estimate_line(cost, spec.load.max_cost_usd))
        probe_warnings: list[str] = []
        with said_if_slow(console, "pre-flight", _preflight_line(targets)):
            served = check_targets(targets, keys, api=spec.client.api, warnings=probe_warnings)
        targets, size_notes, size_warnings = with_served_sizes(targets, served)
        size_warnings = [*probe_warnings, *size_warnings]
        notices = tuple(unfit_prompts(targets, served, prompts))
        # Before the workers start: they inherit the raised limit.
        ensure_open_files(spec, plan)
        backend = open_backend(spec, plan)
        stack.callback(backend.close)
        shards = shard(plan, backend.workers) if backend.workers > 1 else (plan,)
        info = start_info(run_id, spec, targets, plan, backend)
        info = dataclasses.replace(info, config=redactor.value(info.config), prompts=loaded.sources)
        # The benchmark of the run as written (secrets already removed), so a reader
        # deriving it from run.json gets the same fingerprint.
        store.start(dataclasses.replace(info, benchmark=BenchmarkInfo.of(info)))
        write_checks(store.path, check_entries(prompts))
        # From here a signal stops the load instead (the run folder is complete).
        stopper.enter("measure")
    except BaseException:
        store.discard()
        raise
    return _Prepared(
        run_id,
        targets,
        prompts,
        plan,
        shards,
        keys,
        backend,
        store,
        redactor,
        loaded,
        notices,
        tuple(size_notes),
        tuple(size_warnings),
        cost,
    )


def _preflight_line(targets: Sequence[Target]) -> str:
    from tokrate.client.preflight import PROBE_DEADLINE_S

    endpoints = len({t.endpoint.name for t in targets})
    what = "1 endpoint" if endpoints == 1 else f"{endpoints} endpoints"
    return (
        f"checking {what} before any load (GET /models, else a one-token request per"
        f" model; at most {PROBE_DEADLINE_S:g} s each)"
    )


def _announce(p: _Prepared, console: Console) -> None:
    """Before any load: where the prompts come from (a user who named one file sees
    that nothing else is sent), and the targets sized from what their server said."""
    print_notice(console, "prompts", source_text(p.loaded.sources))
    implied = implied_checks_text(p.prompts)
    if implied is not None:
        print_notice(console, "checks", implied)
    for line in p.size_notes:
        print_notice(console, "note", line)


def _preflight_warnings(p: _Prepared, sink: Collector) -> None:
    for line in p.notices:
        sink(WorkerWarning("driver", line, "context_preflight"))
    for line in p.size_warnings:
        sink(WorkerWarning("driver", line))  # one each: they name their targets


def _prompts_sent(
    spec: RunSpec, p: _Prepared, sink: Collector, interrupted: bool
) -> tuple[PromptSourceInfo, ...]:
    """run.json ``prompts`` with what was sent; a warning per prompt file not sent in
    full (tokrate.load.prompt_use)."""
    sources = with_sent(
        p.loaded, sink.sent_prompts, p.plan, interrupted=interrupted, seed=spec.load.seed
    )
    for line in unsent_warnings(sources):
        sink(WorkerWarning("driver", line, "prompts_unsent"))
    return sources


# --- measure ----------------------------------------------------------------------------


def _progress(spec: RunSpec, p: _Prepared, console: Console, stop: Stop) -> RunProgress:
    from tokrate.load.progress import RunProgress
    from tokrate.load.progress import ScenarioInfo as ProgressScenario

    n = len(p.targets)
    # A session is one planned request of several turns, each its own request.
    turns = sum(len(q.turns) + 1 for q in p.prompts) / len(p.prompts)

    def planned(sc: ScenarioPlan, t: int) -> int | None:
        k = sc.planned_per_target if t in sc.target_indices else 0
        return None if k is None else round(k * turns)

    return RunProgress(
        console,
        [t.label for t in p.targets],
        [
            ProgressScenario(
                name=sc.name,
                planned=tuple(planned(sc, t) for t in range(n)),
                duration_s=sc.duration_s,
                concurrency=sc.concurrency,
                rate_rps=sc.rate_rps,
            )
            for sc in p.plan.scenarios
        ],
        title=f"tokrate run {spec.output.label or p.run_id}",
        stop=stop,
        grace_s=STOP_GRACE_S,
        interval_s=spec.output.progress_interval_s,
    )


def _tasks(spec: RunSpec, p: _Prepared, parts: Sequence[ScenarioPlan]) -> list[WorkerTask]:
    """One WorkerTask per shard of one scenario."""
    return [
        WorkerTask(
            run_id=p.run_id,
            worker_id=f"w{w}",
            scenario=part,
            settings=WorkerSettings.from_spec(spec, p.redactor),
            targets=p.targets,
            prompts=p.prompts,
            api_keys=p.keys,
            open_loop_cap=spec.load.max_in_flight,
        )
        for w, part in enumerate(parts)
    ]


def _measure(
    spec: RunSpec,
    p: _Prepared,
    sink: Collector,
    stop: Stop,
    rules: StopRules,
    sampling: list[SamplingStop],
) -> bool:
    """Run every scenario, each under its own Stop (a child of the run's, which a
    stopping rule may set: tokrate.load.stop_rules); True when a signal ended the run
    early. A rule that ended the run (``rules.halted``) starts no further scenario.
    With ``requests = "auto"`` the scenario's Stop is also set once every judged
    statistic has its samples (tokrate.load.auto_sample); why each target's level
    stopped goes into ``sampling``."""
    needs = SampleNeeds.of(spec, p.prompts) if spec.load.requests == "auto" else None
    for k, scenario in enumerate(p.plan.scenarios):
        if stop.is_set():
            return True
        if rules.halted is not None:
            break
        if sink.progress is not None:
            sink.progress.start_scenario(k)
        own = Stop(stop)
        rules.begin(scenario.name, own)
        tasks = _tasks(spec, p, [s.scenarios[k] for s in p.shards])
        if needs is None:
            p.backend.run_scenario(tasks, sink, own)
        else:
            watch = AutoSample(scenario.name, len(scenario.target_indices), needs, own, stop)

            def on_event(event: Event, watch: AutoSample = watch) -> None:
                sink(event)
                watch.on_event(event)

            p.backend.run_scenario(tasks, on_event, own)
            sampling += watch.outcome(spec.load.max_requests, spec.load.duration_s is not None)
        _end_scenario(p, sink)
    return stop.is_set()


def _end_scenario(p: _Prepared, sink: Collector) -> None:
    """Flush the scenario's records; a disk that refuses stops the load (the collector
    says so, as for a record it could not write)."""
    try:
        p.store.end_scenario()
    except OutputError as err:
        sink.stop_on_write_error(err)


def _search_capacity(
    spec: RunSpec, p: _Prepared, sink: Collector, stop: Stop, console: Console | None
) -> CapacityRun:
    """The capacity search (tokrate.load.capacity_search): each probe one scenario of this run."""
    from tokrate.load.capacity_search import measure_capacity
    from tokrate.load.plan import shard

    def run_scenario(scenario: ScenarioPlan, on_event: Emit, probe_stop: Stop) -> None:
        n = p.backend.workers
        parts = shard(scenario, n) if n > 1 else (scenario,)
        p.backend.run_scenario(_tasks(spec, p, parts), on_event, probe_stop)
        _end_scenario(p, sink)

    names = _short_names(p.targets)
    return measure_capacity(
        spec, p.targets, names, len(p.prompts), run_scenario, sink, stop, console
    )


# --- finish -----------------------------------------------------------------------------


def _stopped_by_the_disk(p: _Prepared, sink: Collector) -> NoReturn:
    """The store could not write a record (a full disk): the load stopped at once
    (tokrate.load.collector); records.jsonl is cut back to its last whole line, run.json
    says "interrupted" where the disk still takes it, and the run ends in one line (exit
    2). No finishing step: it would write to the same full disk. Raises OutputError."""
    assert sink.write_error is not None
    p.store.cut_torn_line()
    with contextlib.suppress(OutputError):
        p.store.update(
            status="interrupted",
            ended_at=iso_now(),
            warnings=tuple(sink.warnings),
            counts=sink.outcome_counts(),
        )
    lost = f" ({sink.lost:,} that ended later are not saved)" if sink.lost else ""
    raise OutputError(
        f"{sink.write_error}: the load was stopped after {p.store.count:,} records{lost};"
        f" records.jsonl keeps each saved one whole; free some space, then build the"
        f" report: tokrate report {p.store.path}"
    )


def _loop_lag(sink: Collector) -> LoopLagInfo:
    lag = merge(sink.lags)
    return LoopLagInfo(
        threshold_ms=P99_THRESHOLD_MS,
        max_threshold_ms=MAX_THRESHOLD_MS,
        max_ms=round(lag.max_ms, 3),
        p99_ms=round(lag.p99_ms, 3),
        samples=lag.samples,
        # Judged per worker and scenario (each against its own sample count).
        exceeded=any(part.exceeded for part in sink.lags),
        scenarios=tuple(
            ScenarioLag(name, round(s.max_ms, 3), round(s.p99_ms, 3), s.samples, exceeded)
            for name, (s, exceeded) in sink.scenario_lags.items()
        ),
    )


def _finish_request(spec: RunSpec, run_dir: Path, interrupted: bool) -> FinishRequest:
    """What the finishing process does after this load (no baseline check after a
    stop: an interrupted run is judged by nobody)."""
    baseline = None if interrupted else spec.baseline
    return FinishRequest(
        run_dir=run_dir,
        status="interrupted" if interrupted else "complete",
        report_formats=tuple(spec.output.formats) if spec.output.report else (),
        baseline=baseline,
        reports_root=Path(spec.output.dir),
        thresholds=tuple(spec.compare.thresholds),
        thresholds_from_history=spec.compare.thresholds_from_history,
    )


def _raise_problems(outcome: FinishOutcome, run_dir: Path) -> None:
    """A failed finalize or baseline check is this run's error (the records are saved
    in records.jsonl either way); a failed report, or a step a signal skipped, is only
    a warning (_finish_warnings)."""
    finalize = outcome.problem("finalize")
    if finalize is not None:
        raise FinishError(
            f"{run_dir}: the run's files were not finished ({finalize.error}); every record"
            " is in records.jsonl",
            finalize.exit_code,
        )
    baseline = outcome.problem("baseline")
    if baseline is not None and not baseline.stopped:
        raise FinishError(baseline.error, baseline.exit_code)


def _finish_warnings(outcome: FinishOutcome, run_dir: Path) -> list[str]:
    """The warnings of a report that was not built (the measurements are safe on disk,
    so it says how to build it) and of a baseline check a signal skipped."""
    out = []
    report = outcome.problem("report")
    if report is not None:
        why = report.error or "the report process failed"
        out.append(f"report not built: tokrate report {run_dir} ({why}; the run is saved)")
    baseline = outcome.problem("baseline")
    if baseline is not None and baseline.stopped:
        out.append(f"{baseline.error}; the run is saved")
    return out


# --- the pipeline -----------------------------------------------------------------------


def _confirm(
    spec: RunSpec, run_dir: Path, groups: Sequence[tuple[str, str, str]], console: Console | None
) -> Comparison | None:
    """The confirmation pass (tokrate.load.confirm): ``groups`` measured again into
    ``run_dir/confirm``, then the baseline step again (``--baseline`` only), whose
    comparison reads the re-measurement. The re-measurement's own exit code does not
    matter: one that failed or was stopped confirms nothing, and the regression stands
    as measured."""
    from tokrate.load.confirm import confirm_line, confirm_spec
    from tokrate.runfolder.comparison import read_comparison

    if console is not None:
        print_notice(console, "confirm", confirm_line(groups))
    try:
        run_benchmark(confirm_spec(spec, run_dir, groups), console=console, quiet=True)
    except TokrateError as err:
        if console is not None:
            line = f"the re-measurement did not run ({err}); the regression stands"
            print_notice(console, "warning", line)
    request = dataclasses.replace(
        _finish_request(spec, run_dir, interrupted=False), status=None, report_formats=()
    )
    _raise_problems(run_finish(request), run_dir)
    return read_comparison(run_dir)


def _notifier(console: Console | None, quiet: bool) -> Callable[[str, str], None] | None:
    """Where lines said before the load go (the cost estimate): the console's notices."""
    if console is None or quiet:
        return None
    shown = console

    def notify(kind: str, line: str) -> None:
        print_notice(shown, kind, line)

    return notify


def _load(
    spec: RunSpec,
    p: _Prepared,
    sink: Collector,
    stop: Stop,
    rules: StopRules,
    sampling: list[SamplingStop],
    console: Console | None,
) -> CapacityRun | None:
    """The measure step: the sweep's scenarios, or the capacity search (its result)."""
    if spec.load.capacity is None:
        _measure(spec, p, sink, stop, rules, sampling)
        return None
    # The search's own Stop: a stopping rule ends the search, a signal the run.
    search = Stop(stop)
    rules.begin("capacity search", search)
    return _search_capacity(spec, p, sink, search, console)


def run_benchmark(
    spec: RunSpec,
    *,
    console: Console | None = None,
    quiet: bool = False,
    stop: Stop | None = None,
    base_dir: Path | None = None,
) -> RunResult:
    """Run the benchmark ``spec`` describes and write its run folder (module doc).

    ``console`` is a rich Console for live progress and warnings (None: no drawing; a
    console that is not a terminal gets one plain progress line every
    ``spec.output.progress_interval_s``); ``quiet`` suppresses the progress but not
    warnings or the lines naming failed targets. ``stop`` (set it from another thread)
    stops the run as a signal would. ``base_dir`` resolves relative prompt paths
    (default: the config file's folder, else the cwd). Everything after the load runs
    in one child process (module doc); nothing here draws a table.

    Raises: ConfigError (ModelNotServed among them), PromptError, OutputError,
    RunFolderError, EndpointUnreachable (all before any load is sent, leaving no run
    folder); SimulatorError when the embedded simulator cannot start; FinishError when
    the run's files could not be finished or the baseline check failed (the records
    are saved either way).
    """
    stop = stop or Stop()
    stopper = SignalStopper(stop)
    child_stop = ChildStop()
    stopper.child_stop = child_stop.request
    with stop_on_signals(stopper):
        return _run(spec, console, quiet, stop, stopper, child_stop, base_dir)


def _run(
    spec: RunSpec,
    console: Console | None,
    quiet: bool,
    stop: Stop,
    stopper: SignalStopper,
    child_stop: ChildStop,
    base_dir: Path | None,
) -> RunResult:
    """run_benchmark's steps, under its signal handlers (tokrate.load.signals)."""
    with contextlib.ExitStack() as stack:
        p = _prepare(spec, base_dir, stack, console, stopper, _notifier(console, quiet))
        if console is not None and not quiet:
            _announce(p, console)
        progress = None
        searching = spec.load.capacity is not None
        if console is not None and not quiet and not searching:
            progress = stack.enter_context(_progress(spec, p, console, stop))
        watch = RecordWarnings({q.id: q.max_tokens for q in p.prompts}, spec.client.unique_prompts)
        meter = SpendMeter.for_targets(p.targets, spec.load.max_cost_usd)
        rules = StopRules([meter] if meter is not None else [])
        # A record the disk refuses stops the load like a third signal (at once).
        sink = Collector(p.store, progress, p.targets, p.redactor, watch, stop.abort, rules)
        _preflight_warnings(p, sink)
        capacity = None
        sampling: list[SamplingStop] = []
        sampler = MetricsSampler.for_endpoints(t.endpoint for t in p.targets)
        sampler.start()
        try:
            capacity = _load(spec, p, sink, stop, rules, sampling, None if quiet else console)
            interrupted = stop.is_set()
        finally:
            # From here nothing is cut short: a signal is passed to the finishing child.
            stopper.enter("finish")
            scrapes = sampler.finish(
                p.store.path,
                redact=p.redactor.text,
                warn=lambda line, kind: sink(WorkerWarning("driver", line, kind)),
            )
        if sink.write_error is not None:
            if progress is not None:
                progress.close()
            _stopped_by_the_disk(p, sink)
        sink.finish_record_warnings()
        if rules.halted is not None:
            sink(WorkerWarning("driver", rules.halted.detail, rules.halted.rule))
        sources = _prompts_sent(spec, p, sink, interrupted or rules.halted is not None)
        for line in clock_warnings(p.backend.nodes, nice_bin_width(sink.span_s)):
            sink(WorkerWarning("driver", line, "node_clock"))
        if progress is not None:
            progress.close()
        if console is not None and not quiet:
            console.print(finishing_line(spec.output.report), markup=False, highlight=False)
        failed = [] if interrupted else sink.failed_targets(sent_only=rules.halted is not None)
        for line in failed:
            sink.warn(line, "no_ok_requests")
        changes: dict[str, Any] = {}
        if sampling:
            changes["sampling"] = tuple(sampling)
        if capacity is not None:  # the probes it ran, and capacity.json before the summary
            changes["scenarios"] = capacity.scenarios
            write_capacity(p.store.path, capacity.result)
        p.store.update(
            warnings=tuple(sink.warnings),
            loop_lag=_loop_lag(sink),
            counts=sink.outcome_counts(),
            connections=sink.connection_setups(),
            server_metrics=scrapes,
            prompts=sources,
            nodes=p.backend.nodes,
            spend=None if meter is None else meter.info(p.cost),
            stopped=rules.stopped,
            **changes,
        )
    return _finish(spec, console, stopper, child_stop, p.store.path, sink, failed, interrupted)


def _finish(
    spec: RunSpec,
    console: Console | None,
    stopper: SignalStopper,
    child_stop: ChildStop,
    run_dir: Path,
    sink: Collector,
    failed: Sequence[str],
    interrupted: bool,
) -> RunResult:
    """The finishing child, what it said, and the baseline's verdict (module doc)."""
    outcome = run_finish(_finish_request(spec, run_dir, interrupted), stop=child_stop)
    warnings = list(sink.warnings)
    if console is not None:
        sink.print_warnings(console, failed)
    for line in _finish_warnings(outcome, run_dir):
        warnings.append(line)
        if console is not None:
            print_notice(console, "warning", line)
    _raise_problems(outcome, run_dir)
    exit_code = stopper.exit_code if stopper.signalled else (1 if failed else 0)
    comparison = None
    baseline_result = None
    if spec.baseline and not interrupted and not stopper.signalled:
        from tokrate.report.terminal.comparison_text import baseline_verdict_line
        from tokrate.runfolder.comparison import combined_exit, read_comparison

        comparison = read_comparison(run_dir)
        if comparison is not None and comparison.unconfirmed and spec.compare.confirm:
            comparison = _confirm(spec, run_dir, comparison.unconfirmed, console)
        exit_code = combined_exit(exit_code, 0 if comparison is None else comparison.exit_code)
        baseline_result = baseline_verdict_line(spec.baseline, comparison)
    return RunResult(
        run_dir=run_dir,
        summary=load_summary(run_dir),
        exit_code=exit_code,
        interrupted=interrupted,
        warnings=tuple(warnings),
        failed_targets=tuple(failed),
        label=spec.output.label,
        comparison=comparison,
        baseline_result=baseline_result,
        stopped_by=stopper.name if stopper.signalled and not interrupted else None,
    )
