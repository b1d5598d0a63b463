"""Turning TOML tables into the spec dataclasses, field by field, driven by their type
hints and the value constraints; every failure one ConfigError line."""

from __future__ import annotations

import dataclasses as _dc
import difflib as _difflib
import math as _math
import re as _re
import types as _types
import typing as _typing

from tokrate.errors import ConfigError as _ConfigError
from tokrate.spec.types import (
    RESERVED_BODY_KEYS,
    ClientSpec,
    CompareSpec,
    DistributedSpec,
    EndpointSpec,
    LoadSpec,
    ModelSpec,
    OutputSpec,
    PromptsSpec,
    SimulatorSpec,
    SloSpec,
)

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
    "endpoint.metrics_url": "nonempty",
    "endpoint.metrics_interval_s": "pos",
    "model.endpoint": "nonempty",
    "model.name": "nonempty",
    "model.params_b": "pos",
    "model.active_params_b": "pos",
    "model.bytes_per_param": "pos",
    "model.price_in_per_m": "nonneg",
    "model.price_cached_in_per_m": "nonneg",
    "model.price_out_per_m": "nonneg",
    "model.gpu_hourly_usd": "nonneg",
    "model.gpus": "pos",
    "model.family": "nonempty",
    "load.concurrency": "pos",
    "load.rates": "pos",
    "load.burstiness": "pos",
    "load.requests": "pos",
    "load.max_requests": "pos",
    "load.duration_s": "pos",
    "load.warmup_requests": "nonneg",
    "load.warmup_s": "nonneg",
    "load.workers": "pos",
    "load.max_in_flight": "pos",
    "load.ramp_up_s": "nonneg",
    "load.max_cost_usd": "pos",
    "load.capacity.goodput": "frac",
    "load.capacity.start": "pos",
    "load.capacity.max_level": "pos",
    "load.capacity.resolution": "frac",
    "load.capacity.confidence": "frac",
    "load.capacity.min_requests": "pos",
    "load.capacity.max_requests": "pos",
    "load.capacity.warmup_requests": "nonneg",
    "load.capacity.time_budget_s": "pos",
    "load.capacity.request_budget": "pos",
    "prompts.max_tokens": "pos",
    "prompts.limit": "pos",
    "prompts.synthetic.count": "pos",
    "prompts.synthetic.input_tokens": "pos",
    "prompts.synthetic.output_tokens": "pos",
    "prompts.synthetic.input_stddev": "nonneg",
    "prompts.synthetic.output_stddev": "nonneg",
    "prompts.synthetic.task": "nonempty",
    "prompts.sessions.count": "pos",
    "prompts.sessions.turns": "pos",
    "prompts.sessions.input_tokens": "pos",
    "prompts.sessions.output_tokens": "pos",
    "prompts.sessions.system_tokens": "nonneg",
    "prompts.sessions.think_time_s": "nonneg",
    "prompts.sessions.task": "nonempty",
    "prompts.grid.input_tokens": "pos",
    "prompts.grid.output_tokens": "pos",
    "prompts.grid.count": "pos",
    "prompts.shared_prefix.prefix_tokens": "pos",
    "prompts.shared_prefix.input_tokens": "pos",
    "prompts.shared_prefix.output_tokens": "pos",
    "prompts.shared_prefix.count": "pos",
    "prompts.think_time_s": "nonneg",
    "slo.ttft_s": "pos",
    "slo.tpot_s": "pos",
    "slo.e2e_s": "pos",
    "slo.itl_p99_s": "pos",
    "slo.min_pass_rate": "frac",
    "slo.min_pass_rate_by_task": "frac",
    "output.dir": "nonempty",
    "output.run_id": "name",
    "output.label": "nonempty",
    "output.progress_interval_s": "pos",
    "client.max_response_chunks": "pos",
    "client.max_response_bytes": "pos",
    "client.timeouts.connect_s": "pos",
    "client.timeouts.first_byte_s": "pos",
    "client.timeouts.idle_s": "pos",
    "client.timeouts.total_s": "pos",
    "client.retry.max_attempts": "pos",
    "client.retry.backoff_s": "nonneg",
    "client.retry.max_wait_s": "nonneg",
    "simulator.efficiency": "frac",
    "simulator.time_scale": "pos",
    "distributed.workers": "pos",
    "distributed.num_cpus_per_worker": "pos",
    "distributed.resources": "nonneg",
    "baseline": "nonempty",
}

#: Upper bounds by dotted key, inclusive. In-flight work and arrivals are capped at
#: what one machine's event loops could ever drive, so an absurd value is refused up
#: front instead of hanging the run or eating memory. Every other integer must fit in
#: 64 bits (run.json and records.parquet store them as int64).
MAX_CONCURRENCY = 100_000
MAX_RATE_RPS = 100_000.0
MAX_WORKERS = 1024
INT64_MAX = 2**63 - 1
_MAXIMA: dict[str, float] = {
    "load.concurrency": MAX_CONCURRENCY,
    "load.rates": MAX_RATE_RPS,
    "load.workers": MAX_WORKERS,
    "distributed.workers": MAX_WORKERS,
}
#: A run id becomes a folder name under output.dir: one path component, never "..",
#: never absolute, short enough for any file system.
MAX_RUN_ID_LEN = 128
_RUN_ID = _re.compile(r"\w[\w.-]*")

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
_RESERVED_BODY_KEYS = RESERVED_BODY_KEYS


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
    if isinstance(value, int) and value.bit_length() > 200:
        # repr() of a many-thousand-digit int raises (Python's int-to-str limit).
        return f"an integer of about {int(value.bit_length() * 0.30103) + 1} digits"
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
        inners = [a for a in args if a is not type(None)]
        return " or ".join(_describe(a, constraint, plural) for a in inners)
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
        if constraint == "name":
            return (
                f"a single folder name (letters, digits, '.', '_', '-'; not starting with"
                f" '.'; at most {MAX_RUN_ID_LEN} characters)"
            )
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
    if constraint == "name":
        return len(str(value)) <= MAX_RUN_ID_LEN and bool(_RUN_ID.fullmatch(str(value)))
    return True


def _check_maximum(value: object, key: str, ctx: _Ctx) -> None:
    """Refuse a value above its key's documented maximum (see _MAXIMA)."""
    limit = _MAXIMA.get(_re.sub(r"\[\d+\]", "", key))
    if limit is not None and isinstance(value, int | float) and value > limit:
        raise ctx.error(key, f"at most {limit:g} (the documented maximum), got {_show(value)}")


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
        return _convert_union(value, args, key, ctx, constraint)
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
            except _Bad as bad:
                # Show the offending element: "got 'x'" says more than the whole list.
                what = bad.expected if "64 bits" in bad.expected else want
                raise ctx.error(key, f"expected {what}, got {_show(item)}") from None
            _check_maximum(out[-1], key, ctx)
        return tuple(out)
    try:
        converted = _scalar(value, hint, constraint)
    except _Bad as bad:
        got = f", got {_show(value)}" if bad.show_value else ""
        raise ctx.error(key, f"expected {bad.expected}{got}") from None
    _check_maximum(converted, key, ctx)
    return converted


def _convert_union(
    value: object, args: tuple[object, ...], key: str, ctx: _Ctx, constraint: str | None
) -> object:
    """A value of ``X | None`` or ``X | Literal[words]``: a string is one of the words
    (an error names both choices), anything else an X (its own error: a bound it
    breaks is said as it is)."""
    if value is None and type(None) in args:
        return None
    inners = [a for a in args if a is not type(None)]
    words = [a for a in inners if _typing.get_origin(a) is _typing.Literal]
    others = [a for a in inners if a not in words]
    if not others:  # Literal[words] | None: the words' own error
        return _convert(value, inners[0], key, ctx)
    inner = others[0]
    if words and isinstance(value, str):
        try:
            return _convert(value, words[0], key, ctx)
        except _ConfigError:
            want = " or ".join(_describe(a, constraint) for a in (inner, *words))
            raise ctx.error(key, f"expected {want}, got {_show(value)}") from None
    return _convert(value, inner, key, ctx)


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
            if abs(value) > INT64_MAX:
                raise _Bad(f"{want} that fits in 64 bits (at most {INT64_MAX})")
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
