"""run.json as one frozen type: :class:`RunInfo`, built and validated in one place.

The writer (``tokrate.load.run`` through :class:`tokrate.runfolder.store.RunStore`) builds a
RunInfo and the store writes it with :func:`tokrate.runfolder.jsondoc.to_json`; every
reader gets one from :func:`tokrate.runfolder.loaded_run.load_run`, which calls
:func:`run_info_from_json`. Nothing else parses run.json, so a key is spelled, typed and
defaulted exactly once: on its field (the file's keys are the fields, in their order).

Layout version 1 (docs/run-folder.md). Keys added after the first
release are optional for readers (their defaults below); keys this version does not
know are kept in ``extra`` and written back unchanged, so rewriting a newer file never
loses data. Times: ``started_at``/``ended_at`` are ISO-8601 UTC strings; sizes are
billions of parameters; prices USD.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Final

import orjson

from tokrate.errors import RunFolderError
from tokrate.runfolder.jsondoc import DEFAULT_FROM, EXTRA, OMIT_IF_EMPTY, OMIT_IF_NONE, from_json
from tokrate.runfolder.prompt_sources import PromptSourceInfo
from tokrate.runfolder.served_model import ServedModel

__all__ = [
    "RUN_KIND",
    "RUN_LAYOUT_HISTORY",
    "RUN_LAYOUT_VERSION",
    "BenchmarkInfo",
    "SamplingStop",
    "ConnectionSetup",
    "LoopLagInfo",
    "NodeInfo",
    "OutcomeCounts",
    "RunInfo",
    "ScenarioInfo",
    "ScenarioLag",
    "ScrapeInfo",
    "SloInfo",
    "SpendInfo",
    "StopInfo",
    "TargetInfo",
    "run_info_from_json",
]

RUN_LAYOUT_VERSION: Final = 1
#: One line per layout version; readers keep loading every version listed here.
RUN_LAYOUT_HISTORY: Final[dict[int, str]] = {
    1: "first version (later optional keys: label, preconnect, connections, backend, workers,"
    " server_metrics, calibration, prompts, nodes,"
    " targets[].size_source/bytes_source/served/prompt_cache/price_cached_in_per_m,"
    " loop_lag.scenarios, spend, stopped, benchmark, sampling)"
}
RUN_KIND: Final = "tokrate-run"

#: Load settings outside the scenario list that change what a latency means; two runs
#: whose values differ are not comparable.
_LOAD_IDENTITY_KEYS: Final = ("mode", "burstiness", "ignore_eos", "targets", "arrival")
#: The load settings of a benchmark's identity (BenchmarkInfo): the comparability keys
#: and the warm-up, which decides how warm the server is when the window opens. Not
#: the request count, duration or seed: a run that sends more requests of the same
#: load and prompts measures the same thing, more precisely.
_BENCHMARK_LOAD_KEYS: Final = (
    *_LOAD_IDENTITY_KEYS,
    "warmup_requests",
    "warmup_s",
    "ramp_up_s",
    "capacity",
)
#: Prompt generators a benchmark may use (config ``prompts`` tables).
_GENERATORS: Final = ("synthetic", "sessions", "grid", "shared_prefix")
#: The client settings of a benchmark's identity: what the requests ask for and how
#: they are streamed, not timeouts, retries or connection handling.
_BENCHMARK_CLIENT_KEYS: Final = (
    "kind",
    "api",
    "include_usage",
    "unique_prompts",
    "extra_body",
    "body_overrides",
)


@dataclass(frozen=True, slots=True)
class TargetInfo:
    """One endpoint x model as the run resolved it. Sizes in billions of parameters;
    ``active_params_b`` is the decode-relevant size (== params_b for a dense model)."""

    endpoint: str
    model: str
    base_url: str = ""
    params_b: float | None = None
    #: Runs older than the field: a dense model's, ``params_b``.
    active_params_b: float | None = field(default=None, metadata=DEFAULT_FROM("params_b"))
    bytes_per_param: float | None = None
    price_in_per_m: float | None = None
    #: USD per million input tokens served from the provider's prompt cache (None:
    #: those are billed at ``price_in_per_m``).
    price_cached_in_per_m: float | None = None
    price_out_per_m: float | None = None
    gpu_hourly_usd: float | None = None
    gpus: int | None = None
    simulated: bool = False
    family: str | None = None
    #: The protocol its requests were sent in (chat, completions, responses,
    #: anthropic); None in runs older than the field.
    api: str | None = None
    #: Where ``params_b`` and ``bytes_per_param`` came from: "config" (the user),
    #: "server" (what the server reported, ``served``), "name" (inferred from the
    #: model's name), "simulator" (its tier); None: unknown, or a run older than these.
    size_source: str | None = None
    bytes_source: str | None = None
    #: What the server said about the model before the load (None: nothing).
    served: ServedModel | None = None
    #: How its requests treat a prompt cache (tokrate.inputs.targets.Target.prompt_cache_mode:
    #: "unique-prefix" or "as-written", then "+cache_control" / "+prompt_cache_key");
    #: None in runs older than the field.
    prompt_cache: str | None = None

    @property
    def key(self) -> tuple[str, str]:
        return (self.endpoint, self.model)

    @property
    def label(self) -> str:
        return f"{self.endpoint}/{self.model}"

    @property
    def size_b(self) -> float | None:
        """Active parameters, else total: what decode speed depends on."""
        return self.active_params_b if self.active_params_b is not None else self.params_b


@dataclass(frozen=True, slots=True)
class ScenarioInfo:
    """One scenario (sweep level, possibly one target): its level per target."""

    name: str
    concurrency: int | None = None
    rate_rps: float | None = None
    arrival: str | None = None

    @property
    def definition(self) -> tuple[int | None, float | None, str | None]:
        """What must match for two runs' scenarios of this name to be comparable."""
        return (self.concurrency, self.rate_rps, self.arrival)

    @property
    def definition_named(self) -> tuple[str, int | None, float | None, str | None]:
        """The scenario's name and definition (a benchmark's identity lists them)."""
        return (self.name, *self.definition)


@dataclass(frozen=True, slots=True)
class SloInfo:
    """The SLOs a run judged requests by (seconds; None: not set)."""

    ttft_s: float | None = None
    tpot_s: float | None = None
    e2e_s: float | None = None
    itl_p99_s: float | None = None
    #: The routing table's quality bar (docs/quality.md), overall and per task.
    min_pass_rate: float | None = None
    min_pass_rate_by_task: tuple[tuple[str, float], ...] = ()

    @property
    def any_set(self) -> bool:
        return any(v is not None for v in self.as_mapping().values())

    def as_mapping(self) -> dict[str, float | None]:
        """The per-request latency limits (what a request is judged by)."""
        return {
            "ttft_s": self.ttft_s,
            "tpot_s": self.tpot_s,
            "e2e_s": self.e2e_s,
            "itl_p99_s": self.itl_p99_s,
        }

    def pass_bar(self, task: str) -> float | None:
        """The pass rate ``task`` must reach (its own, else the overall one)."""
        return dict(self.min_pass_rate_by_task).get(task, self.min_pass_rate)


@dataclass(frozen=True, slots=True)
class ScenarioLag:
    """The measuring event loop's lag over one scenario (milliseconds; the worst worker
    of that scenario): the client's own lateness while it measured that scenario."""

    scenario: str
    max_ms: float
    p99_ms: float
    samples: int = 0
    exceeded: bool = False


@dataclass(frozen=True, slots=True)
class SamplingStop:
    """Why a target's level stopped sending under ``requests = "auto"``
    (tokrate.load.auto_sample): ``reason`` "judged" (every judged statistic had its
    samples: ``needed`` ok requests for the thresholds' statistics, and the tier
    pick's shares theirs), "max_requests", "duration" or "stopped"; ``sent`` measured
    requests, ``ok`` of them ok. ``limiting``: when judged, the statistic whose samples
    came last ("ttft_p95", "pass rate of task math (90% bar)"); ``unmet``: each
    statistic still short when it stopped, "what: have of the need"."""

    scenario: str
    endpoint: str
    model: str
    sent: int
    ok: int
    needed: int
    reason: str
    limiting: str = ""
    unmet: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class LoopLagInfo:
    """The measuring event loop's lag over the run (milliseconds), and per scenario
    (``scenarios``; empty in runs older than the field)."""

    threshold_ms: float | None = None
    max_threshold_ms: float | None = None
    max_ms: float | None = None
    p99_ms: float | None = None
    samples: int | None = None
    exceeded: bool = False
    scenarios: tuple[ScenarioLag, ...] = ()

    def scenario(self, name: str) -> ScenarioLag | None:
        return next((s for s in self.scenarios if s.scenario == name), None)


@dataclass(frozen=True, slots=True)
class OutcomeCounts:
    """Planned requests by outcome (a retried request counts once, by its last
    attempt): scheduled == ok + error + cancelled."""

    scheduled: int = 0
    ok: int = 0
    error: int = 0
    cancelled: int = 0


@dataclass(frozen=True, slots=True)
class ConnectionSetup:
    """Connections opened before one scenario's window (preconnect) to one endpoint:
    how many opened and failed, and each one's set-up seconds."""

    scenario: str
    endpoint: str
    opened: int = 0
    failed: int = 0
    connect_s: tuple[float, ...] = ()


@dataclass(frozen=True, slots=True)
class ScrapeInfo:
    """One endpoint's metrics scrape: ``scrapes`` attempted every ``interval_s``
    seconds, ``failures`` of them (``first_error`` the first), ``samples`` rows in
    server_metrics.parquet."""

    endpoint: str
    url: str
    interval_s: float
    scrapes: int = 0
    failures: int = 0
    samples: int = 0
    first_error: str | None = None


@dataclass(frozen=True, slots=True)
class NodeInfo:
    """One machine that ran workers, and its wall clock against the driver's.

    ``node_id`` is what the records' ``node_id`` says (the Ray node id; the hostname
    for local workers); ``address`` the node's IP on a cluster (None for local
    workers); ``workers`` the worker ids that ran there at any time (a replacement for
    a lost worker adds its id to the node it landed on).

    ``clock_offset_s`` is the node's wall clock minus the driver's, measured when its
    first worker started (NTP-style, the round trip of ``clock_round_trips`` with the
    shortest delay); the true offset lies within ``clock_offset_s`` +/-
    ``clock_uncertainty_s`` (half that round trip). Local workers share the driver's
    clock: 0.0 +/- 0.0, ``clock_round_trips`` 0. ``started_at_shift_s`` was subtracted
    from the ``started_at`` of every record measured there, putting it on the driver's
    clock: the offset when it exceeds its uncertainty, else 0.0 (the clocks agree as
    far as can be measured). None: not measured (a worker that never started).
    """

    node_id: str
    hostname: str = ""
    address: str | None = None
    workers: tuple[str, ...] = ()
    clock_offset_s: float | None = None
    clock_uncertainty_s: float | None = None
    clock_round_trips: int = 0
    started_at_shift_s: float = 0.0

    @property
    def label(self) -> str:
        """How warnings name the node: its address, else its hostname, with the first
        12 characters of a Ray node id."""
        where = self.address or self.hostname or self.node_id
        if where == self.node_id or not self.node_id:
            return where
        return f"{where} ({self.node_id[:12]})"


@dataclass(frozen=True, slots=True)
class StopInfo:
    """A stopping rule that ended sending early (tokrate.load.stop_rules): ``rule``
    ("max_cost", ...), ``scope`` ("scenario" or "run": no later scenario ran), the
    ``scenario`` it stopped, and ``detail``, the reason in words with its numbers."""

    rule: str
    scope: str
    scenario: str
    detail: str


@dataclass(frozen=True, slots=True)
class SpendInfo:
    """What the run spent at its targets' token prices (tokrate.load.spend), where
    some target has them. ``max_usd``: ``--max-cost`` (None: no cap).
    ``estimate_input_usd`` / ``estimate_output_max_usd``: the estimate made before
    anything was sent (the prompts' estimated input tokens; output at their
    ``max_tokens``, None where some request had no bound). ``requests_planned``: None
    where a level is bounded by time, not a count. ``spent_usd``: the measured spend,
    every sent request's tokens as recorded (warm-up, failed and retried ones too)."""

    max_usd: float | None = None
    requests_planned: int | None = None
    estimate_input_usd: float | None = None
    estimate_output_max_usd: float | None = None
    spent_usd: float = 0.0
    requests_priced: int = 0


def _frozen_json(value: Any) -> str:
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS).decode()


def _without_defaults(value: Any) -> Any:
    """``value`` without the entries that say nothing (None, false, 0, empty): a key a
    later tokrate adds with such a default leaves an older run's identity unchanged."""
    if isinstance(value, Mapping):
        kept = {str(k): _without_defaults(v) for k, v in value.items()}
        return {k: v for k, v in kept.items() if v not in (None, False, 0, 0.0, "", [], {})}
    if isinstance(value, list | tuple):
        return [_without_defaults(v) for v in value]
    return value


@dataclass(frozen=True, slots=True)
class BenchmarkInfo:
    """Which benchmark a run measured: its ``identity`` (the load settings, the
    scenario levels, the prompts, the targets and the client settings that decide what
    the numbers mean; nothing about the machine, the request count or the outcome) and
    ``fingerprint``, 16 hex digits of its BLAKE2b hash. Runs with one fingerprint are one
    benchmark's history: the nightly gate's noise fit and reference, ``latest-good``
    and ``tokrate history`` are keyed by it, so runs of other benchmarks in the same
    folder change nothing for it. Derived from run.json's own fields
    (:meth:`of`), so a run older than the key gets the same fingerprint its
    benchmark's newer runs store."""

    fingerprint: str
    identity: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def of(cls, info: RunInfo) -> BenchmarkInfo:
        config = info.config
        load = config.get("load")
        client = config.get("client")
        identity: dict[str, Any] = {
            "load": {k: load.get(k) for k in _BENCHMARK_LOAD_KEYS}
            if isinstance(load, Mapping)
            else {},
            "scenarios": [list(s.definition_named) for s in info.scenarios],
            "prompts": config.get("prompts"),
            "targets": sorted([t.endpoint, t.model] for t in info.targets),
            "client": {k: client.get(k) for k in _BENCHMARK_CLIENT_KEYS}
            if isinstance(client, Mapping)
            else {},
            "simulator_time_scale": info.time_scale,
        }
        canonical = _without_defaults(identity)
        digest = hashlib.blake2b(_frozen_json(canonical).encode(), digest_size=8).hexdigest()
        return cls(digest, canonical)

    def describe(self) -> str:
        """What the benchmark measures, in a line: "sim/sim-7b, sim/sim-70b at c=8;
        prompts: synthetic" (names as run.json has them)."""
        targets = ", ".join("/".join(map(str, t)) for t in self.identity.get("targets", ()))
        levels = ", ".join(str(s[0]) for s in self.identity.get("scenarios", ()))
        prompts = self.identity.get("prompts")
        sources: list[str] = []
        if isinstance(prompts, Mapping):
            sources += [f"file {p}" for p in prompts.get("paths", ())]
            sources += [f"set {p}" for p in prompts.get("sets", ())]
            sources += [k for k in _GENERATORS if k in prompts]
        return (
            f"{targets or 'no targets'} at {levels or 'no levels'};"
            f" prompts: {', '.join(sources) or 'the default set'}"
        )


@dataclass(frozen=True, slots=True)
class RunInfo:
    """run.json. Frozen; derive a changed copy with :func:`dataclasses.replace`.

    ``config`` is the resolved spec as written (secrets already removed), kept as a
    JSON document for display; what analysis needs from it is parsed once, here, into
    :attr:`load_identity`, :attr:`prompts_identity` and :attr:`time_scale`.
    ``status`` is "running" (or a killed run), "complete" or "interrupted".
    """

    #: The layout this file was written in (RUN_LAYOUT_HISTORY) and what it is; the
    #: first two keys of the file.
    layout_version: int = field(default=RUN_LAYOUT_VERSION, kw_only=True)
    kind: str = field(default=RUN_KIND, kw_only=True)
    run_id: str
    label: str | None = None
    status: str = "running"
    started_at: str | None = None
    ended_at: str | None = None
    tokrate_version: str = ""
    python: str = ""
    platform: str = ""
    host: str = ""
    libraries: Mapping[str, str] = field(default_factory=dict)
    config: Mapping[str, Any] = field(default_factory=dict)
    targets: tuple[TargetInfo, ...] = ()
    scenarios: tuple[ScenarioInfo, ...] = ()
    #: Where the prompts came from, per source (empty in runs older than the key).
    prompts: tuple[PromptSourceInfo, ...] = ()
    slo: SloInfo = SloInfo()
    hardware: str | None = None
    backend: str | None = None
    workers: int | None = None
    preconnect: bool | None = None
    connections: tuple[ConnectionSetup, ...] = ()
    #: The machines that ran workers, with their clocks against the driver's.
    nodes: tuple[NodeInfo, ...] = ()
    server_metrics: tuple[ScrapeInfo, ...] = ()
    warnings: tuple[str, ...] = ()
    loop_lag: LoopLagInfo | None = None
    counts: OutcomeCounts | None = None
    #: What the run spent at its token prices (None: no target has token prices).
    spend: SpendInfo | None = None
    #: Stopping rules that ended sending early (empty: the plan ran to its end, or a
    #: signal stopped it: ``status`` says so).
    stopped: tuple[StopInfo, ...] = ()
    #: Whether the run stayed inside this machine's calibrated measurement floor
    #: (tokrate.analysis.calibration.judge_run's object); None when not judged (older runs).
    calibration: Mapping[str, Any] | None = field(default=None, metadata=OMIT_IF_NONE)
    #: Which benchmark this run measured, as written when it started (None in runs
    #: older than the key: :attr:`benchmark_info` derives it).
    benchmark: BenchmarkInfo | None = field(default=None, metadata=OMIT_IF_NONE)
    #: ``requests = "auto"``: why each target's level stopped (empty otherwise).
    sampling: tuple[SamplingStop, ...] = field(default=(), metadata=OMIT_IF_EMPTY)
    #: Keys a newer tokrate wrote that this one does not know, written back unchanged.
    extra: Mapping[str, Any] = field(default_factory=dict, metadata=EXTRA)

    # --- what readers ask ----------------------------------------------------------

    @property
    def name(self) -> str:
        """How reports, compare and history name this run: its label, else its id."""
        return self.label or self.run_id

    @property
    def complete(self) -> bool:
        return self.status == "complete"

    @property
    def interrupted(self) -> bool:
        """Anything but "complete" (a killed run still says "running")."""
        return self.status != "complete"

    @property
    def started_datetime(self) -> datetime | None:
        if self.started_at is None:
            return None
        try:
            parsed = datetime.fromisoformat(self.started_at.replace("Z", "+00:00"))
        except ValueError:
            return None
        return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)

    def target(self, endpoint: str, model: str) -> TargetInfo | None:
        for t in self.targets:
            if t.endpoint == endpoint and t.model == model:
                return t
        return None

    def scenario(self, name: str) -> ScenarioInfo | None:
        for s in self.scenarios:
            if s.name == name:
                return s
        return None

    @property
    def simulated(self) -> bool:
        return any(t.simulated for t in self.targets)

    @property
    def time_scale(self) -> float | None:
        """The embedded simulator's time scale for a simulated run, else None."""
        if not self.simulated:
            return None
        sim = self.config.get("simulator")
        scale = sim.get("time_scale") if isinstance(sim, Mapping) else None
        if isinstance(scale, int | float) and not isinstance(scale, bool):
            return float(scale)
        return None

    @property
    def load_identity(self) -> dict[str, Any]:
        """Run-wide load settings that must match for two runs to be comparable (the
        simulator's time scale included for simulated runs: it changes every latency)."""
        load = self.config.get("load")
        out = (
            {k: load[k] for k in _LOAD_IDENTITY_KEYS if k in load}
            if isinstance(load, Mapping)
            else {}
        )
        if self.simulated:
            out["simulator.time_scale"] = self.time_scale
        return out

    @property
    def benchmark_info(self) -> BenchmarkInfo:
        """The run's benchmark: as run.json records it, else derived (BenchmarkInfo.of)."""
        return self.benchmark if self.benchmark is not None else BenchmarkInfo.of(self)

    @property
    def fingerprint(self) -> str:
        """The fingerprint of the benchmark this run measured (BenchmarkInfo)."""
        return self.benchmark_info.fingerprint

    @property
    def prompts_identity(self) -> str | None:
        """The prompts configuration as canonical JSON (None when not recorded)."""
        prompts = self.config.get("prompts")
        return _frozen_json(prompts) if isinstance(prompts, Mapping) else None


def run_info_from_json(data: Any, where: str = "run.json") -> RunInfo:
    """run.json's document as a RunInfo. Raises RunFolderError (one line naming
    ``where`` and the key) for a foreign document, an unknown layout version or a
    mistyped key."""
    if not isinstance(data, Mapping) or data.get("kind", RUN_KIND) != RUN_KIND:
        raise RunFolderError(f"{where}: not a tokrate run")
    version = data.get("layout_version")
    if version not in RUN_LAYOUT_HISTORY:
        raise RunFolderError(
            f"{where}: layout_version {version!r} is not supported"
            f" (known: {sorted(RUN_LAYOUT_HISTORY)}); upgrade tokrate"
        )
    if not data.get("run_id"):
        raise RunFolderError(f"{where}: run_id is missing")
    return from_json(RunInfo, data, where)
