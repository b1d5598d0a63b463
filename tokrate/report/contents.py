"""What a report contains, in order: the declarations the model is built from.

To add a chart, write a :data:`~tokrate.report.model.ChartDeclaration` (a function of
:class:`~tokrate.report.model.ReportInputs` that yields a
:class:`~tokrate.report.model.Chart` — name, title, caption, data, draw — or a
:class:`~tokrate.report.model.LeftOut` note) in the module of its section and list it
in :data:`CHARTS`; a table section goes into :data:`TABLES`, metadata lines into
:data:`META`. Nothing else changes: :func:`build_model` calls each declaration once,
and every renderer (chart files, report.html, summary.md) shows what it yields.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, Final

from tokrate.analysis.checks import with_verdicts
from tokrate.analysis.compare import compare_loaded
from tokrate.analysis.metrics import summarize
from tokrate.analysis.stats import PowerLawFit, fit_power_law, stability_warnings
from tokrate.analysis.tier_pick import TierDecision, TierRun, decide_tiers
from tokrate.errors import UsageError
from tokrate.hardware import HardwareProfile, get_hardware
from tokrate.report import answers_section as _answers
from tokrate.report import cache_section as _cache
from tokrate.report import capacity_section as _capacity
from tokrate.report import chart_entries as _core
from tokrate.report import comparison_section as _changed
from tokrate.report import connect as _connect
from tokrate.report import data as _data
from tokrate.report import quality_section as _quality
from tokrate.report import server_load as _server_load
from tokrate.report import size_text as _size_text
from tokrate.report import streams as _streams
from tokrate.report import workload_section as _workloads
from tokrate.report.calibration import describe_verdict
from tokrate.report.model import (
    Chart,
    ChartDeclaration,
    LeftOut,
    MetaDeclaration,
    ReportInputs,
    ReportModel,
    SizeSpeed,
    TableDeclaration,
    not_drawn,
)
from tokrate.report.styles import model_colors
from tokrate.report.tables import (
    Table,
    comparison_table,
    errors_table,
    summary_table,
    tier_tables,
)
from tokrate.report.terminal.tier_text import verdict_lines
from tokrate.runfolder.loaded_run import LoadedRun, load_run
from tokrate.runfolder.run_info import RunInfo
from tokrate.runfolder.summary import Summary
from tokrate.textfmt import DASH

__all__ = [
    "CHARTS",
    "DEFAULT_HARDWARE",
    "META",
    "TABLES",
    "build_model",
    "gather_inputs",
    "load_inputs",
]

#: The bound's hardware when neither --hardware nor the run's [output] hardware names one.
DEFAULT_HARDWARE: Final = "a100-80g"


def load_inputs(run_dirs: Sequence[Path], *, hardware: str | None = None) -> ReportInputs:
    """The inputs of a report over ``run_dirs``: each run loaded (tokrate.runfolder.
    loaded_run.load_run) and keyed by its name (label, else id; #2, #3 where two share
    one), its summary recomputed from the records (with the stored capacity search),
    the bound's hardware resolved (``hardware``, else the first run's, else
    :data:`DEFAULT_HARDWARE`). Raises UsageError (no runs), ConfigError (unknown
    hardware), RunFolderError (unreadable run)."""
    if not run_dirs:
        raise UsageError("report: give at least one run folder")
    # A killed run's answers are judged here (its finishing step never ran).
    runs = _unique_keys([with_verdicts(load_run(Path(p))) for p in run_dirs])
    named = hardware or runs[0][1].info.hardware
    profile = get_hardware(named or DEFAULT_HARDWARE)
    summaries = [
        (key, _capacity.with_stored(summarize(run.records, run.info), run.summary))
        for key, run in runs
    ]
    return gather_inputs(runs, summaries, profile, hardware_named=named is not None)


def _unique_keys(runs: list[LoadedRun]) -> list[tuple[str, LoadedRun]]:
    """Each run's name (label, else id), made unique with #2, #3 where two share one."""
    seen: dict[str, int] = {}
    out = []
    for run in runs:
        key = run.name
        if key in seen:
            seen[key] += 1
            key = f"{key}#{seen[key]}"
        else:
            seen[key] = 1
        out.append((key, run))
    return out


def gather_inputs(
    runs: Sequence[tuple[str, LoadedRun]],
    summaries: Sequence[tuple[str, Summary]],
    hardware: HardwareProfile,
    *,
    hardware_named: bool = True,
) -> ReportInputs:
    """The report's inputs from its loaded runs and their recomputed summaries (keyed
    alike, in run order; groups in the order summarize gives: models by size): records
    combined, the size chart's points fitted, later runs compared with the first."""
    ordered = tuple(summaries)
    records = _data.combine_runs([(k, r.records) for k, r in runs])
    sizes = _data.targets_frame([(k, r.info) for k, r in runs])
    first = runs[0][1]
    return ReportInputs(
        runs=tuple(runs),
        summaries=ordered,
        hardware=hardware,
        records=records,
        sizes=sizes,
        groups=_data.group_table(ordered),
        size_speed=_size_speed(records, sizes, hardware, _time_scale(runs)),
        comparisons={k: compare_loaded(first, r) for k, r in runs[1:]},
        colors=model_colors(_models_by_size(ordered, runs)),
        hardware_named=hardware_named,
    )


def _models_by_size(
    summaries: Sequence[tuple[str, Summary]], runs: Sequence[tuple[str, LoadedRun]]
) -> list[str]:
    """Every model of the report, once, in the order of its tables (the summaries'
    groups: by size where sizes are known, then by name), then any model a run names
    that measured nothing."""
    models = [g.model for _, s in summaries for g in s.groups]
    models += [t.model for _, r in runs for t in r.info.targets]
    return list(dict.fromkeys(models))


def _time_scale(runs: Sequence[tuple[str, LoadedRun]]) -> float:
    """The largest simulator time_scale of the runs (1 for real servers): a sped-up
    simulator's speeds sit that many times above the bound by design (its own warning
    says so), so only speeds past bound x this count as above the bound."""
    return max((r.info.time_scale or 1.0 for _, r in runs), default=1.0)


def _size_speed(
    records: Any, sizes: Any, hardware: HardwareProfile, time_scale: float = 1.0
) -> SizeSpeed:
    points, notes = _data.size_speed_points(records, sizes, hardware)
    points = _size_text.mark_above_bound(points, time_scale)
    fits: dict[str, PowerLawFit] = {}
    for (series,), part in points.group_by(["series"], maintain_order=True):
        # Divide out multi-GPU bandwidth so the fit measures size alone
        # (docs/definitions.md: speed ~ bandwidth / active bytes); the line is for one GPU.
        per_gpu = part["tps_p50"] / part["gpu_scale"]
        fit = fit_power_law(part["x_params_b"].to_list(), per_gpu.to_list())
        if fit is not None:
            fits[str(series)] = fit
    return SizeSpeed(points, tuple(notes), fits)


# --- metadata -------------------------------------------------------------------


def run_meta(inputs: ReportInputs) -> Iterator[tuple[str, str]]:
    """Per run: id, status, times, version, host, targets, levels, request count."""
    for key, run in inputs.runs:
        r = run.info
        targets = ", ".join(t.label for t in r.targets)
        scenarios = ", ".join(s.name for s in r.scenarios)
        host = " · ".join(v for v in (r.host, r.platform, r.python and f"Python {r.python}") if v)
        fields = (
            ("run", f"{key} ({r.run_id})" if r.label else key),
            ("status", "interrupted" if run.interrupted else r.status),
            ("started", r.started_at or "—"),
            ("ended", r.ended_at or "—"),
            ("tokrate", r.tokrate_version or "—"),
            ("host", host or "—"),
            ("targets", targets or "—"),
            ("levels", scenarios or "—"),
            ("requests", str(run.records.height)),
        )
        yield from ((f"{inputs.prefix(key)}{k}", v) for k, v in fields)


def connection_meta(inputs: ReportInputs) -> list[tuple[str, str]]:
    return _connect.notes([(k, r.info, r.records) for k, r in inputs.runs])


def server_metrics_meta(inputs: ReportInputs) -> list[tuple[str, str]]:
    return _server_load.server_load_meta([(k, r.info) for k, r in inputs.runs], inputs.multi)


#: run.json's ``prompt_cache`` parts in words.
_CACHE_MODE_WORDS: Final = {
    "unique-prefix": "a unique tag before each prompt's own part (only shared prefixes can hit)",
    "as-written": "prompts as written ([client] unique_prompts = false)",
    "cache_control": "Anthropic cache_control breakpoints",
    "prompt_cache_key": "prompt_cache_key",
}


def prompt_cache_meta(inputs: ReportInputs) -> Iterator[tuple[str, str]]:
    """Per run, how its requests treated a prompt cache (run.json targets'
    ``prompt_cache``); one line when every target did the same."""
    for key, run in inputs.runs:
        modes: dict[str, list[str]] = {}
        for t in run.info.targets:
            if t.prompt_cache is not None:
                modes.setdefault(t.prompt_cache, []).append(t.model)
        if not modes:
            continue

        def words(mode: str) -> str:
            return " + ".join(_CACHE_MODE_WORDS.get(p, p) for p in mode.split("+"))

        if len(modes) == 1:
            text = words(next(iter(modes)))
        else:
            text = "; ".join(f"{', '.join(ms)}: {words(m)}" for m, ms in modes.items())
        yield (f"{inputs.prefix(key)}prompt caching", text)


def shared_prefix_meta(inputs: ReportInputs) -> list[tuple[str, str]]:
    return _workloads.prefix_notes([(k, r.records) for k, r in inputs.runs])


def calibration_meta(inputs: ReportInputs) -> Iterator[tuple[str, str]]:
    for key, run in inputs.runs:
        if run.info.calibration is not None:
            label = f"{key}: calibration" if inputs.multi else "calibration"
            yield (label, describe_verdict(run.info.calibration))


def hardware_meta(inputs: ReportInputs) -> Iterator[tuple[str, str]]:
    hw = inputs.hardware
    yield ("bound hardware", f"{hw.name} ({hw.description})")


def fit_meta(inputs: ReportInputs) -> list[tuple[str, str]]:
    return _size_text.fit_notes(inputs.size_speed.fits)


#: Metadata lines under the title, in order.
META: Final[tuple[MetaDeclaration, ...]] = (
    run_meta,
    connection_meta,
    server_metrics_meta,
    prompt_cache_meta,
    shared_prefix_meta,
    calibration_meta,
    hardware_meta,
    fit_meta,
)


# --- tables ---------------------------------------------------------------------


def comparison_tables(inputs: ReportInputs) -> Iterator[Table]:
    """Runs side by side (several runs only)."""
    if inputs.multi:
        yield comparison_table(inputs.summaries, inputs.comparisons)


def summary_tables(inputs: ReportInputs) -> Iterator[Table]:
    """One summary table per run."""
    for key, summary in inputs.summaries:
        yield summary_table(key, summary, title=f"Summary: {key}")


#: Table sections after the tier pick, in order.
TABLES: Final[tuple[TableDeclaration, ...]] = (
    _capacity.capacity_tables,
    comparison_tables,
    summary_tables,
    _quality.quality_tables,
    _answers.answer_tables,
    _streams.stream_tables,
    _cache.cache_tables,
)

#: Charts, in report order.
CHARTS: Final[tuple[ChartDeclaration, ...]] = (
    _core.size_vs_speed,
    _quality.quality_chart,
    _capacity.capacity_charts,
    _core.ttft_cdf,
    _core.latency_boxes,
    _core.throughput_vs_latency,
    _core.timeline,
    _server_load.server_load_chart,
    _core.cost_vs_speed,
    _streams.client_vs_server_chart,
    _cache.cache_chart,
    _connect.connect_entry,
    _workloads.turn_entry,
)


# --- the model ------------------------------------------------------------------


def build_model(inputs: ReportInputs) -> ReportModel:
    """The report: every declaration called once, in order.

    A chart declaration that fails (data no chart foresaw) is left out with a note
    saying so in words (:func:`~tokrate.report.model.not_drawn`), its error kept in
    ``faults``; the other charts, tables and documents still come."""
    charts: list[Chart[Any]] = []
    left_out: list[str] = []
    faults: list[tuple[str, str]] = []
    for declare in CHARTS:
        try:
            items = list(declare(inputs))
        except Exception as exc:
            left_out.append(not_drawn(_declared_name(declare)))
            faults.append((_declared_name(declare), f"{type(exc).__name__}: {exc}"))
            continue
        for item in items:
            if isinstance(item, LeftOut):
                left_out.append(item.note)
            else:
                charts.append(replace(item, colors=inputs.colors))
    tables: list[Table] = []
    for declare_tables in TABLES:
        for part in declare_tables(inputs):
            if isinstance(part, LeftOut):
                left_out.append(part.note)
            else:
                tables.append(part)
    tier_runs = [
        TierRun(k, s, r.info) for (k, r), (_, s) in zip(inputs.runs, inputs.summaries, strict=True)
    ]
    decision = decide_tiers(tier_runs)
    verdict, tier = _verdict(inputs, tier_runs, decision)
    return ReportModel(
        title=_title(inputs),
        banners=tuple(_banners(inputs)),
        meta=tuple(line for declare_meta in META for line in declare_meta(inputs)),
        warnings=tuple(_warnings(inputs)),
        lead=tuple(_changed.changed_tables(inputs)),
        decision=decision,
        # A multi-run report answers "did B change from A?" before the tier pick.
        verdict=(*_changed.changed_lines(inputs), *verdict),
        tier=tier,
        tables=tuple(tables),
        charts=tuple(charts),
        left_out=tuple(left_out),
        errors=errors_table(_data.error_examples(inputs.records)),
        configs=tuple((k, relative_paths(r.info.config, r.path)) for k, r in inputs.runs),
        colors=inputs.colors,
        faults=tuple(faults),
    )


def relative_paths(value: Any, run_dir: Path) -> Any:
    """``value`` (run.json's config) with every absolute path made relative to the
    run folder ("..", "../prompts/x.jsonl"), and a file or folder outside the run
    folder's parent (a cache, a home directory) shortened to ".../<name>": a report
    goes into documents, and a machine's paths do not belong there. A string that
    only looks like a path (an API route, "/v1/chat/completions") is left as it is."""
    if isinstance(value, dict):
        return {k: relative_paths(v, run_dir) for k, v in value.items()}
    if isinstance(value, list):
        return [relative_paths(v, run_dir) for v in value]
    if isinstance(value, str) and value.startswith("/") and "\n" not in value:
        path, base = Path(value), run_dir.resolve()
        if path.is_relative_to(base.parent):
            return os.path.relpath(path, base)
        if path.exists():
            return f".../{path.name}"
    return value


def _shared_models(inputs: ReportInputs) -> list[str]:
    """Model names measured in more than one of the report's runs (on any endpoint:
    the same model twice is a measurement to compare, not a tier to pick)."""
    seen: dict[str, set[str]] = {}
    for key, run in inputs.runs:
        for t in run.info.targets:
            seen.setdefault(t.model, set()).add(key)
    return [m for m, keys in seen.items() if len(keys) > 1]


def _verdict(
    inputs: ReportInputs, runs: Sequence[TierRun], decision: TierDecision
) -> tuple[tuple[str, ...], tuple[Table, ...]]:
    """The sentences the report opens with and the tier tables. Runs that measured
    the same model are measurements to compare, not tiers to pick from: such a
    report says so and opens with each run's own pick among its own models (where a
    run has several), with that run's tier tables, never with a pick of one run over
    another."""
    shared = _shared_models(inputs)
    if not inputs.multi or not shared:
        return tuple(verdict_lines(decision)), tier_tables(decision)
    # In the report's order (by size where sizes are known), as every table lists them.
    rank = {m: i for i, m in enumerate(inputs.colors)}
    names = ", ".join(sorted(set(shared), key=lambda m: (rank.get(m, len(rank)), m)))
    lines = [
        f"These runs measured the same model ({names}): this report compares the runs "
        "(Runs side by side, and tokrate compare for verdicts with intervals); it does not "
        "pick one run's model over another's."
    ]
    tables: list[Table] = []
    for run in runs:
        if len(run.info.targets) < 2:
            continue
        own = decide_tiers([run])
        lines += [f"In {run.key}: {line}" for line in verdict_lines(own)]
        # The tables those sentences quote, each named for its run (every number in
        # a sentence is in a table of the page).
        tables += [replace(t, title=f"{t.title}: {run.key}") for t in tier_tables(own)]
    return tuple(lines), tuple(tables)


def _declared_name(declare: ChartDeclaration) -> str:
    return getattr(declare, "__name__", "chart").replace("_", " ")


def _title(inputs: ReportInputs) -> str:
    if inputs.multi:
        return "tokrate report: " + " vs ".join(k for k, _ in inputs.runs)
    return f"tokrate report: {inputs.runs[0][0]}"


def _banners(inputs: ReportInputs) -> Iterator[str]:
    for key, run in inputs.runs:
        if run.interrupted:
            yield (
                f"Run {key} was interrupted (status {run.info.status!r}): this report shows "
                f"the {run.records.height} requests recorded before it stopped."
            )
        for stop in run.info.stopped:
            # A stopping rule (--max-cost, ...) ended sending early: fewer requests than
            # planned, said where the verdict is read.
            scope = "the run" if stop.scope == "run" else f"scenario {stop.scenario}"
            yield (
                f"Run {key}: {stop.rule} stopped {scope} at {stop.scenario}: {stop.detail}. "
                f"This report shows the {run.records.height} requests recorded."
            )


def _warnings(inputs: ReportInputs) -> list[str]:
    out: list[str] = []
    for key, run in inputs.runs:
        prefix = inputs.prefix(key)
        out += [f"{prefix}{w}" for w in run.info.warnings]
        out += [f"{prefix}{n}" for n in run.notes]
        scale = run.info.time_scale
        if scale is not None and scale != 1:
            out.append(
                f"{prefix}the simulator ran with time_scale={scale:g}: every measured time "
                f"is 1/{scale:g} of the modelled one, so speeds sit {scale:g}× above the "
                "hardware bound; run with time_scale 1 for physical numbers"
            )
        lag = _lag_warning(run.info)
        if lag is not None:
            out.append(f"{prefix}{lag}")
    for key, summary in inputs.summaries:
        out += [f"{inputs.prefix(key)}{w}" for w in stability_warnings(summary.groups)]
    out += _size_text.above_bound_warnings(
        inputs.size_speed.points, inputs.hardware.description, inputs.summaries
    )
    return out + _streams.buffered_warnings(inputs.summaries)


def _lag_warning(info: RunInfo) -> str | None:
    """The loop-lag line, once: the run's own warning says it already (the worker's
    words, both thresholds) unless the run is older than that warning; then the
    same story from run.json's loop_lag."""
    lag = info.loop_lag
    if lag is None or not lag.exceeded or any("event-loop lag" in w for w in info.warnings):
        return None
    p99 = DASH if lag.p99_ms is None else f"{lag.p99_ms:.1f} ms"
    worst = DASH if lag.max_ms is None else f"{lag.max_ms:.1f} ms"
    limits = " / ".join(
        f"{name} {value:g} ms"
        for name, value in (("p99", lag.threshold_ms), ("max", lag.max_threshold_ms))
        if value is not None
    )
    return (
        f"event-loop lag p99 {p99}, max {worst} (threshold {limits}): timestamps may be late "
        "by that much; lower the concurrency per process or use --workers N"
    )
