"""Targets: the endpoint x model pairs a run measures, resolved from the spec.

A :class:`Target` is frozen and picklable (workers receive it). Targets are ordered by
endpoint (config order), then model size (active parameters, else total; unknown
last), then name: how a reader scans a size comparison, in progress, run.json,
summaries and the report alike. Model sizes missing from the config were already
inferred from the names here (:func:`tokrate.inputs.sizes.fill_sizes`, the one place), for a
spec from a file and one built in Python alike.
"""

from __future__ import annotations

import base64
import dataclasses
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from tokrate.errors import ConfigError
from tokrate.inputs.sizes import fill_sizes
from tokrate.redact import Redactor, is_secret_name, split_url_credentials
from tokrate.runfolder.run_info import TargetInfo
from tokrate.runfolder.served_model import ServedModel
from tokrate.spec.command_line import SIM_ENDPOINT
from tokrate.spec.header_values import header_value_problem
from tokrate.spec.types import EndpointSpec, ModelSpec, RunSpec

__all__ = [
    "SizedTier",
    "Target",
    "api_keys",
    "resolve_targets",
    "run_redactor",
    "sort_targets",
]


class SizedTier(Protocol):
    """What target resolution reads from a simulator tier (``tokrate.sim.model.Tier`` fits)."""

    @property
    def name(self) -> str: ...
    @property
    def params_b(self) -> float: ...
    @property
    def active_params_b(self) -> float: ...
    @property
    def bytes_per_param(self) -> float: ...
    @property
    def gpus(self) -> int: ...


@dataclass(frozen=True, slots=True)
class Target:
    """One endpoint x model, resolved: ``endpoint.base_url`` is the real URL (for the
    embedded simulator, the one it bound). ``simulated`` marks simulator targets."""

    endpoint: EndpointSpec
    model: ModelSpec
    simulated: bool = False
    #: Where the model's params_b / bytes_per_param came from: "config", "name",
    #: "server" (:mod:`tokrate.inputs.served_sizes`), "simulator"; None: unknown.
    size_source: str | None = None
    bytes_source: str | None = None
    #: What the server said about the model in the pre-flight (None: nothing).
    served: ServedModel | None = None

    @property
    def base_url(self) -> str:
        return self.endpoint.base_url

    @property
    def tokrate_simulator(self) -> bool:
        """Served by a tokrate simulator: the embedded one, or one running on its own
        (``tokrate sim``) that the pre-flight recognised; such a server is told the
        right answer of a checked prompt, a real one never is."""
        return self.simulated or (self.served is not None and self.served.simulator)

    @property
    def label(self) -> str:
        """``endpoint/model``, the name progress and warnings use."""
        return f"{self.endpoint.name}/{self.model.name}"

    @property
    def size_b(self) -> float | None:
        m = self.model
        return m.active_params_b if m.active_params_b is not None else m.params_b

    def prompt_cache_mode(self, api: str, unique_prompts: bool = True) -> str:
        """How this target's requests treat a prompt cache, as run.json's
        ``prompt_cache`` says it: ``unique-prefix`` (``[client] unique_prompts``, the
        default: a random tag before each prompt's own part, so only a declared shared
        prefix can hit) or ``as-written``, then ``+cache_control`` (Anthropic
        breakpoints) and ``+prompt_cache_key`` where the model sends them in ``api``."""
        parts = ["unique-prefix" if unique_prompts else "as-written"]
        if self.model.cache_control and api == "anthropic":
            parts.append("cache_control")
        if self.model.prompt_cache_key is not None and api in ("chat", "responses"):
            parts.append("prompt_cache_key")
        return "+".join(parts)

    def info(self, default_api: str = "chat", unique_prompts: bool = True) -> TargetInfo:
        """run.json's description of this target (``default_api``: ``[client] api``,
        which an endpoint's own ``api`` overrides; ``unique_prompts``: ``[client]
        unique_prompts``)."""
        m = self.model
        api = self.endpoint.api or default_api
        return TargetInfo(
            endpoint=self.endpoint.name,
            model=m.name,
            base_url=self.base_url,
            params_b=m.params_b,
            active_params_b=self.size_b,
            bytes_per_param=m.bytes_per_param,
            price_in_per_m=m.price_in_per_m,
            price_cached_in_per_m=m.price_cached_in_per_m,
            price_out_per_m=m.price_out_per_m,
            gpu_hourly_usd=m.gpu_hourly_usd,
            gpus=m.gpus,
            simulated=self.simulated,
            family=m.family,
            api=api,
            size_source=self.size_source,
            bytes_source=self.bytes_source,
            served=self.served,
            prompt_cache=self.prompt_cache_mode(api, unique_prompts),
        )


def sort_targets(targets: Sequence[Target], endpoint_order: Sequence[str]) -> tuple[Target, ...]:
    """``targets`` in the order of the module doc: endpoint (``endpoint_order``), then
    size (active, else total; unknown last), then name."""
    rank = {name: i for i, name in enumerate(endpoint_order)}

    def key(t: Target) -> tuple[int, float, str]:
        size = t.size_b
        return (rank.get(t.endpoint.name, len(rank)), size if size else float("inf"), t.model.name)

    return tuple(sorted(targets, key=key))


def resolve_targets(
    spec: RunSpec, simulator: tuple[str, Sequence[SizedTier]] | None = None
) -> tuple[Target, ...]:
    """The targets of a run, ordered (see the module doc).

    With ``simulator`` = (base URL, tiers) the embedded simulator's tiers: every tier,
    or the ``-m`` models among them. Otherwise the configured endpoints x models.

    Raises: ConfigError when endpoints are configured but no model, a model names an
    unknown endpoint, or a simulator model is not one of its tiers.
    """
    where = spec.source or "config"
    if simulator is not None and not spec.endpoints:
        url, tier_list = simulator
        endpoint = _sim_endpoint(EndpointSpec(name=SIM_ENDPOINT), url, metrics=True)
        # A configured simulator model keeps its knobs (extra_body, headers, ...).
        configured = {m.name: m for m in spec.models}
        models = [
            configured.get(name) or ModelSpec(endpoint=SIM_ENDPOINT, name=name)
            for name in list(configured) or [t.name for t in tier_list]
        ]
        return sort_targets(
            [_sim_target(endpoint, m, tier_list, where) for m in models], [SIM_ENDPOINT]
        )
    by_name = {e.name: _without_url_credentials(e) for e in spec.endpoints}
    if simulator is not None:
        # [[endpoint]]s with simulator = true: the embedded simulator's URL, its
        # /metrics scraped once (on the first of them: one server).
        first = next(e.name for e in spec.endpoints if e.simulator)
        for name, e in by_name.items():
            if e.simulator:
                by_name[name] = _sim_endpoint(e, simulator[0], metrics=name == first)
    if not spec.models:
        raise ConfigError(f"{where}: no [[model]] configured (give -m/--model)")
    targets = []
    for m in spec.models:
        found = by_name.get(m.endpoint)
        if found is None:
            raise ConfigError(f"{where}: model {m.name!r} names unknown endpoint {m.endpoint!r}")
        if found.simulator and simulator is not None:
            targets.append(_sim_target(found, m, simulator[1], where))
            continue
        params, active, bpp = fill_sizes(m.name, m.params_b, m.active_params_b, m.bytes_per_param)
        sized = dataclasses.replace(m, params_b=params, active_params_b=active, bytes_per_param=bpp)
        targets.append(
            Target(
                endpoint=found,
                model=sized,
                size_source=_source(m.params_b, params),
                bytes_source=_source(m.bytes_per_param, bpp),
            )
        )
    return sort_targets(targets, [e.name for e in spec.endpoints])


def _sim_endpoint(endpoint: EndpointSpec, url: str, *, metrics: bool) -> EndpointSpec:
    """``endpoint`` pointed at the embedded simulator bound at ``url``. It serves
    /metrics beside /v1, scraped at the default 1 s (every scrape is a request the
    measured loops see; at 0.25 s the 1B tier's decode speed moved): the report shows
    its queue."""
    root = url.removesuffix("/").removesuffix("/v1")
    return dataclasses.replace(
        endpoint,
        base_url=url,
        metrics_url=root + "/metrics" if metrics else None,
    )


def _sim_target(
    endpoint: EndpointSpec, model: ModelSpec, tier_list: Sequence[SizedTier], where: str
) -> Target:
    """A simulator tier as a target: its sizes from the tier, the model's knobs kept.

    Raises: ConfigError when the model is not one of the simulator's tiers.
    """
    tiers = {tier.name: tier for tier in tier_list}
    tier = tiers.get(model.name)
    if tier is None:
        raise ConfigError(
            f"{where}: model {model.name!r} is not a simulator tier (tiers: {', '.join(tiers)})"
        )
    sized = dataclasses.replace(
        model,
        endpoint=endpoint.name,
        params_b=tier.params_b,
        active_params_b=tier.active_params_b,
        bytes_per_param=tier.bytes_per_param,
        gpus=tier.gpus,
    )
    return Target(
        endpoint=endpoint,
        model=sized,
        simulated=True,
        size_source="simulator",
        bytes_source="simulator",
    )


def _source(given: float | None, resolved: float | None) -> str | None:
    """ "config" for a value the user gave, "name" for one inferred, None: unknown."""
    if given is not None:
        return "config"
    return "name" if resolved is not None else None


def api_keys(spec: RunSpec, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """Endpoint name -> key, read from each endpoint's env var (never stored elsewhere).

    Raises: ConfigError when a named env var is unset or empty, or holds what cannot
    be sent in an HTTP header (a line break, a character that is not ASCII: one line
    naming the variable and the position, never the value).
    """
    env = os.environ if environ is None else environ
    keys = {}
    for e in spec.endpoints:
        if e.api_key_env:
            value = env.get(e.api_key_env)
            where = f"{spec.source or 'config'}: endpoint {e.name!r}: environment variable"
            if not value:
                raise ConfigError(f"{where} {e.api_key_env} (api_key_env) is not set")
            problem = header_value_problem(value)
            if problem is not None:
                trailing = " (a trailing newline?)" if value[-1:] in "\r\n" else ""
                raise ConfigError(
                    f"{where} {e.api_key_env} (api_key_env): {problem}{trailing}; an API key"
                    " is sent in an HTTP header, one line of ASCII (the value is not shown)"
                )
            keys[e.name] = value
    return keys


def _without_url_credentials(endpoint: EndpointSpec) -> EndpointSpec:
    """The endpoint with any ``user:password@`` taken out of its URL, so no client (nor
    the readiness check) sends it as Basic auth in place of the Bearer key. Without an
    API key the credentials become an explicit Basic ``Authorization`` header."""
    url, user, password = split_url_credentials(endpoint.base_url)
    if url == endpoint.base_url:
        return endpoint
    headers = endpoint.headers
    named = {k.lower() for k, _ in headers}
    if endpoint.api_key_env is None and "authorization" not in named:
        token = base64.b64encode(f"{user or ''}:{password or ''}".encode()).decode("ascii")
        headers = (*headers, ("Authorization", f"Basic {token}"))
    return dataclasses.replace(endpoint, base_url=url, headers=headers)


def run_redactor(spec: RunSpec, keys: Mapping[str, str]) -> Redactor:
    """The redactor of one run: it knows every secret the run holds — the API keys
    read from the environment, the values of secret-named headers and the passwords
    in base URLs — and replaces them wherever they would be written."""
    secrets: list[str | None] = list(keys.values())
    header_sets = [spec.client.headers, *(e.headers for e in spec.endpoints)]
    header_sets += [m.headers for m in spec.models]
    for headers in header_sets:
        secrets += [v for k, v in headers if is_secret_name(k)]
    body_sets = [spec.client.extra_body, *(e.extra_body for e in spec.endpoints)]
    body_sets += [m.extra_body for m in spec.models]
    for body in body_sets:
        secrets += [v for k, v in body if is_secret_name(k) and isinstance(v, str)]
    for e in spec.endpoints:
        _url, _user, password = split_url_credentials(e.base_url)
        secrets.append(password)
    return Redactor().with_secrets(secrets)
