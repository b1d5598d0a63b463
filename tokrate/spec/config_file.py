"""``load_spec``: TOML file + dotted overrides -> a validated, frozen RunSpec; and
``spec_to_dict`` (run.json's ``config``)."""

from __future__ import annotations

import dataclasses as _dc
import re as _re
from collections.abc import Mapping as _Mapping
from pathlib import Path as _Path
from urllib.parse import urlsplit as _urlsplit

from tokrate.errors import ConfigError as _ConfigError
from tokrate.spec._convert import (
    _ARRAY_TABLES,
    _ENV_NAME,
    _FORMATS,
    _HEADER_NAME,
    _OVERRIDE_ALIASES,
    _RESERVED_BODY_KEYS,
    _SECTIONS,
    _TOP_LEVEL,
    _build,
    _convert,
    _Ctx,
    _dataclass_to_raw,
    _show,
    _unknown,
)
from tokrate.spec._paths import resolve_hardware_files, resolve_tokenizers
from tokrate.spec.command_line import SIM_ENDPOINT, RunFlags
from tokrate.spec.header_values import header_value_problem
from tokrate.spec.request_fields import unstreamable
from tokrate.spec.types import (
    EndpointSpec,
    ModelSpec,
    RunSpec,
)

__all__ = ["load_spec", "prompts_base_dir", "spec_to_dict"]

#: The shortest ``[[endpoint]] metrics_url`` scrape interval, seconds.
MIN_METRICS_INTERVAL_S = 0.1


def _read_toml(path: _Path) -> dict[str, object]:
    from tokrate.tomlfile import read_toml

    return read_toml(path, str(path), "config file")


def _apply_overrides(raw: dict[str, object], overrides: _Mapping[str, object]) -> set[str]:
    """Lay dotted ``overrides`` over ``raw`` in place; returns the overridden keys."""
    keys: set[str] = set()
    for dotted, value in overrides.items():
        parts = str(dotted).split(".")
        parts[0] = _OVERRIDE_ALIASES.get(parts[0], parts[0])
        if parts[0] not in _TOP_LEVEL:
            raise _unknown(parts[0], parts[0], _TOP_LEVEL, _Ctx(None, set()))
        node = raw
        # Only the overridden key itself: its parent tables still come from the file,
        # so an error in a sibling key names the file, not the command line.
        for part in parts[:-1]:
            child = node.get(part)
            if not isinstance(child, dict):
                child = {}
                node[part] = child
            node = child
        if parts[0] in _ARRAY_TABLES and len(parts) == 1 and isinstance(value, list | tuple):
            value = [_dataclass_to_raw(v) if _dc.is_dataclass(v) else v for v in value]
        node[parts[-1]] = value
        keys.add(".".join(parts))
    return keys


def load_spec(
    path: str | _Path | None = None,
    overrides: _Mapping[str, object] | None = None,
    flags: RunFlags | None = None,
) -> RunSpec:
    """Load a RunSpec from TOML file ``path`` (None: defaults only) with ``overrides``
    and, from the CLI, ``tokrate run``'s ``flags``, in one pass.

    ``overrides`` are dotted keys of the TOML layout, already typed by the CLI (lists or
    tuples for sweeps; ``"endpoints"``/``"models"`` take lists of EndpointSpec/ModelSpec
    or tables); an override always wins over the file. ``flags`` are ``tokrate run``'s
    target and mode flags, attached by the rules of :mod:`tokrate.spec.command_line`
    (the embedded defaults, ``--base-url``, ``-m`` on a config, ...); None (a library
    call) applies none of them. Model sizes
    missing from the config are inferred from model names when targets are resolved
    (:func:`tokrate.inputs.sizes.fill_sizes`).

    Raises:
        ConfigError: one line, ``"<file or command line>: key '<dotted.key>': ..."``,
            for an unreadable file, invalid TOML, an unknown key, a wrong type or value,
            or an inconsistent combination (a model naming an unknown endpoint, open
            loop without rates, ...).
        UsageError: ``flags`` that need another flag (``--base-url`` without ``-m``).
    """
    source = str(path) if path is not None else None
    raw: dict[str, object] = _read_toml(_Path(path)) if path is not None else {}
    overrides = overrides or {}
    if flags is not None:
        flags.check()
        overrides = flags.overrides(path is not None, overrides)
    override_keys = _apply_overrides(raw, overrides)
    if flags is not None:
        override_keys |= flags.attach(raw)
    ctx = _Ctx(source, override_keys)
    for name in raw:
        if name not in _TOP_LEVEL:
            raise _unknown(name, name, _TOP_LEVEL, ctx)

    endpoints = tuple(_azure_implied(e) for e in _array(raw, "endpoint", ctx))
    names = [e.name for e in endpoints]  # type: ignore[attr-defined]
    for i, name in enumerate(names):
        if name in names[:i]:
            raise ctx.error(f"endpoint[{i}].name", f"duplicate endpoint name {name!r}")
    for i, ep in enumerate(endpoints):
        _check_endpoint(ep, f"endpoint[{i}]", ctx)  # type: ignore[arg-type]

    models = tuple(resolve_tokenizers(_models(raw, names, ctx), ctx))
    if flags is not None:
        models = flags.choose_models(models, endpoints)  # type: ignore[arg-type]
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
    resolve_hardware_files(sections, ctx)
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
    return _one_hardware(spec, raw, ctx)


def _set_in(raw: dict[str, object], ctx: _Ctx, section: str, key: str) -> bool:
    table = raw.get(section)
    return f"{section}.{key}" in ctx.override_keys or (isinstance(table, dict) and key in table)


def _one_hardware(spec: RunSpec, raw: dict[str, object], ctx: _Ctx) -> RunSpec:
    """With the embedded simulator, the hardware the bound is drawn for is the one the
    simulator runs on: ``--hardware`` / ``[output] hardware`` moves the simulator too
    (and ``[simulator] hardware`` the bound), so the chart never compares points
    measured on one GPU with the bound of another. Both set, to different profiles, is
    refused (ConfigError, one line)."""
    if not spec.uses_simulator:
        return spec
    out_set = _set_in(raw, ctx, "output", "hardware")
    sim_set = _set_in(raw, ctx, "simulator", "hardware")
    out, sim = spec.output.hardware, spec.simulator.hardware
    if out_set and sim_set and out != sim:
        raise ctx.error(
            "output.hardware",
            f"{out!r} would draw the bound for other hardware than the embedded simulator "
            f"runs on ({sim!r}, simulator.hardware); with the simulator set one of them",
        )
    if out_set:
        return _dc.replace(spec, simulator=_dc.replace(spec.simulator, hardware=out))
    if sim_set:
        return _dc.replace(spec, output=_dc.replace(spec.output, hardware=sim))
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


def _azure_implied(endpoint: object) -> object:
    """``api_version`` is only meaningful on Azure OpenAI: it implies ``kind``."""
    if isinstance(endpoint, EndpointSpec) and endpoint.api_version is not None:
        return _dc.replace(endpoint, kind="azure")
    return endpoint


def _url_problem(url: str) -> str | None:
    """Why ``url`` is no usable http(s) base URL, or None when it is one."""
    if not _re.match(r"https?://[^/\s]+", url) or any(c.isspace() for c in url):
        return "expected an http:// or https:// URL"
    try:
        parts = _urlsplit(url)
        _ = parts.port  # raises for a port that is not a number in 0..65535
    except ValueError as err:
        return f"invalid URL ({err})"
    if not parts.hostname:
        return "invalid URL (no host)"
    return None


def _check_endpoint(ep: EndpointSpec, key: str, ctx: _Ctx) -> None:
    if ep.simulator and ep.base_url:
        raise ctx.error(f"{key}.base_url", "not with simulator = true (tokrate starts it)")
    if not ep.simulator and not ep.base_url:
        raise ctx.error(f"{key}.base_url", "required (or simulator = true: the embedded one)")
    problem = None if ep.simulator else _url_problem(ep.base_url)
    if problem is not None:
        raise ctx.error(f"{key}.base_url", f"{problem}, got {_show(ep.base_url)}")
    problem = None if ep.metrics_url is None else _url_problem(ep.metrics_url)
    if problem is not None:
        raise ctx.error(f"{key}.metrics_url", f"{problem}, got {_show(ep.metrics_url)}")
    if ep.metrics_interval_s < MIN_METRICS_INTERVAL_S:
        raise ctx.error(
            f"{key}.metrics_interval_s",
            f"at least {MIN_METRICS_INTERVAL_S:g} s (faster scrapes load the server"
            f" being measured), got {_show(ep.metrics_interval_s)}",
        )
    if ep.api_key_env is not None and not _ENV_NAME.fullmatch(ep.api_key_env):
        # Never echo it: a value that is not a variable name may be the key itself.
        raise ctx.error(
            f"{key}.api_key_env",
            "expected the NAME of an environment variable (letters, digits, _); "
            "the value is not shown because it may be a secret",
        )
    _check_headers(ep.headers, key, ctx)
    _check_body(ep.extra_body, key, ctx)
    if ep.kind == "azure" and ep.api_version is None:
        raise ctx.error(f"{key}.api_version", "required when kind = 'azure' (e.g. \"2024-10-21\")")
    if ep.kind == "azure" and ep.api == "anthropic":
        raise ctx.error(f"{key}.api", "an Azure OpenAI endpoint does not speak 'anthropic'")


def _check_headers(headers: tuple[tuple[str, str], ...], key: str, ctx: _Ctx) -> None:
    for name, value in headers:
        if not _HEADER_NAME.fullmatch(name):
            raise ctx.error(f"{key}.headers", f"invalid header name {_show(name)}")
        if not isinstance(value, str):
            raise ctx.error(f"{key}.headers.{name}", "expected a one-line string value")
        problem = header_value_problem(value)
        if problem is not None:
            # Never the value: a header may carry a secret (x-api-key, a cookie).
            raise ctx.error(
                f"{key}.headers.{name}",
                f"{problem}; a header value is sent as one line of ASCII (the value is not shown)",
            )


def _check_body(body: tuple[tuple[str, object], ...], key: str, ctx: _Ctx) -> None:
    """extra_body may not set what tokrate sets itself (the values are JSON already:
    the Any hint only takes JSON types)."""
    for body_key, value in body:
        if body_key in _RESERVED_BODY_KEYS:
            raise ctx.error(f"{key}.extra_body.{body_key}", "reserved: tokrate sets it itself")
        why = unstreamable(body_key, value)
        if why is not None:
            raise ctx.error(f"{key}.extra_body.{body_key}", why)


def _models(raw: dict[str, object], endpoint_names: list[str], ctx: _Ctx) -> list[ModelSpec]:
    out: list[ModelSpec] = []
    for i, item in enumerate(_array(raw, "model", ctx)):
        key = f"model[{i}]"
        table = dict(item)  # type: ignore[call-overload]
        if "endpoint" not in table:
            if len(endpoint_names) == 1:
                table["endpoint"] = endpoint_names[0]
            elif not endpoint_names:
                table["endpoint"] = SIM_ENDPOINT
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
        if not endpoint_names and model.endpoint != SIM_ENDPOINT:
            raise ctx.error(
                f"{key}.endpoint",
                f"no [[endpoint]] named {model.endpoint!r} (none defined: models then "
                "name simulator tiers and use endpoint 'sim')",
            )
        _check_body(model.extra_body, key, ctx)
        _check_headers(model.headers, key, ctx)
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
        _check_prices(model, key, ctx)
        out.append(model)
    return out


def _check_prices(model: ModelSpec, key: str, ctx: _Ctx) -> None:
    """A hosted tier is priced by its input and its output tokens: one price without
    the other would rank it by half its bill (0 is a price: a free input says so)."""
    pin, pout = model.price_in_per_m, model.price_out_per_m
    if (pin is None) != (pout is None):
        missing, given = ("price_in_per_m", "price_out_per_m")[:: 1 if pin is None else -1]
        raise ctx.error(
            f"{key}.{missing}",
            f"required with {given} (a request's cost is its input and its output tokens; "
            "set 0 where one is free)",
        )
    if model.price_cached_in_per_m is not None and pin is None:
        raise ctx.error(
            f"{key}.price_cached_in_per_m",
            "needs price_in_per_m and price_out_per_m (the cached price only replaces the "
            "input price of cached tokens)",
        )


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
    _check_thresholds(spec, ctx)
    _check_client(spec, ctx)
    _check_load(spec, ctx)
    _check_names(spec, ctx)


def _check_thresholds(spec: RunSpec, ctx: _Ctx) -> None:
    from tokrate.spec.thresholds import ThresholdError, parse_threshold

    for i, text in enumerate(spec.compare.thresholds):
        try:
            parse_threshold(text)
        except ThresholdError as err:
            raise ctx.error(f"compare.thresholds[{i}]", f"{err.problem} (got {text!r})") from None


def _check_client(spec: RunSpec, ctx: _Ctx) -> None:
    """Run-wide knobs, and protocols the chosen client cannot speak."""
    _check_headers(spec.client.headers, "client", ctx)
    _check_body(spec.client.extra_body, "client", ctx)
    for body_key, value in spec.client.body_overrides:
        if body_key in _RESERVED_BODY_KEYS:
            raise ctx.error(f"client.body_overrides.{body_key}", "reserved: tokrate sets it itself")
        why = unstreamable(body_key, value)
        if why is not None:
            raise ctx.error(f"client.body_overrides.{body_key}", why)
    if spec.client.kind != "openai":
        return
    for i, ep in enumerate(spec.endpoints):
        if (ep.api or spec.client.api) == "anthropic":
            key = f"endpoint[{i}].api" if ep.api else "client.api"
            raise ctx.error(
                key,
                f"endpoint {ep.name!r} speaks 'anthropic', which the openai SDK client "
                "cannot send (use client 'fast' or 'httpx')",
            )
    if not spec.endpoints and spec.client.api == "anthropic":
        raise ctx.error(
            "client.api",
            "'anthropic' cannot be sent by the openai SDK client (use 'fast' or 'httpx')",
        )


def _check_load(spec: RunSpec, ctx: _Ctx) -> None:
    load = spec.load
    if load.capacity is not None:
        _check_capacity(spec, ctx)
    if load.mode == "open" and not load.rates and load.capacity is None:
        raise ctx.error("load.rates", "required (non-empty) when load.mode = 'open'")
    if load.mode == "closed" and load.rates:
        raise ctx.error("load.rates", "set, but load.mode is 'closed' (rates are open loop)")
    if load.mode == "closed" and not load.concurrency:
        raise ctx.error("load.concurrency", "required (non-empty) when load.mode = 'closed'")
    if load.ramp_up_s and load.mode == "closed" and load.capacity is None:
        raise ctx.error(
            "load.ramp_up_s",
            "open loop only (closed-loop streams start together; use load.warmup_requests)",
        )
    if load.requests is None and load.duration_s is None:
        raise ctx.error("load.requests", "set load.requests or load.duration_s (or both)")
    levels_by_key: tuple[tuple[str, tuple[float, ...]], ...] = (
        ("load.concurrency", tuple(load.concurrency)),
        ("load.rates", tuple(load.rates)),
    )
    for key, levels in levels_by_key:
        dup = [x for i, x in enumerate(levels) if x in levels[:i]]
        if dup:
            raise ctx.error(key, f"duplicate level {dup[0]:g}")


def _check_capacity(spec: RunSpec, ctx: _Ctx) -> None:
    cap = spec.load.capacity
    assert cap is not None
    if not spec.slo.latency_set:
        raise ctx.error("load.capacity", "a capacity search needs at least one [slo] limit")
    if cap.min_requests > cap.max_requests:
        raise ctx.error("load.capacity.min_requests", "must be <= load.capacity.max_requests")
    if cap.start > cap.max_level:
        raise ctx.error("load.capacity.start", "must be <= load.capacity.max_level")
    if (cap.mode or spec.load.mode) == "closed" and cap.start != int(cap.start):
        raise ctx.error("load.capacity.start", "closed loop: a whole number of streams")


def _check_names(spec: RunSpec, ctx: _Ctx) -> None:
    """Names that must be one of a known set: hardware, formats, error classes, sets."""
    from tokrate.hardware import get_hardware
    from tokrate.spec.types import ERROR_CLASSES

    for key, name in (
        ("output.hardware", spec.output.hardware),
        ("simulator.hardware", spec.simulator.hardware),
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
        from tokrate.spec.bundled import bundled_sets

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
        {
            **_to_jsonable(ep),  # type: ignore[dict-item]
            "headers": _redact_pairs(ep.headers),
            "extra_body": _to_jsonable(_redact_pairs(ep.extra_body)),
        }
        for ep in spec.endpoints
    ]
    out["models"] = [
        {
            **_to_jsonable(m),  # type: ignore[dict-item]
            "extra_body": _to_jsonable(_redact_pairs(m.extra_body)),
            "headers": _redact_pairs(m.headers),
        }
        for m in spec.models
    ]
    out["client"]["extra_body"] = _to_jsonable(_redact_pairs(spec.client.extra_body))
    out["client"]["headers"] = _redact_pairs(spec.client.headers)
    out["client"]["body_overrides"] = _to_jsonable(_redact_pairs(spec.client.body_overrides))
    out["distributed"]["resources"] = dict(spec.distributed.resources)
    out["uses_simulator"] = spec.uses_simulator
    return out
