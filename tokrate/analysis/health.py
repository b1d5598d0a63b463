"""Run health in a verdict: whether the client measured a scenario while overloaded, and
whether a change is small enough that the overload could have made it.

A scenario of a run is *overloaded* when

- its measuring event loop lagged past the documented threshold
  (run.json ``loop_lag.scenarios[].exceeded``, :mod:`tokrate.load.worker.looplag`; runs older
  than that field: the run-wide ``loop_lag.exceeded``). Every stamp and every send of
  that scenario may then be late by about the lag p99, and on a shared machine a
  server on the same machine (the simulator) is held up about as much; or
- (open loop) the p95 of its sends' ``send_delay_s`` passed
  :data:`SEND_DELAY_LIMIT_S`: the server saw less load than was asked for.

A lateness of a few milliseconds cannot fake a doubled TTFT of 400 ms, so the run
health does not veto every verdict of a busy night: a change past its threshold is
``inconclusive (client overloaded ...)`` only when its absolute size is within
:data:`OVERLOAD_FACTOR` x the lateness (the client's own, and as much again for a
server sharing its machine). For per-token metrics the lateness is spread over the
answer's decode gaps (TPOT = (E2E - TTFT) / (tokens - 1)), so it is divided by the
group's median output tokens - 1. Error rates are not gated.

A run is *unfit to be a baseline* (:func:`unfit_baseline`) when its measuring loop
lagged far past the threshold in some scenario: a p99 lag above
:data:`BASELINE_LAG_FACTOR` x the run's recorded threshold (run.json
``loop_lag.threshold_ms``, 5 ms: so above 20 ms). Such a night may pass its own
check (a change within the lateness is inconclusive, not regressed), but its values
carry the stall (seen: a p95 TTFT of 275 ms at a lag p99 of 44 ms, against 152-186 ms
on nights at 5-20 ms), and every night judged against it would look that much
faster: ``latest-good`` does not move to it (tokrate.finish.baseline).

Pure functions over RunInfo and a group's records; no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

import polars as pl

from tokrate.runfolder.run_info import RunInfo

__all__ = [
    "BASELINE_LAG_FACTOR",
    "OVERLOAD_FACTOR",
    "OVERLOAD_PREFIX",
    "SEND_DELAY_LIMIT_S",
    "Overload",
    "overload_reason",
    "scenario_overload",
    "unfit_baseline",
    "unhealthy_scenario",
]

#: How many times the client's lateness a change must exceed to be judged on a
#: scenario measured while overloaded: the client's own lateness plus as much again
#: for a server on the same machine.
OVERLOAD_FACTOR: Final = 2.0
#: How the reason of a row found inconclusive for the client's overload begins (the
#: noise fit leaves such values out: tokrate.analysis.noise).
OVERLOAD_PREFIX: Final = "client overloaded"
#: Open loop: a p95 send delay above this means the load the server saw was not the
#: load asked for (the capacity search's rule, tokrate.load.capacity_probe).
SEND_DELAY_LIMIT_S: Final = 0.010
#: How many times the loop-lag threshold a scenario's p99 lag must pass for its run to
#: be unfit as a baseline (module doc). A busy shared machine keeps the client a few
#: ms late on every night alike (p99 5-20 ms on two cores with two busy processes),
#: which a comparison between two such nights cancels; a stall far past that is one
#: night's accident and must not become the reference of the nights after it.
BASELINE_LAG_FACTOR: Final = 4.0
#: The loop-lag threshold of runs whose run.json does not record it (ms;
#: tokrate.load.worker.looplag.P99_THRESHOLD_MS).
_DEFAULT_LAG_THRESHOLD_MS: Final = 5.0


@dataclass(frozen=True, slots=True)
class Overload:
    """One run's overload in one scenario: ``lateness_s`` (how late its stamps and sends
    may be) and ``why`` in words ("event-loop lag p99 12.3 ms")."""

    lateness_s: float
    why: str


def scenario_overload(info: RunInfo, scenario: str, group: pl.DataFrame) -> Overload | None:
    """The overload of ``info``'s run while it measured ``scenario`` (``group``: that
    scenario's analysed records of one target), or None when its client was healthy."""
    found: list[tuple[float, str]] = []
    lag = info.loop_lag
    if lag is not None:
        per = lag.scenario(scenario)
        if per is not None and per.exceeded:
            found.append((per.p99_ms / 1e3, f"event-loop lag p99 {per.p99_ms:.1f} ms"))
        elif per is None and not lag.scenarios and lag.exceeded and lag.p99_ms is not None:
            found.append((lag.p99_ms / 1e3, f"event-loop lag p99 {lag.p99_ms:.1f} ms"))
    if "send_delay_s" in group.columns:
        delays = group["send_delay_s"].drop_nulls()
        if delays.len():
            p95 = float(delays.quantile(0.95, "linear") or 0.0)
            if p95 > SEND_DELAY_LIMIT_S:
                found.append((p95, f"sends late by {p95 * 1e3:.1f} ms (p95)"))
    if not found:
        return None
    return Overload(max(s for s, _ in found), ", ".join(w for _, w in found))


def overload_reason(
    metric: str,
    baseline: float,
    current: float,
    overloads: tuple[Overload | None, Overload | None],
    decode_gaps: float | None,
) -> str | None:
    """Why a change past its threshold is inconclusive, or None when it stands.

    ``baseline``/``current`` are the metric's values (s, or tok/s for decode_tps);
    ``overloads`` the baseline's and the current run's (None: healthy);
    ``decode_gaps`` the group's median output tokens - 1 (per-token metrics)."""
    if metric == "error_rate" or not any(overloads):
        return None
    lateness = max(o.lateness_s for o in overloads if o is not None)
    series = metric.rsplit("_", 1)[0]
    if series in ("tpot", "decode_tps"):
        gaps = max(decode_gaps or 1.0, 1.0)
        if series == "decode_tps":
            if baseline <= 0 or current <= 0:
                return None
            baseline, current = 1.0 / baseline, 1.0 / current
        change_s, bound_s = abs(current - baseline), OVERLOAD_FACTOR * lateness / gaps
    else:
        change_s, bound_s = abs(current - baseline), OVERLOAD_FACTOR * lateness
    if change_s > bound_s:
        return None
    sides = [
        f"{side} run: {o.why}"
        for side, o in zip(("baseline", "current"), overloads, strict=True)
        if o is not None
    ]
    unit = "per token" if series in ("tpot", "decode_tps") else ""
    return (
        f"{OVERLOAD_PREFIX} ({'; '.join(sides)}): the change, {change_s * 1e3:.2f} ms"
        f"{' ' + unit if unit else ''}, is within {OVERLOAD_FACTOR:g}x that lateness"
    )


def _far_past(info: RunInfo, scenario: str | None) -> tuple[float, str, float] | None:
    """The worst p99 lag far past the threshold (p99 ms, where, the threshold ms) in
    ``scenario`` (None: any scenario), or None. A run older than per-scenario lags is
    judged by its run-wide p99."""
    lag = info.loop_lag
    if lag is None:
        return None
    threshold = lag.threshold_ms or _DEFAULT_LAG_THRESHOLD_MS
    worst = [
        (s.p99_ms, f"scenario {s.scenario}")
        for s in lag.scenarios
        if scenario is None or s.scenario == scenario
    ]
    if not lag.scenarios and lag.p99_ms is not None:
        worst = [(lag.p99_ms, "the run")]
    past = [(p99, where) for p99, where in worst if p99 > BASELINE_LAG_FACTOR * threshold]
    if not past:
        return None
    p99, where = max(past)
    return p99, where, threshold


def _lag_words(found: tuple[float, str, float]) -> str:
    p99, where, threshold = found
    return (
        f"its client's event loop lagged far past the threshold (p99 {p99:.1f} ms in"
        f" {where}, above {BASELINE_LAG_FACTOR:g}x {threshold:g} ms)"
    )


def unfit_baseline(info: RunInfo) -> str | None:
    """Why ``info``'s run must not become a baseline (module doc), or None when it may."""
    found = _far_past(info, None)
    return None if found is None else _lag_words(found)


def unhealthy_scenario(info: RunInfo, scenario: str) -> str | None:
    """Why ``info``'s run measured ``scenario`` with an unhealthy client, or None: its
    event loop lagged far past the threshold there (as :func:`unfit_baseline`, for one
    scenario). Such a night's values of that scenario carry the client's stall, so they
    feed neither the noise fit nor a nightly reference (tokrate.analysis.noise,
    tokrate.analysis.reference)."""
    found = _far_past(info, scenario)
    return None if found is None else _lag_words(found)
