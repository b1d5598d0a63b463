"""Frozen run specifications.

A :class:`RunSpec` is everything a benchmark run needs, resolved and validated: it is
built from a TOML file (``load_spec``) with command-line overrides applied on top, or
directly in Python. Nothing below the CLI ever sees argv. Validation errors are
:class:`~tokrate.errors.ConfigError` with a one-line message naming the file and key.
"""

from __future__ import annotations

import dataclasses as _dc
import difflib as _difflib
import math as _math
import re as _re
import tomllib as _tomllib
import types as _types
import typing as _typing
from collections.abc import Mapping as _Mapping
from dataclasses import dataclass, field
from pathlib import Path as _Path
from typing import Any, Literal

from tokrate.errors import ConfigError as _ConfigError

__all__ = [
    "ClientSpec",
    "CompareSpec",
    "DistributedSpec",
    "EndpointSpec",
    "LoadSpec",
    "ModelSpec",
    "OutputSpec",
    "PromptsSpec",
    "RetrySpec",
    "RunSpec",
    "SimulatorSpec",
    "SloSpec",
    "SyntheticSpec",
    "TimeoutsSpec",
    "load_spec",
    "prompts_base_dir",
    "spec_to_dict",
]

ClientKind = Literal["fast", "httpx", "openai"]
ApiKind = Literal["chat", "completions"]
LoadMode = Literal["closed", "open"]
ArrivalKind = Literal["constant", "poisson", "gamma"]
TargetsMode = Literal["interleaved", "sequential", "parallel"]
LengthDistribution = Literal["normal", "lognormal", "uniform"]
TextSplit = Literal["blocks", "file"]
ModelCheck = Literal["auto", "probe", "off"]


@dataclass(frozen=True, slots=True)
class EndpointSpec:
    """An OpenAI-compatible server. ``base_url`` ends in /v1 (or wherever /chat/completions
    hangs). The API key is read from the environment variable ``api_key_env`` at run
    time and is never stored in the spec."""

    name: str
    base_url: str
    api_key_env: str | None = None
    headers: tuple[tuple[str, str], ...] = ()
    #: Pre-flight check that every model exists before any load: "auto" (GET /models
    #: when the endpoint has it, else one tiny request per model), "probe" (always the
    #: tiny request: for endpoints whose /models lists nothing useful), "off".
    model_check: ModelCheck = "auto"


@dataclass(frozen=True, slots=True)
class ModelSpec:
    """One model on one endpoint (a *target*). Sizes in billions of parameters; prices in
    USD per million tokens; ``gpu_hourly_usd`` x ``gpus`` gives a self-hosted cost."""

    endpoint: str
    name: str
    params_b: float | None = None
    active_params_b: float | None = None
    bytes_per_param: float | None = None
    price_in_per_m: float | None = None
    price_out_per_m: float | None = None
    gpu_hourly_usd: float | None = None
    gpus: int | None = None
    extra_body: tuple[tuple[str, Any], ...] = ()


@dataclass(frozen=True, slots=True)
class TimeoutsSpec:
    """Seconds. ``first_byte_s`` runs from send to the response's first body byte,
    ``idle_s`` bounds every gap between reads, ``total_s`` the whole request."""

    connect_s: float = 10.0
    first_byte_s: float = 60.0
    idle_s: float = 30.0
    total_s: float = 600.0


@dataclass(frozen=True, slots=True)
class RetrySpec:
    """Explicit, recorded retries; off by default because retries distort latency."""

    max_attempts: int = 1
    on: tuple[str, ...] = ("http_429", "http_5xx", "connect")
    backoff_s: float = 1.0
    honour_retry_after: bool = True


@dataclass(frozen=True, slots=True)
class ClientSpec:
    kind: ClientKind = "fast"
    api: ApiKind = "chat"
    include_usage: bool = True
    timeouts: TimeoutsSpec = field(default_factory=TimeoutsSpec)
    retry: RetrySpec = field(default_factory=RetrySpec)
    #: Prepend a short random prefix to every prompt so provider prompt caching cannot
    #: flatter TTFT.
    unique_prompts: bool = True
    #: Open the pool's connections before each scenario's measured window, so TTFT
    #: never carries a TCP/TLS handshake; False measures cold starts (then the TTFT of
    #: a request that opened a connection includes its set-up, ``connect_s``).
    preconnect: bool = True


@dataclass(frozen=True, slots=True)
class SyntheticSpec:
    """Synthetic prompts: lengths in tokens, drawn around the mean with ``*_stddev``."""

    count: int = 32
    input_tokens: int = 256
    input_stddev: float = 0.0
    output_tokens: int = 128
    output_stddev: float = 0.0
    task: str = "synthetic"
    #: Length distribution around the mean: "normal" (clipped at 1), "lognormal" or
    #: "uniform" (mean +- stddev x sqrt(3), so the stddev holds). Stddev 0 = fixed.
    distribution: LengthDistribution = "normal"
    #: Seed of the text and lengths (independent of load.seed, so the same prompts can be
    #: replayed under a different arrival seed).
    seed: int = 0


@dataclass(frozen=True, slots=True)
class PromptsSpec:
    """Prompt sources: files/folders, bundled set names (``prompts/<name>.jsonl``), and/or
    a synthetic generator. Empty ``paths`` and ``sets`` with no ``synthetic`` means every
    bundled set."""

    paths: tuple[str, ...] = ()
    sets: tuple[str, ...] = ()
    synthetic: SyntheticSpec | None = None
    max_tokens: int | None = None
    limit: int | None = None
    #: Plain-text files: "blocks" (every blank-line-separated block is one prompt; a file
    #: without blank lines is one prompt) or "file" (each file is one prompt).
    text_split: TextSplit = "blocks"


@dataclass(frozen=True, slots=True)
class LoadSpec:
    """How requests are sent. ``concurrency`` (closed loop) or ``rates`` (open loop,
    requests/s) is a sweep: each level is one scenario. ``requests``/``duration_s``
    bound each scenario; warm-up requests are recorded but excluded from metrics."""

    mode: LoadMode = "closed"
    concurrency: tuple[int, ...] = (1,)
    rates: tuple[float, ...] = ()
    arrival: ArrivalKind = "poisson"
    burstiness: float = 1.0
    requests: int | None = 32
    duration_s: float | None = None
    warmup_requests: int = 0
    warmup_s: float = 0.0
    targets: TargetsMode = "interleaved"
    seed: int = 0
    ignore_eos: bool = False
    workers: int = 1


@dataclass(frozen=True, slots=True)
class SloSpec:
    """Per-request service-level objectives in seconds; ``None`` means not set."""

    ttft_s: float | None = None
    tpot_s: float | None = None
    e2e_s: float | None = None
    itl_p99_s: float | None = None


@dataclass(frozen=True, slots=True)
class OutputSpec:
    dir: str = "reports"
    run_id: str | None = None
    formats: tuple[str, ...] = ("png", "svg")
    hardware: str = "a100-80g"
    report: bool = True
    #: A name for the run that reports, compare and history show instead of its id.
    label: str | None = None
    #: Seconds between plain progress lines when stderr is not a terminal (CI logs).
    progress_interval_s: float = 10.0


@dataclass(frozen=True, slots=True)
class SimulatorSpec:
    """The embedded simulator used when no endpoint is configured."""

    tiers_file: str | None = None
    hardware: str = "a100-80g"
    efficiency: float = 0.8
    time_scale: float = 1.0
    seed: int = 0


@dataclass(frozen=True, slots=True)
class DistributedSpec:
    """``ray``: None (local), "auto", or a ``ray://host:port`` address."""

    ray: str | None = None
    workers: int = 2
    num_cpus_per_worker: float = 1.0
    resources: tuple[tuple[str, float], ...] = ()


@dataclass(frozen=True, slots=True)
class CompareSpec:
    """Regression thresholds for ``baseline`` comparisons, as ``tokrate compare
    --threshold`` strings (``"ttft_p95=+10%"``, ``"decode_tps_p50=-5%"``,
    ``"error_rate=+1pp"``, ``"e2e_p95=off"``); they adjust the documented defaults.
    ``thresholds_from_history``: a folder of earlier runs whose run-to-run noise sets
    each series' threshold (``tokrate.history.noise_thresholds``); None: off."""

    thresholds: tuple[str, ...] = ()
    thresholds_from_history: str | None = None


@dataclass(frozen=True, slots=True)
class RunSpec:
    endpoints: tuple[EndpointSpec, ...] = ()
    models: tuple[ModelSpec, ...] = ()
    load: LoadSpec = field(default_factory=LoadSpec)
    prompts: PromptsSpec = field(default_factory=PromptsSpec)
    slo: SloSpec = field(default_factory=SloSpec)
    output: OutputSpec = field(default_factory=OutputSpec)
    client: ClientSpec = field(default_factory=ClientSpec)
    simulator: SimulatorSpec = field(default_factory=SimulatorSpec)
    distributed: DistributedSpec = field(default_factory=DistributedSpec)
    compare: CompareSpec = field(default_factory=CompareSpec)
    baseline: str | None = None
    source: str | None = None
    """The config file this spec was loaded from, for error messages and run.json."""

    @property
    def uses_simulator(self) -> bool:
        return not self.endpoints


# --- loading ------------------------------------------------------------------------
#
# load_spec reads TOML into plain dicts, lays dotted overrides on top, then converts
# every table into its dataclass field by field, driven by the dataclasses' own type
# hints plus the value constraints below. Every failure is one ConfigError line:
# "<where>: key '<dotted.key>': expected <what>, got <value>".


#: Value constraints by dotted key ("endpoint.name" covers every [[endpoint]]):
#: pos (> 0), nonneg (>= 0), frac (0 < x <= 1), nonempty (string/list not empty).
_CONSTRAINTS: dict[str, str] = {
    "endpoint.name": "nonempty",
    "endpoint.base_url": "nonempty",
    "model.endpoint": "nonempty",
    "model.name": "nonempty",
    "model.params_b": "pos",
    "model.active_params_b": "pos",
    "model.bytes_per_param": "pos",
    "model.price_in_per_m": "nonneg",
    "model.price_out_per_m": "nonneg",
    "model.gpu_hourly_usd": "nonneg",
    "model.gpus": "pos",
    "load.concurrency": "pos",
    "load.rates": "pos",
    "load.burstiness": "pos",
    "load.requests": "pos",
    "load.duration_s": "pos",
    "load.warmup_requests": "nonneg",
    "load.warmup_s": "nonneg",
    "load.workers": "pos",
    "prompts.max_tokens": "pos",
    "prompts.limit": "pos",
    "prompts.synthetic.count": "pos",
    "prompts.synthetic.input_tokens": "pos",
    "prompts.synthetic.output_tokens": "pos",
    "prompts.synthetic.input_stddev": "nonneg",
    "prompts.synthetic.output_stddev": "nonneg",
    "prompts.synthetic.task": "nonempty",
    "slo.ttft_s": "pos",
    "slo.tpot_s": "pos",
    "slo.e2e_s": "pos",
    "slo.itl_p99_s": "pos",
    "output.dir": "nonempty",
    "output.run_id": "nonempty",
    "output.label": "nonempty",
    "output.progress_interval_s": "pos",
    "client.timeouts.connect_s": "pos",
    "client.timeouts.first_byte_s": "pos",
    "client.timeouts.idle_s": "pos",
    "client.timeouts.total_s": "pos",
    "client.retry.max_attempts": "pos",
    "client.retry.backoff_s": "nonneg",
    "simulator.efficiency": "frac",
    "simulator.time_scale": "pos",
    "distributed.workers": "pos",
    "distributed.num_cpus_per_worker": "pos",
    "distributed.resources": "nonneg",
    "baseline": "nonempty",
}

#: The TOML layout: top-level key -> dataclass (array tables map to one element's type).
_ARRAY_TABLES: dict[str, type] = {"endpoint": EndpointSpec, "model": ModelSpec}
_SECTIONS: dict[str, type] = {
    "load": LoadSpec,
    "prompts": PromptsSpec,
    "slo": SloSpec,
    "output": OutputSpec,
    "client": ClientSpec,
    "simulator": SimulatorSpec,
    "distributed": DistributedSpec,
    "compare": CompareSpec,
}
_TOP_LEVEL = ("baseline", *_ARRAY_TABLES, *_SECTIONS)
#: Override keys that name the array tables by their RunSpec field names.
_OVERRIDE_ALIASES = {"endpoints": "endpoint", "models": "model"}
_FORMATS = ("png", "svg", "pdf")
_ENV_NAME = _re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_HEADER_NAME = _re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
_RESERVED_BODY_KEYS = ("model", "messages", "prompt", "stream")


class _Bad(Exception):
    """A value failed conversion; ``expected`` says what was wanted (internal)."""

    def __init__(self, expected: str, *, show_value: bool = True) -> None:
        super().__init__(expected)
        self.expected = expected
        self.show_value = show_value


def _show(value: object) -> str:
    """A short, single-line rendering of a bad value for an error message."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict):
        return "a table"
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


class _Ctx:
    """Where each key came from: the file or the command line (for error prefixes)."""

    def __init__(self, source: str | None, override_keys: set[str]) -> None:
        self.source = source
        self.override_keys = override_keys

    def where(self, key: str) -> str:
        plain = _re.sub(r"\[\d+\]", "", key)
        parts = plain.split(".")
        for i in range(len(parts), 0, -1):
            if ".".join(parts[:i]) in self.override_keys:
                return "command line"
        return self.source or "command line"

    def error(self, key: str, message: str) -> _ConfigError:
        return _ConfigError(f"{self.where(key)}: key '{key}': {message}")


def _describe(hint: object, constraint: str | None, plural: bool = False) -> str:
    """Human words for a type hint ("positive integer", "list of strings")."""
    origin = _typing.get_origin(hint)
    args = _typing.get_args(hint)
    s = "s" if plural else ""
    if origin is _typing.Literal:
        choices = ", ".join(repr(a) for a in args)
        return f"values each one of {choices}" if plural else f"one of {choices}"
    if origin in (_typing.Union, _types.UnionType):
        return _describe(next(a for a in args if a is not type(None)), constraint, plural)
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            inner = args[0]
            if _typing.get_origin(inner) is tuple:
                return f"table of {_describe(_typing.get_args(inner)[1], constraint, True)}"
            return f"list of {_describe(inner, constraint, True)}"
        return "list"
    prefix = {"pos": "positive ", "nonneg": "non-negative ", "nonempty": "non-empty "}.get(
        constraint or "", ""
    )
    if hint is bool:
        return f"boolean{s} (true/false)"
    if hint is int:
        return f"{prefix}integer{s}"
    if hint is float:
        if constraint == "frac":
            return f"number{s} in (0, 1]"
        return f"{prefix}number{s}"
    if hint is str:
        return f"{prefix}string{s}"
    if hint is _typing.Any:
        return "JSON-compatible values" if plural else "JSON-compatible value"
    if isinstance(hint, type) and _dc.is_dataclass(hint):
        return f"table{s}"
    return str(hint)


def _check_constraint(value: float | int | str, constraint: str | None) -> bool:
    if constraint == "pos":
        return bool(value > 0)  # type: ignore[operator]
    if constraint == "nonneg":
        return bool(value >= 0)  # type: ignore[operator]
    if constraint == "frac":
        return bool(0 < value <= 1)  # type: ignore[operator]
    if constraint == "nonempty":
        return bool(str(value).strip())
    return True


def _json_safe(value: object) -> bool:
    """True when ``value`` is made only of JSON types (TOML dates are not)."""
    if value is None or isinstance(value, str | bool | int):
        return True
    if isinstance(value, float):
        return _math.isfinite(value)
    if isinstance(value, list | tuple):
        return all(_json_safe(v) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and _json_safe(v) for k, v in value.items())
    return False


def _convert(value: object, hint: object, key: str, ctx: _Ctx) -> object:
    """Convert one raw TOML/override value to the field type ``hint``; raises ConfigError."""
    constraint = _CONSTRAINTS.get(_re.sub(r"\[\d+\]", "", key))
    origin = _typing.get_origin(hint)
    args = _typing.get_args(hint)
    if origin in (_typing.Union, _types.UnionType):
        if value is None and type(None) in args:
            return None
        inner = next(a for a in args if a is not type(None))
        return _convert(value, inner, key, ctx)
    if isinstance(hint, type) and _dc.is_dataclass(hint):
        if isinstance(value, hint):
            value = _dataclass_to_raw(value)
        if not isinstance(value, dict):
            raise ctx.error(key, f"expected a table, got {_show(value)}")
        return _build(hint, value, key, ctx)
    if origin is tuple and len(args) == 2 and args[1] is Ellipsis:
        inner = args[0]
        if _typing.get_origin(inner) is tuple:  # a TOML table kept as ordered pairs
            if isinstance(value, list | tuple) and all(
                isinstance(p, list | tuple) and len(p) == 2 for p in value
            ):
                value = {str(k): v for k, v in value}
            if not isinstance(value, dict):
                raise ctx.error(key, f"expected {_describe(hint, constraint)}, got {_show(value)}")
            vhint = _typing.get_args(inner)[1]
            return tuple((str(k), _convert(v, vhint, f"{key}.{k}", ctx)) for k, v in value.items())
        items = list(value) if isinstance(value, list | tuple) else [value]
        want = _describe(hint, constraint)
        if isinstance(value, dict) or (not items and constraint == "nonempty"):
            raise ctx.error(key, f"expected {want}, got {_show(value)}")
        out = []
        for item in items:
            try:
                out.append(_scalar(item, inner, constraint))
            except _Bad:
                # Show the offending element: "got 'x'" says more than the whole list.
                raise ctx.error(key, f"expected {want}, got {_show(item)}") from None
        return tuple(out)
    try:
        return _scalar(value, hint, constraint)
    except _Bad as bad:
        got = f", got {_show(value)}" if bad.show_value else ""
        raise ctx.error(key, f"expected {bad.expected}{got}") from None


def _scalar(value: object, hint: object, constraint: str | None) -> object:
    """One scalar of type ``hint`` (bool, int, float, str, Literal, Any); raises _Bad."""
    want = _describe(hint, constraint)
    if _typing.get_origin(hint) is _typing.Literal:
        if isinstance(value, str) and value in _typing.get_args(hint):
            return value
        raise _Bad(want)
    if hint is _typing.Any:
        if not _json_safe(value):
            raise _Bad(want)
        return value
    if hint is bool:
        if isinstance(value, bool):
            return value
        raise _Bad(want)
    if hint is int:
        if (
            isinstance(value, int)
            and not isinstance(value, bool)
            and _check_constraint(value, constraint)
        ):
            return value
        raise _Bad(want)
    if hint is float:
        if isinstance(value, int | float) and not isinstance(value, bool):
            number = float(value)
            if _math.isfinite(number) and _check_constraint(number, constraint):
                return number
        raise _Bad(want)
    if hint is str:
        if isinstance(value, str) and _check_constraint(value, constraint):
            return value
        raise _Bad(want)
    raise _Bad(want)  # pragma: no cover - every hint in the specs is handled above


def _fields(cls: type) -> dict[str, object]:
    hints = _typing.get_type_hints(cls)
    return {f.name: hints[f.name] for f in _dc.fields(cls) if f.init and f.name != "source"}


def _unknown(key: str, name: str, known: _typing.Iterable[str], ctx: _Ctx) -> _ConfigError:
    known = sorted(known)
    close = _difflib.get_close_matches(name, known, n=1)
    hint = f"did you mean '{close[0]}'?" if close else f"known: {', '.join(known)}"
    return ctx.error(key, f"unknown key ({hint})")


def _build(cls: type, raw: dict[str, object], prefix: str, ctx: _Ctx) -> object:
    """Build dataclass ``cls`` from table ``raw`` whose dotted path is ``prefix``."""
    fields = _fields(cls)
    kwargs: dict[str, object] = {}
    for name, value in raw.items():
        key = f"{prefix}.{name}" if prefix else str(name)
        if name not in fields:
            raise _unknown(key, str(name), fields, ctx)
        kwargs[str(name)] = _convert(value, fields[str(name)], key, ctx)
    try:
        return cls(**kwargs)
    except TypeError:
        missing = [
            f.name
            for f in _dc.fields(cls)
            if f.name not in kwargs
            and f.default is _dc.MISSING
            and f.default_factory is _dc.MISSING
        ]
        key = f"{prefix}.{missing[0]}" if missing else prefix
        raise ctx.error(key, "required but missing") from None


def _dataclass_to_raw(obj: object) -> dict[str, object]:
    """A spec dataclass as the raw dict load_spec would have read (pairs -> tables)."""
    out: dict[str, object] = {}
    for f in _dc.fields(obj):  # type: ignore[arg-type]
        value = getattr(obj, f.name)
        if f.name == "source":
            continue
        if _dc.is_dataclass(value) and not isinstance(value, type):
            value = _dataclass_to_raw(value)
        out[f.name] = value
    return out


def _read_toml(path: _Path) -> dict[str, object]:
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise _ConfigError(f"{path}: config file not found") from None
    except IsADirectoryError:
        raise _ConfigError(f"{path}: is a directory, not a config file") from None
    except OSError as err:
        raise _ConfigError(f"{path}: cannot read ({err.strerror})") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        line = data[: err.start].count(b"\n") + 1
        raise _ConfigError(f"{path}: line {line}: not valid UTF-8") from None
    try:
        return _tomllib.loads(text)
    except _tomllib.TOMLDecodeError as err:
        message = str(err).splitlines()[0] if str(err) else "invalid TOML"
        raise _ConfigError(f"{path}: invalid TOML: {message}") from None


def _apply_overrides(raw: dict[str, object], overrides: _Mapping[str, object]) -> set[str]:
    """Lay dotted ``overrides`` over ``raw`` in place; returns the overridden keys."""
    keys: set[str] = set()
    for dotted, value in overrides.items():
        parts = str(dotted).split(".")
        parts[0] = _OVERRIDE_ALIASES.get(parts[0], parts[0])
        if parts[0] not in _TOP_LEVEL:
            raise _unknown(parts[0], parts[0], _TOP_LEVEL, _Ctx(None, set()))
        node = raw
        for i, part in enumerate(parts[:-1]):
            child = node.get(part)
            if not isinstance(child, dict):
                child = {}
                node[part] = child
            node = child
            keys.add(".".join(parts[: i + 1]))
        if parts[0] in _ARRAY_TABLES and len(parts) == 1 and isinstance(value, list | tuple):
            value = [_dataclass_to_raw(v) if _dc.is_dataclass(v) else v for v in value]
        node[parts[-1]] = value
        keys.add(".".join(parts))
    return keys


def load_spec(
    path: str | _Path | None = None, overrides: _Mapping[str, object] | None = None
) -> RunSpec:
    """Load a RunSpec from TOML file ``path`` (None: defaults only) with ``overrides``.

    ``overrides`` are dotted keys of the TOML layout, already typed by the CLI (lists or
    tuples for sweeps; ``"endpoints"``/``"models"`` take lists of EndpointSpec/ModelSpec
    or tables); an override always wins over the file. Model sizes missing from the
    config are inferred from model names when targets are resolved
    (:func:`tokrate.sizes.fill_sizes`).

    Raises:
        ConfigError: one line, ``"<file or command line>: key '<dotted.key>': ..."``,
            for an unreadable file, invalid TOML, an unknown key, a wrong type or value,
            or an inconsistent combination (a model naming an unknown endpoint, open
            loop without rates, ...).
    """
    source = str(path) if path is not None else None
    raw: dict[str, object] = _read_toml(_Path(path)) if path is not None else {}
    override_keys = _apply_overrides(raw, overrides or {})
    ctx = _Ctx(source, override_keys)
    for name in raw:
        if name not in _TOP_LEVEL:
            raise _unknown(name, name, _TOP_LEVEL, ctx)

    endpoints = tuple(_array(raw, "endpoint", ctx))
    names = [e.name for e in endpoints]  # type: ignore[attr-defined]
    for i, name in enumerate(names):
        if name in names[:i]:
            raise ctx.error(f"endpoint[{i}].name", f"duplicate endpoint name {name!r}")
    for i, ep in enumerate(endpoints):
        _check_endpoint(ep, f"endpoint[{i}]", ctx)  # type: ignore[arg-type]

    models = tuple(_models(raw, names, ctx))
    sections: dict[str, object] = {}
    for name, cls in _SECTIONS.items():
        table = raw.get(name, {})
        if isinstance(table, cls):  # a typed override: {"client": ClientSpec(...)}
            table = _dataclass_to_raw(table)
        if not isinstance(table, dict):
            raise ctx.error(name, f"expected a table ([{name}]), got {_show(table)}")
        if name == "load":
            table = _infer_load(table, ctx)
        sections[name] = _build(cls, table, name, ctx)
    baseline = raw.get("baseline")
    if baseline is not None:
        baseline = _convert(baseline, str, "baseline", ctx)
    spec = RunSpec(
        endpoints=endpoints,  # type: ignore[arg-type]
        models=models,
        baseline=baseline,  # type: ignore[arg-type]
        source=source,
        **sections,  # type: ignore[arg-type]
    )
    _check_sections(spec, raw, ctx)
    return spec


def _array(raw: dict[str, object], name: str, ctx: _Ctx) -> list[object]:
    value = raw.get(name, [])
    if isinstance(value, dict):  # a single [name] table reads as one element
        value = [value]
    if not isinstance(value, list | tuple):
        raise ctx.error(name, f"expected an array of tables ([[{name}]]), got {_show(value)}")
    cls = _ARRAY_TABLES[name]
    out: list[object] = []
    for i, item in enumerate(value):
        key = f"{name}[{i}]"
        if isinstance(item, cls):
            item = _dataclass_to_raw(item)
        if not isinstance(item, dict):
            raise ctx.error(key, f"expected a table, got {_show(item)}")
        if name == "model":
            out.append(item)  # built by _models (endpoint defaults need the names)
        else:
            out.append(_build(cls, item, key, ctx))
    return out


def _check_endpoint(ep: EndpointSpec, key: str, ctx: _Ctx) -> None:
    if not _re.match(r"https?://[^/\s]+", ep.base_url):
        raise ctx.error(
            f"{key}.base_url", f"expected an http:// or https:// URL, got {_show(ep.base_url)}"
        )
    if ep.api_key_env is not None and not _ENV_NAME.fullmatch(ep.api_key_env):
        # Never echo it: a value that is not a variable name may be the key itself.
        raise ctx.error(
            f"{key}.api_key_env",
            "expected the NAME of an environment variable (letters, digits, _); "
            "the value is not shown because it may be a secret",
        )
    for name, value in ep.headers:
        if not _HEADER_NAME.fullmatch(name):
            raise ctx.error(f"{key}.headers", f"invalid header name {_show(name)}")
        if not isinstance(value, str) or "\r" in value or "\n" in value:
            raise ctx.error(f"{key}.headers.{name}", "expected a one-line string value")


def _models(raw: dict[str, object], endpoint_names: list[str], ctx: _Ctx) -> list[ModelSpec]:
    out: list[ModelSpec] = []
    for i, item in enumerate(_array(raw, "model", ctx)):
        key = f"model[{i}]"
        table = dict(item)  # type: ignore[call-overload]
        if "endpoint" not in table:
            if len(endpoint_names) == 1:
                table["endpoint"] = endpoint_names[0]
            elif not endpoint_names:
                table["endpoint"] = "sim"
            else:
                known = ", ".join(repr(n) for n in endpoint_names)
                raise ctx.error(
                    f"{key}.endpoint", f"required when several endpoints are defined ({known})"
                )
        model = _build(ModelSpec, table, key, ctx)
        assert isinstance(model, ModelSpec)
        if endpoint_names and model.endpoint not in endpoint_names:
            known = ", ".join(repr(n) for n in endpoint_names)
            raise ctx.error(
                f"{key}.endpoint", f"no [[endpoint]] named {model.endpoint!r} (known: {known})"
            )
        if not endpoint_names and model.endpoint != "sim":
            raise ctx.error(
                f"{key}.endpoint",
                f"no [[endpoint]] named {model.endpoint!r} (none defined: models then "
                "name simulator tiers and use endpoint 'sim')",
            )
        for body_key, _ in model.extra_body:
            if body_key in _RESERVED_BODY_KEYS:
                raise ctx.error(f"{key}.extra_body.{body_key}", "reserved: tokrate sets it itself")
        if any((m.endpoint, m.name) == (model.endpoint, model.name) for m in out):
            raise ctx.error(f"{key}.name", f"duplicate model {model.name!r} on {model.endpoint!r}")
        if (
            model.params_b is not None
            and model.active_params_b is not None
            and model.active_params_b > model.params_b
        ):
            raise ctx.error(
                f"{key}.active_params_b",
                f"expected at most params_b ({model.params_b:g}), got {model.active_params_b:g}",
            )
        out.append(model)
    return out


def _infer_load(table: dict[str, object], ctx: _Ctx) -> dict[str, object]:
    """Fill the load defaults that depend on what the user set.

    - ``mode`` defaults to "open" when ``rates`` is set, else "closed".
    - ``requests`` defaults to None (no count bound) when ``duration_s`` is set.
    - A command-line switch to open loop (rates/mode overridden) drops the file's
      ``concurrency``; both set in the same place is an error.
    """
    table = dict(table)
    cli = ctx.override_keys
    if (
        "concurrency" in table
        and "load.concurrency" not in cli
        and ({"load.rates", "load.mode"} & cli)
        and (table.get("mode") == "open" or table.get("rates") not in (None, [], ()))
    ):
        # The command line switched to open loop: the file's closed-loop sweep yields.
        del table["concurrency"]
    if "mode" not in table:
        table["mode"] = "open" if table.get("rates") not in (None, [], ()) else "closed"
    if "duration_s" in table and table["duration_s"] is not None and "requests" not in table:
        table["requests"] = None
    if table.get("mode") == "open" and "concurrency" in table and "rates" in table:
        raise ctx.error(
            "load.concurrency",
            "set either load.concurrency (closed loop) or load.rates (open loop), not both",
        )
    return table


def _check_sections(spec: RunSpec, raw: dict[str, object], ctx: _Ctx) -> None:
    """Cross-field rules that no single value can express."""
    from tokrate.hardware import get_hardware
    from tokrate.records import ERROR_CLASSES
    from tokrate.thresholds import ThresholdError, parse_threshold

    for i, text in enumerate(spec.compare.thresholds):
        try:
            parse_threshold(text)
        except ThresholdError as err:
            raise ctx.error(f"compare.thresholds[{i}]", f"{err.problem} (got {text!r})") from None

    load = spec.load
    if load.mode == "open" and not load.rates:
        raise ctx.error("load.rates", "required (non-empty) when load.mode = 'open'")
    if load.mode == "closed" and load.rates:
        raise ctx.error("load.rates", "set, but load.mode is 'closed' (rates are open loop)")
    if load.mode == "closed" and not load.concurrency:
        raise ctx.error("load.concurrency", "required (non-empty) when load.mode = 'closed'")
    if load.requests is None and load.duration_s is None:
        raise ctx.error("load.requests", "set load.requests or load.duration_s (or both)")
    for key, levels in (("load.concurrency", load.concurrency), ("load.rates", load.rates)):
        dup = [x for i, x in enumerate(levels) if x in levels[:i]]
        if dup:
            raise ctx.error(key, f"duplicate level {dup[0]:g}")
    for key, name in (
        ("output.hardware", spec.output.hardware),
        (
            "simulator.hardware",
            spec.simulator.hardware,
        ),
    ):
        try:
            get_hardware(name)
        except _ConfigError as err:
            raise ctx.error(key, str(err)) from None
    for fmt in spec.output.formats:
        if fmt not in _FORMATS:
            known = ", ".join(repr(f) for f in _FORMATS)
            raise ctx.error("output.formats", f"expected values each one of {known}, got {fmt!r}")
    for cls in spec.client.retry.on:
        if cls not in ERROR_CLASSES:
            known = ", ".join(sorted(ERROR_CLASSES))
            raise ctx.error("client.retry.on", f"unknown error class {cls!r} (known: {known})")
    if spec.prompts.sets:
        from tokrate.prompts import bundled_sets

        available = bundled_sets()
        for name in spec.prompts.sets:
            if name not in available:
                raise ctx.error(
                    "prompts.sets",
                    f"no bundled set {name!r} (known: {', '.join(available)})",
                )


def prompts_base_dir(spec: RunSpec) -> _Path:
    """The folder relative prompt paths are read from: the config file's folder, or
    the current directory for a spec without a file (the CLI passes absolute paths
    for --prompts)."""
    return _Path(spec.source).resolve().parent if spec.source else _Path.cwd()


def _redact_pairs(pairs: tuple[tuple[str, object], ...]) -> dict[str, object]:
    from tokrate.redact import Redactor

    redacted = Redactor().value(dict(pairs))
    assert isinstance(redacted, dict)
    return redacted


def _to_jsonable(value: object) -> object:
    if _dc.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _to_jsonable(getattr(value, f.name)) for f in _dc.fields(value)}
    if isinstance(value, tuple | list):
        return [_to_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _to_jsonable(v) for k, v in value.items()}
    return value


def spec_to_dict(spec: RunSpec) -> dict[str, object]:
    """``spec`` as a JSON-safe dict (run.json's ``config``), secrets removed.

    Endpoints keep only the *name* of their API key variable, never a value; header
    values and extra_body values whose names look like credentials (auth, key, token,
    secret, password, cookie) become ``"<redacted>"``. Tuples become lists; the layout
    follows the dataclasses (``endpoints``, ``models``, ``load``, ...).
    """
    out = _to_jsonable(spec)
    assert isinstance(out, dict)
    out["endpoints"] = [
        {**_to_jsonable(ep), "headers": _redact_pairs(ep.headers)}  # type: ignore[dict-item]
        for ep in spec.endpoints
    ]
    out["models"] = [
        {**_to_jsonable(m), "extra_body": _to_jsonable(_redact_pairs(m.extra_body))}  # type: ignore[dict-item]
        for m in spec.models
    ]
    out["distributed"]["resources"] = dict(spec.distributed.resources)
    out["uses_simulator"] = spec.uses_simulator
    return out
