"""The first step of a run: everything before the first request.

:func:`prepare` reads the API keys and prompts, opens the run folder
(:class:`~tokrate.runfolder.store.RunStore` checks it is creatable, writable and has free
space), starts the embedded simulator when no endpoint is configured (in its own
process, so it shares no interpreter lock with the measuring loop), resolves the
targets (:func:`tokrate.inputs.targets.resolve_targets`), prices the plan (and refuses
one over ``--max-cost``), runs the pre-flight (:func:`tokrate.client.preflight.
check_targets`: every endpoint answers and serves every model, else exit 2 with the
server's reply), builds the plan, opens the backend and writes the run folder's first
run.json. Any failure here leaves no run folder behind; nothing is sent before it ends
but the pre-flight's probes.

What it made is one :class:`Prepared`, which the next step
(:func:`tokrate.load.measure.measure`) reads; the simulator, the backend and the
store stay open while the ``with`` block runs.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tokrate.inputs.prompt_base import Prompt, check_entries
from tokrate.inputs.prompts import LoadedPrompts
from tokrate.inputs.targets import Target, api_keys, resolve_targets, run_redactor
from tokrate.inputs.workloads import UNIQUE_TAG_TOKENS
from tokrate.load.live import LiveOutput
from tokrate.load.plan import Plan
from tokrate.load.prompt_use import implied_checks_text, source_text
from tokrate.load.run_start import start_info
from tokrate.load.signals import SignalStopper
from tokrate.load.spend import PlanCost, check_cap, estimate_line, estimate_plan
from tokrate.redact import Redactor
from tokrate.runfolder.run_info import BenchmarkInfo
from tokrate.runfolder.store import RunStore, new_run_id, write_checks
from tokrate.spec.config_file import prompts_base_dir
from tokrate.spec.types import RunSpec

if TYPE_CHECKING:
    from tokrate.load.backends import Backend

__all__ = ["Prepared", "prepare"]


@dataclass(frozen=True, slots=True)
class Prepared:
    """A run ready to send its first request: the spec it runs, its targets as the
    pre-flight found them, its prompts and plan, and the open backend and store."""

    spec: RunSpec
    run_id: str
    targets: tuple[Target, ...]
    #: The targets' names in scenario names ("c=4 [sim-7b]"): model names, or
    #: endpoint/model where two endpoints serve the same model name.
    names: tuple[str, ...]
    prompts: tuple[Prompt, ...]
    plan: Plan
    #: The plan cut into one part per worker of the backend.
    shards: tuple[Plan, ...]
    keys: Mapping[str, str]
    backend: Backend
    store: RunStore
    redactor: Redactor
    #: The prompts' sources (run.json ``prompts``; what was sent is added at the end).
    loaded: LoadedPrompts
    #: The run's signal handling, now in its measure phase (tokrate.load.signals).
    stopper: SignalStopper
    #: Pre-flight warnings (prompts that cannot fit a server's context), for run.json.
    notices: tuple[str, ...] = ()
    #: Configured sizes a server contradicts, and the pre-flight's probe warnings.
    size_warnings: tuple[str, ...] = ()
    #: The plan priced at the targets' token prices (None: no target has them).
    cost: PlanCost | None = None


@contextlib.contextmanager
def prepare(
    spec: RunSpec, live: LiveOutput, stopper: SignalStopper, base_dir: Path | None = None
) -> Iterator[Prepared]:
    """The run ``spec`` describes, prepared (module doc), its simulator, backend and
    store open while the block runs. ``base_dir`` resolves relative prompt paths
    (default: the config file's folder, else the cwd). ``live`` hears the plan's cost,
    that the pre-flight is running when it takes more than a second, where the prompts
    come from and the targets sized from what their server said. ``stopper`` moves on
    to its measure phase once the run folder is complete.

    Raises ConfigError (a plan over the cost cap among them), PromptError, OutputError,
    RunFolderError (an unreadable baseline), EndpointUnreachable, ModelNotServed,
    SimulatorError, RunInterrupted (a stop signal); a failure leaves no run folder
    behind."""
    with contextlib.ExitStack() as stack:
        prepared, size_notes = _prepare(spec, stack, live, stopper, base_dir)
        _announce(prepared, size_notes, live)
        yield prepared


def _prepare(
    spec: RunSpec,
    stack: contextlib.ExitStack,
    live: LiveOutput,
    stopper: SignalStopper,
    base_dir: Path | None,
) -> tuple[Prepared, tuple[str, ...]]:
    """:func:`prepare`'s work, what it opens closed by ``stack``; with the targets
    sized from what their server reported (said before the load)."""
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
        if cost is not None:
            live.tell("cost", estimate_line(cost, spec.load.max_cost_usd))
        probe_warnings: list[str] = []
        with live.slow_step("pre-flight", _preflight_line(targets)):
            served = check_targets(targets, keys, api=spec.client.api, warnings=probe_warnings)
        planned_order = [t.label for t in targets]
        targets, size_notes, size_warnings = with_served_sizes(targets, served)
        if [t.label for t in targets] != planned_order:
            # The server's sizes moved a target (smallest first): the plan indexes the
            # targets and names sequential scenarios after them, so it follows the
            # new order; the same requests, so the same estimated cost.
            plan = build_plan(spec, len(prompts), len(targets), target_names=_short_names(targets))
            cost = estimate_plan(spec, plan, prompts, targets)
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
    prepared = Prepared(
        spec=spec,
        run_id=run_id,
        targets=tuple(targets),
        names=tuple(_short_names(targets)),
        prompts=tuple(prompts),
        plan=plan,
        shards=tuple(shards),
        keys=keys,
        backend=backend,
        store=store,
        redactor=redactor,
        loaded=loaded,
        stopper=stopper,
        notices=notices,
        size_warnings=tuple(size_warnings),
        cost=cost,
    )
    return prepared, tuple(size_notes)


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


def _preflight_line(targets: Sequence[Target]) -> str:
    from tokrate.client.preflight import PROBE_DEADLINE_S

    endpoints = len({t.endpoint.name for t in targets})
    what = "1 endpoint" if endpoints == 1 else f"{endpoints} endpoints"
    return (
        f"checking {what} before any load (GET /models, else a one-token request per"
        f" model; at most {PROBE_DEADLINE_S:g} s each)"
    )


def _announce(p: Prepared, size_notes: Sequence[str], live: LiveOutput) -> None:
    """Before any load: where the prompts come from (a user who named one file sees
    that nothing else is sent), and the targets sized from what their server said."""
    live.tell("prompts", source_text(p.loaded.sources))
    implied = implied_checks_text(p.prompts)
    if implied is not None:
        live.tell("checks", implied)
    for line in size_notes:
        live.tell("note", line)
