"""The second step of a run: the load, and what run.json learns from it.

:func:`measure` runs the prepared plan scenario after scenario: the backend runs the
workers' shards and every event goes to the :class:`~tokrate.load.collector.Collector`
(the store first, then the live progress). Each scenario runs under its own
:class:`~tokrate.load.worker.stopping.Stop`, a child of the run's, which a stopping
rule may set (tokrate.load.stop_rules: ``--max-cost``'s spend meter); with ``requests
= "auto"`` it is also set once every judged statistic has its samples
(tokrate.load.auto_sample). With ``[load] capacity`` the scenarios are the capacity
search's probes instead (tokrate.load.capacity_search), each run through the same
backend. Meanwhile a :class:`~tokrate.load.scrape.MetricsSampler` scrapes every
endpoint's ``metrics_url`` in a thread of its own (server_metrics.jsonl; a failed
scrape is one warning, never a failed run).

After the load, run.json gets what it learned (counts, warnings, loop lag,
connections, scrapes, spend, prompts sent; capacity.json after a search), and what
the last step needs is one :class:`Measured`. A record the disk refused ends the run
here instead (:class:`~tokrate.errors.OutputError`, exit 2: no finishing step writes
to a full disk).
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from tokrate.errors import OutputError
from tokrate.load.auto_sample import AutoSample, SampleNeeds, budget_warnings
from tokrate.load.backends.clocks import clock_warnings
from tokrate.load.collector import Collector
from tokrate.load.live import LiveOutput
from tokrate.load.notices import finishing_line
from tokrate.load.plan import ScenarioPlan
from tokrate.load.prepare import Prepared
from tokrate.load.prompt_use import unsent_warnings, with_sent
from tokrate.load.record_warnings import RecordWarnings
from tokrate.load.scrape import MetricsSampler
from tokrate.load.signals import SignalStopper
from tokrate.load.spend import SpendMeter
from tokrate.load.stop_rules import StopRules
from tokrate.load.worker.engine import STOP_GRACE_S, WorkerTask
from tokrate.load.worker.events import Event, WorkerWarning
from tokrate.load.worker.looplag import MAX_THRESHOLD_MS, P99_THRESHOLD_MS, merge
from tokrate.load.worker.settings import WorkerSettings
from tokrate.load.worker.stopping import Stop
from tokrate.runfolder.prompt_sources import PromptSourceInfo
from tokrate.runfolder.run_info import LoopLagInfo, SamplingStop, ScenarioLag, ScrapeInfo
from tokrate.runfolder.store import iso_now, write_capacity
from tokrate.spec.types import RunSpec
from tokrate.textfmt import nice_bin_width

if TYPE_CHECKING:
    from tokrate.load.capacity_search import CapacityRun
    from tokrate.load.worker.events import Emit

__all__ = ["Measured", "measure"]


@dataclass(frozen=True, slots=True)
class Measured:
    """A run whose load is over and whose run.json says what it learned; what the
    finishing step (tokrate.load.finish) needs of it."""

    spec: RunSpec
    run_dir: Path
    #: The run's signal handling, now in its finish phase (tokrate.load.signals).
    stopper: SignalStopper
    #: A stop signal ended the load early (the run's status is "interrupted").
    interrupted: bool
    #: run.json's warnings, one line per kind (repeats collapsed).
    warnings: tuple[str, ...]
    #: One line per target that got no ok request (its error classes and counts).
    failed_targets: tuple[str, ...]
    #: What the terminal shows after the run, ``(kind, text)`` (Collector.end_notices).
    end_notices: tuple[tuple[str, str], ...]


@dataclass(frozen=True, slots=True)
class _Load:
    """What the load itself returned, besides the collector's counts."""

    capacity: CapacityRun | None
    sampling: tuple[SamplingStop, ...]
    scrapes: tuple[ScrapeInfo, ...]
    interrupted: bool


def measure(p: Prepared, live: LiveOutput) -> Measured:
    """Run the prepared plan (module doc) and update run.json with what the load
    learned; ``live`` draws the progress (not during a capacity search, which says
    each probe's verdict in one line instead) and shows warnings as they come.

    Raises OutputError when the disk refused a record (the load stopped at once;
    records.jsonl keeps each saved one whole)."""
    spec = p.spec
    meter = SpendMeter.for_targets(p.targets, spec.load.max_cost_usd)
    rules = StopRules([meter] if meter is not None else [])
    with _progress(p, live):
        watch = RecordWarnings({q.id: q.max_tokens for q in p.prompts}, spec.client.unique_prompts)
        # A record the disk refuses stops the load like a third signal (at once).
        sink = Collector(
            p.store, live.progress, p.targets, p.redactor, watch, p.stopper.stop.abort, rules
        )
        _preflight_warnings(p, sink)
        load = _load(p, sink, rules, live)
        if sink.write_error is not None:
            live.close_progress()
            _stopped_by_the_disk(p, sink)
        # While the progress still runs, so these print like the others.
        sink.finish_record_warnings()
        if rules.halted is not None:
            sink(WorkerWarning("driver", rules.halted.detail, rules.halted.rule))
        sources = _prompts_sent(p, sink, load.interrupted or rules.halted is not None)
        for line in clock_warnings(p.backend.nodes, nice_bin_width(sink.span_s)):
            sink(WorkerWarning("driver", line, "node_clock"))
    live.line(finishing_line(spec.output.report))
    failed = [] if load.interrupted else sink.failed_targets(sent_only=rules.halted is not None)
    for line in failed:
        sink.warn(line, "no_ok_requests")
    changes: dict[str, Any] = {}
    if load.sampling:
        changes["sampling"] = load.sampling
    if load.capacity is not None:  # the probes it ran, and capacity.json before the summary
        changes["scenarios"] = load.capacity.scenarios
        write_capacity(p.store.path, load.capacity.result)
    p.store.update(
        warnings=tuple(sink.warnings),
        loop_lag=_loop_lag(sink),
        counts=sink.outcome_counts(),
        connections=sink.connection_setups(),
        server_metrics=load.scrapes,
        prompts=sources,
        nodes=p.backend.nodes,
        spend=None if meter is None else meter.info(p.cost),
        stopped=rules.stopped,
        **changes,
    )
    return Measured(
        spec=spec,
        run_dir=p.store.path,
        stopper=p.stopper,
        interrupted=load.interrupted,
        warnings=tuple(sink.warnings),
        failed_targets=tuple(failed),
        end_notices=tuple(sink.end_notices(failed)),
    )


def _load(p: Prepared, sink: Collector, rules: StopRules, live: LiveOutput) -> _Load:
    """The sweep's scenarios, or the capacity search, with the metrics sampler
    beside them; a signal from here on goes to the finishing child."""
    stop = p.stopper.stop
    capacity = None
    sampling: list[SamplingStop] = []
    sampler = MetricsSampler.for_endpoints(t.endpoint for t in p.targets)
    sampler.start()
    try:
        if p.spec.load.capacity is None:
            _sweep(p, sink, rules, sampling, live)
        else:
            capacity = _search_capacity(p, sink, rules, live)
        interrupted = stop.is_set()
    finally:
        # From here nothing is cut short: a signal is passed to the finishing child.
        p.stopper.enter("finish")
        scrapes = sampler.finish(
            p.store.path,
            redact=p.redactor.text,
            warn=lambda line, kind: sink(WorkerWarning("driver", line, kind)),
        )
    return _Load(capacity, tuple(sampling), scrapes, interrupted)


def _progress(p: Prepared, live: LiveOutput) -> contextlib.AbstractContextManager[None]:
    """The live progress while the sweep runs (a capacity search draws none: its
    probes are not planned ahead)."""
    if p.spec.load.capacity is not None:
        return contextlib.nullcontext()
    from tokrate.load.progress import ScenarioInfo as ProgressScenario

    n = len(p.targets)
    # A session is one planned request of several turns, each its own request.
    turns = sum(len(q.turns) + 1 for q in p.prompts) / len(p.prompts)

    def planned(sc: ScenarioPlan, t: int) -> int | None:
        k = sc.planned_per_target if t in sc.target_indices else 0
        return None if k is None else round(k * turns)

    return live.showing_progress(
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
        title=f"tokrate run {p.spec.output.label or p.run_id}",
        stop=p.stopper.stop,
        grace_s=STOP_GRACE_S,
        interval_s=p.spec.output.progress_interval_s,
    )


def _preflight_warnings(p: Prepared, sink: Collector) -> None:
    for line in p.notices:
        sink(WorkerWarning("driver", line, "context_preflight"))
    for line in p.size_warnings:
        sink(WorkerWarning("driver", line))  # one each: they name their targets


def _tasks(p: Prepared, parts: Sequence[ScenarioPlan]) -> list[WorkerTask]:
    """One WorkerTask per shard of one scenario."""
    return [
        WorkerTask(
            run_id=p.run_id,
            worker_id=f"w{w}",
            scenario=part,
            settings=WorkerSettings.from_spec(p.spec, p.redactor),
            targets=p.targets,
            prompts=p.prompts,
            api_keys=p.keys,
            open_loop_cap=p.spec.load.max_in_flight,
        )
        for w, part in enumerate(parts)
    ]


def _sweep(
    p: Prepared,
    sink: Collector,
    rules: StopRules,
    sampling: list[SamplingStop],
    live: LiveOutput,
) -> None:
    """Run every scenario, each under its own Stop (a child of the run's, which a
    stopping rule may set); a signal ends the sweep, and so does a rule that ended the
    run (``rules.halted``). With ``requests = "auto"`` the scenario's Stop is also set
    once every judged statistic has its samples; why each target's level stopped goes
    into ``sampling``."""
    spec, stop = p.spec, p.stopper.stop
    needs = SampleNeeds.of(spec, p.prompts) if spec.load.requests == "auto" else None
    for k, scenario in enumerate(p.plan.scenarios):
        if stop.is_set() or rules.halted is not None:
            return
        live.start_scenario(k)
        own = Stop(stop)
        rules.begin(scenario.name, own)
        tasks = _tasks(p, [s.scenarios[k] for s in p.shards])
        if needs is None:
            p.backend.run_scenario(tasks, sink, own)
        else:
            watch = AutoSample(scenario.name, len(scenario.target_indices), needs, own, stop)

            def on_event(event: Event, watch: AutoSample = watch) -> None:
                sink(event)
                watch.on_event(event)

            p.backend.run_scenario(tasks, on_event, own)
            stops = watch.outcome(spec.load.max_requests, spec.load.duration_s is not None)
            sampling += stops
            for line in budget_warnings(stops):  # said as the level ends
                sink(WorkerWarning("driver", line, "auto_budget"))
        _end_scenario(p, sink)


def _end_scenario(p: Prepared, sink: Collector) -> None:
    """Flush the scenario's records; a disk that refuses stops the load (the collector
    says so, as for a record it could not write)."""
    try:
        p.store.end_scenario()
    except OutputError as err:
        sink.stop_on_write_error(err)


def _search_capacity(
    p: Prepared, sink: Collector, rules: StopRules, live: LiveOutput
) -> CapacityRun:
    """The capacity search (tokrate.load.capacity_search): each probe one scenario of
    this run, all under the search's own Stop (a stopping rule ends the search, a
    signal the run)."""
    from tokrate.load.capacity_search import measure_capacity
    from tokrate.load.plan import shard

    search = Stop(p.stopper.stop)
    rules.begin("capacity search", search)

    def run_scenario(scenario: ScenarioPlan, on_event: Emit, probe_stop: Stop) -> None:
        n = p.backend.workers
        parts = shard(scenario, n) if n > 1 else (scenario,)
        p.backend.run_scenario(_tasks(p, parts), on_event, probe_stop)
        _end_scenario(p, sink)

    say = None if live.quiet else live.line
    return measure_capacity(
        p.spec, p.targets, p.names, len(p.prompts), run_scenario, sink, search, say
    )


def _prompts_sent(p: Prepared, sink: Collector, interrupted: bool) -> tuple[PromptSourceInfo, ...]:
    """run.json ``prompts`` with what was sent; a warning per prompt file not sent in
    full (tokrate.load.prompt_use)."""
    sources = with_sent(
        p.loaded, sink.sent_prompts, p.plan, interrupted=interrupted, seed=p.spec.load.seed
    )
    for line in unsent_warnings(sources):
        sink(WorkerWarning("driver", line, "prompts_unsent"))
    return sources


def _stopped_by_the_disk(p: Prepared, sink: Collector) -> NoReturn:
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
