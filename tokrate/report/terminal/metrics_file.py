"""A run's headline figures as a Prometheus text file (``tokrate run --metrics-file PATH``),
for node_exporter's textfile collector and so Grafana.

The Prometheus text exposition format (version 0.0.4, which the textfile collector
reads; every line is valid OpenMetrics too, apart from OpenMetrics' closing ``# EOF``,
which the collector refuses): ``# HELP`` and ``# TYPE`` once per family, all gauges, one
sample per target and level labelled ``endpoint``, ``model``, ``scenario`` (and
``quantile`` for the percentiles), plus ``run_id`` and ``benchmark`` (the fingerprint,
so a dashboard keeps nightly series apart) on every sample. Units in the names, base
units: seconds, tokens per second, ratios 0..1, USD. A figure the run does not have
(no checked answers, no SLO, no price) is left out, never written as 0.

Families, per target and level (:class:`tokrate.runfolder.summary.Group`):
``tokrate_ttft_seconds`` and ``tokrate_tpot_seconds`` (quantile 0.5, 0.9, 0.95, 0.99),
``tokrate_output_tokens_per_second`` (aggregate over the window),
``tokrate_requests_per_second``, ``tokrate_error_ratio`` (errors / (ok + errors)),
``tokrate_pass_ratio`` (checked answers that passed), ``tokrate_slo_met_ratio``,
``tokrate_cost_usd_per_million_output_tokens``; and ``tokrate_run_timestamp_seconds``
(when the run started, Unix time). Pure: returns the text.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Final

from tokrate.runfolder.run_info import RunInfo
from tokrate.runfolder.summary import Group, Summary

__all__ = ["metrics_text"]

_QUANTILES: Final = (("0.5", "p50"), ("0.9", "p90"), ("0.95", "p95"), ("0.99", "p99"))


def _escape(value: str) -> str:
    """A label value as the format needs it: backslash, double quote and newline escaped."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _labels(pairs: Mapping[str, str]) -> str:
    return "{" + ",".join(f'{k}="{_escape(v)}"' for k, v in pairs.items()) + "}"


def _number(value: float) -> str:
    return repr(float(value))


def _error_ratio(g: Group) -> float | None:
    judged = g.counts.ok + g.counts.error
    return g.counts.error / judged if judged else None


def _pass_ratio(g: Group) -> float | None:
    return None if g.quality is None else g.quality.rate


def _cost(g: Group) -> float | None:
    return None if g.cost is None else g.cost.usd_per_m_output


#: (name, help, value per group) of the families with one sample per group.
_SINGLE: Final[tuple[tuple[str, str, Callable[[Group], float | None]], ...]] = (
    (
        "tokrate_output_tokens_per_second",
        "Output tokens per second over the measured window, all streams together.",
        lambda g: g.aggregate_output_tps,
    ),
    (
        "tokrate_requests_per_second",
        "Requests completed per second over the measured window.",
        lambda g: g.requests_per_s,
    ),
    ("tokrate_error_ratio", "Failed requests / (ok + failed).", _error_ratio),
    ("tokrate_pass_ratio", "Checked answers that passed their check.", _pass_ratio),
    ("tokrate_slo_met_ratio", "Requests that met every [slo] bound.", lambda g: g.slo_met_fraction),
    (
        "tokrate_cost_usd_per_million_output_tokens",
        "USD per million output tokens (list price or GPU-hour price).",
        _cost,
    ),
)


def _family(name: str, help_text: str, samples: list[str]) -> Iterator[str]:
    if not samples:
        return
    yield f"# HELP {name} {help_text}"
    yield f"# TYPE {name} gauge"
    yield from samples


def metrics_text(summary: Summary, info: RunInfo) -> str:
    """The metrics file of a run (module doc), ending with a newline."""
    common = {"run_id": info.run_id, "benchmark": info.fingerprint}
    lines: list[str] = []
    started = info.started_datetime
    if started is not None:
        lines += _family(
            "tokrate_run_timestamp_seconds",
            "When the run started (Unix time).",
            [f"tokrate_run_timestamp_seconds{_labels(common)} {_number(started.timestamp())}"],
        )

    def group_labels(g: Group, **extra: str) -> str:
        keys = {"endpoint": g.endpoint, "model": g.model, "scenario": g.scenario}
        return _labels({**keys, **extra, **common})

    for name, what, dist in (
        ("tokrate_ttft_seconds", "Time to first token, percentile of ok requests.", "ttft_s"),
        ("tokrate_tpot_seconds", "Time per output token, percentile of ok requests.", "tpot_s"),
    ):
        samples = [
            f"{name}{group_labels(g, quantile=q)} {_number(v)}"
            for g in summary.groups
            for q, stat in _QUANTILES
            if (v := g.distribution(dist).stat(stat)) is not None
        ]
        lines += _family(name, what, samples)
    for name, what, value in _SINGLE:
        samples = [
            f"{name}{group_labels(g)} {_number(v)}"
            for g in summary.groups
            if (v := value(g)) is not None
        ]
        lines += _family(name, what, samples)
    return "\n".join(lines) + "\n"
