"""run.json as one frozen type: :class:`RunInfo`, built and validated in one place.

The writer (``tokrate.load.run`` through :class:`tokrate.runfolder.store.RunStore`) builds a RunInfo
and the store serialises it with :meth:`RunInfo.to_dict`; every reader gets one from
:func:`tokrate.runfolder.loaded_run.load_run`, which calls :meth:`RunInfo.from_dict`. Nothing else
parses run.json, so a key is spelled, typed and defaulted exactly once.

Layout version 1 (docs/run-folder.md). Keys added after the first
release are optional for readers (their defaults below); keys this version does not
know are kept in ``extra`` and written back unchanged, so rewriting a newer file never
loses data. Times: ``started_at``/``ended_at`` are ISO-8601 UTC strings; sizes are
billions of parameters; prices USD.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Final

import orjson

from tokrate.errors import RunFolderError
from tokrate.runfolder.jsonread import JsonReader
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
    active_params_b: float | None = None
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

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], where: str) -> TargetInfo:
        r = JsonReader(data, where)
        params = r.opt_float("params_b")
        active = r.opt_float("active_params_b")
        served = r.opt_mapping("served")
        return cls(
            endpoint=r.str_("endpoint"),
            model=r.str_("model"),
            base_url=r.str_("base_url"),
            params_b=params,
            active_params_b=active if active is not None else params,
            bytes_per_param=r.opt_float("bytes_per_param"),
            price_in_per_m=r.opt_float("price_in_per_m"),
            price_cached_in_per_m=r.opt_float("price_cached_in_per_m"),
            price_out_per_m=r.opt_float("price_out_per_m"),
            gpu_hourly_usd=r.opt_float("gpu_hourly_usd"),
            gpus=r.opt_int("gpus"),
            simulated=bool(r.opt_bool("simulated")),
            family=r.opt_str("family"),
            api=r.opt_str("api"),
            size_source=r.opt_str("size_source"),
            bytes_source=r.opt_str("bytes_source"),
            served=None if served is None else ServedModel.from_dict(served, f"{where}: served"),
            prompt_cache=r.opt_str("prompt_cache"),
        )

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(frozen=True, slots=True)
class ScenarioInfo:
    """One scenario (sweep level, possibly one target): its level per target."""

    name: str
    concurrency: int | None = None
    rate_rps: float | None = None
    arrival: str | None = None

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], where: str) -> ScenarioInfo:
        r = JsonReader(data, where)
        return cls(
            name=r.str_("name"),
            concurrency=r.opt_int("concurrency"),
            rate_rps=r.opt_float("rate_rps"),
            arrival=r.opt_str("arrival"),
        )

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

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

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = dict(self.as_mapping())
        out["min_pass_rate"] = self.min_pass_rate
        out["min_pass_rate_by_task"] = dict(self.min_pass_rate_by_task)
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], where: str) -> SloInfo:
        r = JsonReader(data, where)
        by_task = data.get("min_pass_rate_by_task") or {}
        if not isinstance(by_task, Mapping) or not all(
            isinstance(v, int | float) and not isinstance(v, bool) for v in by_task.values()
        ):
            raise RunFolderError(f"{where}: min_pass_rate_by_task must map tasks to numbers")
        return cls(
            ttft_s=r.opt_float("ttft_s"),
            tpot_s=r.opt_float("tpot_s"),
            e2e_s=r.opt_float("e2e_s"),
            itl_p99_s=r.opt_float("itl_p99_s"),
            min_pass_rate=r.opt_float("min_pass_rate"),
            min_pass_rate_by_task=tuple((str(k), float(v)) for k, v in by_task.items()),
        )


@dataclass(frozen=True, slots=True)
class ScenarioLag:
    """The measuring event loop's lag over one scenario (milliseconds; the worst worker
    of that scenario): the client's own lateness while it measured that scenario."""

    scenario: str
    max_ms: float
    p99_ms: float
    samples: int = 0
    exceeded: bool = False

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], where: str) -> ScenarioLag:
        r = JsonReader(data, where)
        return cls(
            scenario=r.str_("scenario"),
            max_ms=r.opt_float("max_ms") or 0.0,
            p99_ms=r.opt_float("p99_ms") or 0.0,
            samples=r.opt_int("samples") or 0,
            exceeded=bool(r.opt_bool("exceeded")),
        )


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

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], where: str) -> SamplingStop:
        r = JsonReader(data, where)
        return cls(
            scenario=r.str_("scenario"),
            endpoint=r.str_("endpoint"),
            model=r.str_("model"),
            sent=r.opt_int("sent") or 0,
            ok=r.opt_int("ok") or 0,
            needed=r.opt_int("needed") or 0,
            reason=r.str_("reason"),
            limiting=r.str_("limiting"),
            unmet=r.strings("unmet"),
        )


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

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], where: str) -> LoopLagInfo:
        r = JsonReader(data, where)
        return cls(
            threshold_ms=r.opt_float("threshold_ms"),
            max_threshold_ms=r.opt_float("max_threshold_ms"),
            max_ms=r.opt_float("max_ms"),
            p99_ms=r.opt_float("p99_ms"),
            samples=r.opt_int("samples"),
            exceeded=bool(r.opt_bool("exceeded")),
            scenarios=_each(r.items("scenarios"), ScenarioLag.from_dict, f"{where}: scenarios"),
        )

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["scenarios"] = list(out["scenarios"])
        return out


@dataclass(frozen=True, slots=True)
class OutcomeCounts:
    """Planned requests by outcome (a retried request counts once, by its last
    attempt): scheduled == ok + error + cancelled."""

    scheduled: int = 0
    ok: int = 0
    error: int = 0
    cancelled: int = 0

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], where: str) -> OutcomeCounts:
        r = JsonReader(data, where)
        return cls(
            scheduled=r.opt_int("scheduled") or 0,
            ok=r.opt_int("ok") or 0,
            error=r.opt_int("error") or 0,
            cancelled=r.opt_int("cancelled") or 0,
        )

    def to_dict(self) -> dict[str, int]:
        return dataclasses.asdict(self)


@dataclass(frozen=True, slots=True)
class ConnectionSetup:
    """Connections opened before one scenario's window (preconnect) to one endpoint:
    how many opened and failed, and each one's set-up seconds."""

    scenario: str
    endpoint: str
    opened: int = 0
    failed: int = 0
    connect_s: tuple[float, ...] = ()

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], where: str) -> ConnectionSetup:
        r = JsonReader(data, where)
        r.used.add("connect_s")
        raw = data.get("connect_s") or []
        if not isinstance(raw, list) or not all(
            isinstance(v, int | float) and not isinstance(v, bool) for v in raw
        ):
            raise RunFolderError(f"{where}: connect_s must be a list of numbers")
        return cls(
            scenario=r.str_("scenario"),
            endpoint=r.str_("endpoint"),
            opened=r.opt_int("opened") or 0,
            failed=r.opt_int("failed") or 0,
            connect_s=tuple(float(v) for v in raw),
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "scenario": self.scenario,
            "endpoint": self.endpoint,
            "opened": self.opened,
            "failed": self.failed,
            "connect_s": list(self.connect_s),
        }


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

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], where: str) -> ScrapeInfo:
        r = JsonReader(data, where)
        return cls(
            endpoint=r.str_("endpoint"),
            url=r.str_("url"),
            interval_s=r.opt_float("interval_s") or 0.0,
            scrapes=r.opt_int("scrapes") or 0,
            failures=r.opt_int("failures") or 0,
            samples=r.opt_int("samples") or 0,
            first_error=r.opt_str("first_error"),
        )

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


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

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], where: str) -> NodeInfo:
        r = JsonReader(data, where)
        return cls(
            node_id=r.str_("node_id"),
            hostname=r.str_("hostname"),
            address=r.opt_str("address"),
            workers=r.strings("workers"),
            clock_offset_s=r.opt_float("clock_offset_s"),
            clock_uncertainty_s=r.opt_float("clock_uncertainty_s"),
            clock_round_trips=r.opt_int("clock_round_trips") or 0,
            started_at_shift_s=r.opt_float("started_at_shift_s") or 0.0,
        )

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["workers"] = list(self.workers)
        return out


@dataclass(frozen=True, slots=True)
class StopInfo:
    """A stopping rule that ended sending early (tokrate.load.stop_rules): ``rule``
    ("max_cost", ...), ``scope`` ("scenario" or "run": no later scenario ran), the
    ``scenario`` it stopped, and ``detail``, the reason in words with its numbers."""

    rule: str
    scope: str
    scenario: str
    detail: str

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], where: str) -> StopInfo:
        r = JsonReader(data, where)
        return cls(r.str_("rule"), r.str_("scope"), r.str_("scenario"), r.str_("detail"))

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


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

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], where: str) -> SpendInfo:
        r = JsonReader(data, where)
        return cls(
            max_usd=r.opt_float("max_usd"),
            requests_planned=r.opt_int("requests_planned"),
            estimate_input_usd=r.opt_float("estimate_input_usd"),
            estimate_output_max_usd=r.opt_float("estimate_output_max_usd"),
            spent_usd=r.opt_float("spent_usd") or 0.0,
            requests_priced=r.opt_int("requests_priced") or 0,
        )

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


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

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], where: str) -> BenchmarkInfo:
        r = JsonReader(data, where)
        fingerprint = r.str_("fingerprint")
        if not fingerprint:
            raise RunFolderError(f"{where}: fingerprint is missing")
        return cls(fingerprint, dict(r.mapping("identity")))

    def to_dict(self) -> dict[str, Any]:
        return {"fingerprint": self.fingerprint, "identity": dict(self.identity)}

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
    layout_version: int = RUN_LAYOUT_VERSION
    extra: Mapping[str, Any] = field(default_factory=dict)
    #: Whether the run stayed inside this machine's calibrated measurement floor
    #: (tokrate.analysis.calibration.judge_run's object); None when not judged (older runs).
    calibration: Mapping[str, Any] | None = None
    #: Where the prompts came from, per source (empty in runs older than the key).
    prompts: tuple[PromptSourceInfo, ...] = ()
    #: What the run spent at its token prices (None: no target has token prices).
    spend: SpendInfo | None = None
    #: Stopping rules that ended sending early (empty: the plan ran to its end, or a
    #: signal stopped it: ``status`` says so).
    stopped: tuple[StopInfo, ...] = ()
    #: Which benchmark this run measured, as written when it started (None in runs
    #: older than the key: :attr:`benchmark_info` derives it).
    benchmark: BenchmarkInfo | None = None
    #: ``requests = "auto"``: why each target's level stopped (empty otherwise).
    sampling: tuple[SamplingStop, ...] = ()

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

    # --- serialisation ---------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        """The run.json document (layout version 1), keys in the documented order."""
        out: dict[str, Any] = {
            "layout_version": self.layout_version,
            "kind": RUN_KIND,
            "run_id": self.run_id,
            "label": self.label,
            "status": self.status,
            "started_at": self.started_at,
            "ended_at": self.ended_at,
            "tokrate_version": self.tokrate_version,
            "python": self.python,
            "platform": self.platform,
            "host": self.host,
            "libraries": dict(self.libraries),
            "config": dict(self.config),
            "targets": [t.to_dict() for t in self.targets],
            "scenarios": [s.to_dict() for s in self.scenarios],
            "prompts": [p.to_dict() for p in self.prompts],
            "slo": self.slo.to_dict(),
            "hardware": self.hardware,
            "backend": self.backend,
            "workers": self.workers,
            "preconnect": self.preconnect,
            "connections": [c.to_dict() for c in self.connections],
            "nodes": [n.to_dict() for n in self.nodes],
            "server_metrics": [m.to_dict() for m in self.server_metrics],
            "warnings": list(self.warnings),
            "loop_lag": None if self.loop_lag is None else self.loop_lag.to_dict(),
            "counts": None if self.counts is None else self.counts.to_dict(),
            "spend": None if self.spend is None else self.spend.to_dict(),
            "stopped": [x.to_dict() for x in self.stopped],
        }
        if self.calibration is not None:
            out["calibration"] = dict(self.calibration)
        if self.benchmark is not None:
            out["benchmark"] = self.benchmark.to_dict()
        if self.sampling:
            out["sampling"] = [x.to_dict() for x in self.sampling]
        out.update(self.extra)
        return out

    @classmethod
    def from_dict(cls, data: Any, where: str = "run.json") -> RunInfo:
        """Validate and build. Raises RunFolderError (one line naming ``where`` and the
        key) for a foreign document, an unknown layout version or a mistyped key."""
        if not isinstance(data, Mapping) or data.get("kind", RUN_KIND) != RUN_KIND:
            raise RunFolderError(f"{where}: not a tokrate run")
        version = data.get("layout_version")
        if version not in RUN_LAYOUT_HISTORY:
            raise RunFolderError(
                f"{where}: layout_version {version!r} is not supported"
                f" (known: {sorted(RUN_LAYOUT_HISTORY)}); upgrade tokrate"
            )
        r = JsonReader(data, where)
        r.used.update({"layout_version", "kind"})
        run_id = r.opt_str("run_id")
        if not run_id:
            raise RunFolderError(f"{where}: run_id is missing")
        libraries = r.mapping("libraries")
        loop_lag = r.opt_mapping("loop_lag")
        counts = r.opt_mapping("counts")
        slo = r.opt_mapping("slo")
        calibration = r.opt_mapping("calibration")
        spend = r.opt_mapping("spend")
        benchmark = r.opt_mapping("benchmark")
        info = cls(
            run_id=run_id,
            label=r.opt_str("label"),
            status=r.str_("status", "running"),
            started_at=r.opt_str("started_at"),
            ended_at=r.opt_str("ended_at"),
            tokrate_version=r.str_("tokrate_version"),
            python=r.str_("python"),
            platform=r.str_("platform"),
            host=r.str_("host"),
            libraries={str(k): str(v) for k, v in libraries.items()},
            config=dict(r.mapping("config")),
            targets=_each(r.items("targets"), TargetInfo.from_dict, f"{where}: targets"),
            scenarios=_each(r.items("scenarios"), ScenarioInfo.from_dict, f"{where}: scenarios"),
            prompts=_each(r.items("prompts"), PromptSourceInfo.from_dict, f"{where}: prompts"),
            slo=SloInfo() if slo is None else SloInfo.from_dict(slo, f"{where}: slo"),
            hardware=r.opt_str("hardware"),
            backend=r.opt_str("backend"),
            workers=r.opt_int("workers"),
            preconnect=r.opt_bool("preconnect"),
            connections=_each(
                r.items("connections"), ConnectionSetup.from_dict, f"{where}: connections"
            ),
            nodes=_each(r.items("nodes"), NodeInfo.from_dict, f"{where}: nodes"),
            sampling=_each(r.items("sampling"), SamplingStop.from_dict, f"{where}: sampling"),
            server_metrics=_each(
                r.items("server_metrics"), ScrapeInfo.from_dict, f"{where}: server_metrics"
            ),
            warnings=r.strings("warnings"),
            loop_lag=None
            if loop_lag is None
            else LoopLagInfo.from_dict(loop_lag, f"{where}: loop_lag"),
            counts=None if counts is None else OutcomeCounts.from_dict(counts, f"{where}: counts"),
            layout_version=int(version),
            calibration=None if calibration is None else dict(calibration),
            spend=None if spend is None else SpendInfo.from_dict(spend, f"{where}: spend"),
            stopped=_each(r.items("stopped"), StopInfo.from_dict, f"{where}: stopped"),
            benchmark=None
            if benchmark is None
            else BenchmarkInfo.from_dict(benchmark, f"{where}: benchmark"),
        )
        return dataclasses.replace(info, extra=r.extra())


def _each(items: Sequence[Mapping[str, Any]], build: Any, where: str) -> tuple[Any, ...]:
    return tuple(build(item, f"{where}[{i}]") for i, item in enumerate(items))
