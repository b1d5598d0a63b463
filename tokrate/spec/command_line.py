"""What ``tokrate run``'s command line adds to a config, and the rules that attach it.

Most flags are plain dotted overrides (``--requests 8`` is ``load.requests = 8``); the
CLI translates those. The flags here are more than a value: they name targets or
switch a mode, and where they land depends on what the config file already says, which
only :func:`tokrate.spec.config_file.load_spec` knows while it reads the file. So the CLI hands them
over as one :class:`RunFlags` and ``load_spec`` applies them in the same single pass:

- no config file and no ``--base-url``: the embedded simulator with
  :data:`EMBEDDED_DEFAULTS` under every flag (an open-loop run, ``--rate``, drops the
  default concurrency sweep);
- ``--base-url URL -m NAME...``: one endpoint named by the URL's host (and port:
  :func:`endpoint_name`; its
  ``--api-key-env``, ``--model-check`` and ``--metrics-url``) serving the ``-m``
  models; it replaces the config's endpoints and models, except that a ``-m`` name
  the config defines keeps its ``[[model]]`` table (prices, sizes, extra_body, ...)
  on this endpoint, so one config prices a provider and its stand-in alike;
- ``-m`` on a config (or on the simulator): a name the config defines keeps its whole
  ``[[model]]`` table (extra_body, headers, ignore_eos, prices, ... on every endpoint
  that has it); a new name goes to the first endpoint (or the simulator) with defaults;
- ``--api-key-env`` / ``--model-check`` on a config: set on every configured endpoint;
- ``--capacity``: the config's ``[load] capacity`` table when it has one, else the
  defaults.

Values set here are attributed to the command line in error messages; everything else
keeps naming the file.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final
from urllib.parse import urlsplit

from tokrate.errors import ConfigError, UsageError
from tokrate.spec.types import EndpointSpec, ModelCheck, ModelSpec

__all__ = ["EMBEDDED_DEFAULTS", "SIM_ENDPOINT", "RunFlags", "endpoint_name"]

#: The endpoint name of the embedded simulator: ``[[model]] endpoint = "sim"`` with no
#: ``[[endpoint]]`` configured names one of its tiers.
SIM_ENDPOINT: Final = "sim"

#: What ``tokrate run`` with no config and no endpoint uses (each a load_spec dotted
#: override; any flag the user gives wins). Six tiers in parallel on an honest
#: real-time simulator: a sweep of 1 and 8 streams per tier, 30 requests per target and
#: level (what a stable p95 needs, so the demo triggers none of the small-sample
#: warnings), 16 output tokens each (15 decode gaps: TPOT is exact on the simulator),
#: so the slowest tier (the largest model) bounds the run well under 60 s; and demo
#: SLOs (TTFT <= 0.5 s, TPOT <= 30 ms: at least ~33 tok/s per stream), so the tier pick
#: table shows a real decision: the large tiers miss them, the small ones meet them.
EMBEDDED_DEFAULTS: Final[Mapping[str, object]] = {
    "load.concurrency": (1, 8),
    "load.requests": 30,
    "load.targets": "parallel",
    "prompts.max_tokens": 16,
    "slo.ttft_s": 0.5,
    "slo.tpot_s": 0.03,
}

#: The name of the ``--base-url`` endpoint when its URL has no host to name it by.
_FLAG_ENDPOINT: Final = "endpoint"


def endpoint_name(base_url: str) -> str:
    """The name of the one endpoint ``--base-url`` defines: the URL's host, with its
    port when it has one (``api.openai.com``, ``127.0.0.1:8080``), so titles and
    target labels say which server was measured ("endpoint endpoint" said nothing)."""
    try:
        parts = urlsplit(base_url)
        host, port = parts.hostname, parts.port
    except ValueError:
        return _FLAG_ENDPOINT
    if not host:
        return _FLAG_ENDPOINT
    if ":" in host:  # an IPv6 literal
        host = f"[{host}]"
    return f"{host}:{port}" if port is not None else host


@dataclass(frozen=True, slots=True)
class RunFlags:
    """The target and mode flags of ``tokrate run`` (module doc): ``base_url``,
    ``metrics_url``, the ``-m`` names, ``api_key_env``, ``model_check`` and
    ``capacity``. The default adds nothing."""

    base_url: str | None = None
    metrics_url: str | None = None
    models: tuple[str, ...] = ()
    api_key_env: str | None = None
    model_check: ModelCheck | None = None
    capacity: bool = False

    def check(self) -> None:
        """Refuse flags that need another flag. Raises UsageError."""
        if self.metrics_url and not self.base_url:
            raise UsageError(
                "tokrate run: --metrics-url needs --base-url (else: metrics_url in [[endpoint]])"
            )
        if self.base_url and not self.models:
            raise UsageError("tokrate run: --base-url needs at least one -m/--model")

    def overrides(self, has_config: bool, overrides: Mapping[str, object]) -> dict[str, object]:
        """``overrides`` with what these flags decide before the file is read: the
        embedded defaults under them, or the ``--base-url`` endpoint and models."""
        out = dict(overrides)
        if not has_config and self.base_url is None:
            defaults = dict(EMBEDDED_DEFAULTS)
            if out.get("load.mode") == "open":  # an open-loop run has no concurrency sweep
                defaults.pop("load.concurrency")
            out = {**defaults, **out}
        if self.base_url:
            name = endpoint_name(self.base_url)
            out["endpoints"] = [
                EndpointSpec(
                    name=name,
                    base_url=self.base_url,
                    api_key_env=self.api_key_env,
                    model_check=self.model_check or "auto",
                    metrics_url=self.metrics_url,
                )
            ]
            if not has_config:
                out["models"] = [ModelSpec(endpoint=name, name=m) for m in self.models]
            # With a config, attach() keeps its [[model]] tables of these names.
        return out

    def attach(self, raw: dict[str, object]) -> set[str]:
        """Lay ``--api-key-env``, ``--model-check`` and ``--capacity`` onto the read
        config ``raw`` (overrides applied) in place; returns the keys set, which error
        messages attribute to the command line."""
        keys: set[str] = set()
        if self.base_url:
            raw["model"] = self._models_on_url(raw.get("model"))
            keys.add("model")
        if not self.base_url and (self.api_key_env or self.model_check):
            tables = raw.get("endpoint", [])
            if isinstance(tables, dict):  # a single [endpoint] table reads as one element
                tables = [tables]
            for table in tables if isinstance(tables, list) else ():
                if not isinstance(table, dict):
                    continue  # not a table: the config check names it
                if self.api_key_env:
                    table["api_key_env"] = self.api_key_env
                    keys.add("endpoint.api_key_env")
                if self.model_check:
                    table["model_check"] = self.model_check
                    keys.add("endpoint.model_check")
        if self.capacity:
            load = raw.setdefault("load", {})
            if isinstance(load, dict) and load.get("capacity") is None:
                load["capacity"] = {}
                keys.add("load.capacity")
        return keys

    def _models_on_url(self, configured: object) -> list[object]:
        """The ``-m`` models on the ``--base-url`` endpoint: a name the config's
        ``[[model]]`` tables define keeps its table (its first, moved to this endpoint),
        any other gets defaults."""
        assert self.base_url is not None
        endpoint = endpoint_name(self.base_url)
        tables = configured if isinstance(configured, list) else [configured]
        out: list[object] = []
        for name in self.models:
            table = next((t for t in tables if isinstance(t, dict) and t.get("name") == name), None)
            out.append({**(table or {}), "name": name, "endpoint": endpoint})
        return out

    def choose_models(
        self, configured: Sequence[ModelSpec], endpoints: Sequence[EndpointSpec]
    ) -> tuple[ModelSpec, ...]:
        """The ``-m`` models on top of a config (module doc); the configured models
        when there is no ``-m`` or ``--base-url`` already set them. Raises
        ConfigError for a model named twice."""
        if not self.models or self.base_url:
            return tuple(configured)
        owner = endpoints[0].name if endpoints else SIM_ENDPOINT
        out: list[ModelSpec] = []
        for name in self.models:
            chosen = [m for m in configured if m.name == name]
            for model in chosen or [ModelSpec(endpoint=owner, name=name)]:
                if any((m.endpoint, m.name) == (model.endpoint, model.name) for m in out):
                    raise ConfigError(
                        f"command line: key 'model[{len(out)}].name':"
                        f" duplicate model {model.name!r} on {model.endpoint!r}"
                    )
                out.append(model)
        return tuple(out)
