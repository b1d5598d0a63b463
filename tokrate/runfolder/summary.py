"""summary.json as frozen types: :class:`Summary` of :class:`Group` s.

:func:`tokrate.analysis.metrics.summarize` builds a Summary from records; the store writes it
with :meth:`Summary.to_dict` and :func:`tokrate.runfolder.loaded_run.load_run` reads it back with
:meth:`Summary.from_dict`. Every reader (terminal table, report, history) uses these
attributes, never a re-probed dict.

Units: seconds for ``*_s`` distributions, tokens/s for ``decode_tps`` and
``aggregate_output_tps``, requests/s for ``requests_per_s``/``goodput_rps``, USD for
cost. Unknown is None, never 0 (an empty distribution has ``n == 0`` and None
statistics).

summary.json schema history (bump SUMMARY_SCHEMA_VERSION and add a line per change;
readers keep loading every version listed):

    1: first version.
    2: groups carry ``stream`` (buffered-stream verdict: :class:`StreamShape`) and
       ``server`` (server-reported timings: :class:`ServerTimings`, null without
       them); ``tpot_s``, ``itl_s`` and ``decode_tps`` leave buffered requests out
       (in version 1 they counted every ok request). Version-1 files load with
       ``stream`` and ``server`` None. Also new in 2: a top-level ``capacity`` (a
       capacity search's result, as capacity.json; absent after a sweep).
    3: groups and their ``by_task`` entries carry ``quality`` (checked answers: n,
       passed, rate, rate_ci, mean_score, check_errors; :class:`Quality`), null when
       nothing was checked. Older files load with quality None.
    4: groups carry ``cache`` (what the server said about its prompt cache:
       :class:`CacheUse`, null when no request reported cached tokens). Older
       files load with ``cache`` None.
    5: ``server`` gains ``sources`` (the response keys the timings came under:
       timings / metrics / stats), ``queue_s``, ``ttft_s``, ``decode_s``,
       ``ttft_minus_server_s``, ``decode_minus_server_s`` (client minus server, per
       request) and ``spec_acceptance_p50``. Older files load with them empty.
    6: a top-level ``server_counters``: per endpoint and model, what the server's own
       ``/metrics`` counters say over the run (prompt-cache query and hit tokens and
       their rate, speculative draft and accepted tokens: :class:`ServerCounters`);
       absent without a scraped counter. Older files load with none.
    7: ``stream`` carries ``client_held`` (buffered requests whose first read came
       while the client's own event loop lagged: the client held them, not a proxy;
       tokrate.analysis.buffering) and ``client_held_lag_max_ms`` (the worst such lag).
       Older files load with 0 and None.
    8: ``counts.not_sent``: requests the client never sent (error class ``not_sent``),
       its own failures, no longer in ``counts.error`` (the server's). Older files load
       with 0 (the class did not exist).
    9: ``stream.short_hold``: buffered requests (not client-held) whose first read came
       within 50 ms of the send, so held for less than that: too short to blame a proxy
       or the server (tokrate.analysis.buffering). Older files load with 0.
    10: every distribution carries ``p90_es``, ``p95_es`` and ``p99_es``: MLPerf
       LoadGen's early-stopping estimates of those percentiles at 99% confidence
       (tokrate.analysis.early_stopping), null below the samples each needs (64, 130,
       662). Older files load with them null.
    11: groups carry ``send_queue_s`` (the client's own queueing: t0 minus the moment
       each request was due) and ``ttft_from_due_s`` (send_queue_s + ttft_s, the TTFT a
       user due an answer then sees), closed and open loop. Older files load with them
       empty (n 0).
    12: ``cost`` (groups and, new, ``by_task`` entries) is what the requests cost on
       their own token mix: ``usd_per_1k_requests`` with its sd and Student-t interval,
       ``n``, the token means, ``source``; ``usd_per_m_output`` stays. Groups and tasks
       carry ``slo`` (:class:`SloCounts`: met, judged, unjudged, short_answers): a
       request too short for a TPOT or ITL limit set is not judged against it, and
       ``slo_met_fraction`` is met / judged. Older files load with the per-request cost
       None and ``slo`` None (their fraction counted such requests as met).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from tokrate.errors import RunFolderError
from tokrate.runfolder.capacity_result import CapacityResult
from tokrate.runfolder.quality import Quality
from tokrate.spec.metric_table import summarised
from tokrate.textfmt import level_label

__all__ = [
    "DIST_KEYS",
    "DIST_METRICS",
    "ES_KEYS",
    "SUMMARY_SCHEMA_HISTORY",
    "SUMMARY_SCHEMA_VERSION",
    "CacheUse",
    "Cost",
    "Distribution",
    "Group",
    "GroupCounts",
    "ServerCounters",
    "ServerTimings",
    "SloCounts",
    "StreamShape",
    "Summary",
    "TaskGroup",
    "TurnCache",
]

SUMMARY_SCHEMA_VERSION: Final = 12
SUMMARY_SCHEMA_HISTORY: Final[dict[int, str]] = {
    1: "first version",
    2: "stream (buffered-stream verdict) and server (server timings) per group;"
    " per-token distributions without buffered requests",
    3: "quality (checked answers' pass rate with its Wilson interval) per group and task",
    4: "cache (prompt-cache hit rate, TTFT cold vs cached, per turn and session) per group",
    5: "server: sources, queue/ttft/decode, client minus server TTFT and decode, acceptance",
    6: "server_counters: /metrics prefix-cache and speculative-decoding counters over the run",
    7: "stream.client_held and client_held_lag_max_ms: buffered streams the client's own"
    " lagging event loop held",
    8: "counts.not_sent (requests the client never sent, left out of counts.error)",
    9: "stream.short_hold: buffered streams whose first read came within 50 ms of the send",
    10: "p90_es, p95_es, p99_es per distribution: early-stopping estimates at 99% confidence",
    11: "send_queue_s, ttft_from_due_s per group: the client's queueing before t0",
    12: "cost per 1,000 requests on the run's token mix (groups and tasks); slo counts"
    " (met, judged, unjudged short answers)",
}

#: The early-stopping estimates of the tail percentiles (tokrate.analysis.early_stopping).
ES_KEYS: Final = ("p90_es", "p95_es", "p99_es")
#: Keys of every distribution, in the order summary.json writes them.
DIST_KEYS: Final = ("n", "mean", "p50", "p90", "p95", "p99", "min", "max", *ES_KEYS)

#: Per-request metrics summarised as distributions, in summary.json order (the
#: metric table's, tokrate.spec.metric_table).
DIST_METRICS: Final = summarised("group")
#: The distributions kept per task.
TASK_METRICS: Final = summarised("task")


def _bad(where: str, what: str) -> RunFolderError:
    return RunFolderError(f"{where}: {what}")


def _num(data: Mapping[str, Any], key: str, where: str) -> float | None:
    value = data.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise _bad(where, f"{key} must be a number, got {value!r}")
    return float(value)


def _int(data: Mapping[str, Any], key: str, where: str) -> int:
    value = data.get(key) or 0
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise _bad(where, f"{key} must be an integer, got {value!r}")
    return int(value)


def _list(data: Mapping[str, Any], key: str, where: str) -> list[Any]:
    value = data.get(key)
    if value is None:
        return []
    if not isinstance(value, list):
        raise _bad(where, f"{key} must be a list")
    return value


def _obj(data: Mapping[str, Any], key: str, where: str) -> Mapping[str, Any]:
    value = data.get(key)
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise _bad(where, f"{key} must be an object")
    return value


@dataclass(frozen=True, slots=True)
class Distribution:
    """n, mean, p50, p90, p95, p99, min and max of one metric (linear-interpolated
    percentiles), and the early-stopping estimates of p90, p95 and p99 (``p95_es``:
    a value the true p95 stays at or below with 99% confidence; None below the samples
    it needs: tokrate.analysis.early_stopping). ``n == 0``: every statistic is None."""

    n: int = 0
    mean: float | None = None
    p50: float | None = None
    p90: float | None = None
    p95: float | None = None
    p99: float | None = None
    min: float | None = None
    max: float | None = None
    p90_es: float | None = None
    p95_es: float | None = None
    p99_es: float | None = None

    def stat(self, name: str) -> float | None:
        """``"p95"``, ``"mean"``, ``"p95_es"``, ... by name (KeyError for an unknown one)."""
        if name not in DIST_KEYS or name == "n":
            raise KeyError(name)
        value = getattr(self, name)
        return None if value is None else float(value)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], where: str) -> Distribution:
        n = _int(data, "n", where)
        if n == 0:
            return cls()
        return cls(n, **{k: _num(data, k, where) for k in DIST_KEYS[1:]})


@dataclass(frozen=True, slots=True)
class GroupCounts:
    """Requests of a group: warm-up counted apart from the others; a retried request
    counts once, by its last attempt (``retried_attempts`` counts the superseded)."""

    scheduled: int = 0
    ok: int = 0
    #: Failures the server is answerable for (what the error rate counts).
    error: int = 0
    cancelled: int = 0
    warmup: int = 0
    retried_attempts: int = 0
    #: Requests the client never sent (error class ``not_sent``): its own failure.
    not_sent: int = 0

    @property
    def failed(self) -> int:
        """Requests that did not end ok (errors, unsent requests and cancellations)."""
        return self.error + self.not_sent + self.cancelled

    def to_dict(self) -> dict[str, int]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], where: str) -> GroupCounts:
        return cls(*(_int(data, f.name, where) for f in dataclasses.fields(cls)))


@dataclass(frozen=True, slots=True)
class Cost:
    """What a group's (or one task's) requests cost (docs/definitions.md "cost";
    tokrate.analysis.cost computes it).

    ``source``: "price" (the target's token prices on the requests' own token mix) or
    "gpu_hourly" (GPU-hour price x GPUs: each request charged the GPU time it held at
    the measured throughput). ``n``: the requests priced (measured final attempts
    that ended ok). ``usd_per_1k_requests``: their mean cost x 1,000;
    ``usd_per_1k_requests_sd``: the standard deviation of one request's cost x 1,000
    (so parts can be pooled exactly); ``usd_per_1k_requests_ci``: the Student-t 95%
    interval of that mean (None below 2 requests). Token means per priced request:
    ``input_tokens_mean`` (cached ones included), ``cached_input_tokens_mean`` (None:
    no request reported cached tokens), ``output_tokens_mean`` (reasoning included, as
    providers bill them), ``reasoning_tokens_mean`` (None: not reported).
    ``usd_per_m_output``: the output list price, or the GPU-hour rate per million
    output tokens at the measured throughput. A file before schema 10 holds only
    ``usd_per_m_output`` and ``source``: its per-request figures load as None, and such
    a cost ranks nothing (tokrate report recomputes it from the records).
    """

    source: str
    usd_per_m_output: float | None = None
    n: int = 0
    usd_per_1k_requests: float | None = None
    usd_per_1k_requests_sd: float | None = None
    usd_per_1k_requests_ci: tuple[float, float] | None = None
    input_tokens_mean: float | None = None
    cached_input_tokens_mean: float | None = None
    output_tokens_mean: float | None = None
    reasoning_tokens_mean: float | None = None

    def to_dict(self) -> dict[str, Any]:
        ci = self.usd_per_1k_requests_ci
        return {
            "source": self.source,
            "n": self.n,
            "usd_per_1k_requests": self.usd_per_1k_requests,
            "usd_per_1k_requests_sd": self.usd_per_1k_requests_sd,
            "usd_per_1k_requests_ci": None if ci is None else list(ci),
            "input_tokens_mean": self.input_tokens_mean,
            "cached_input_tokens_mean": self.cached_input_tokens_mean,
            "output_tokens_mean": self.output_tokens_mean,
            "reasoning_tokens_mean": self.reasoning_tokens_mean,
            "usd_per_m_output": self.usd_per_m_output,
        }

    @classmethod
    def from_dict(cls, data: Any, where: str) -> Cost | None:
        """None for a null cost; a version-9 cost (``usd_per_m_output`` and ``source``
        only) loads with its per-request figures None."""
        if data is None:
            return None
        if not isinstance(data, Mapping):
            raise _bad(where, "not an object")
        ci = data.get("usd_per_1k_requests_ci")
        if ci is not None and (
            not isinstance(ci, list)
            or len(ci) != 2
            or not all(isinstance(x, int | float) and not isinstance(x, bool) for x in ci)
        ):
            raise _bad(where, "usd_per_1k_requests_ci must be a list of two numbers")
        return cls(
            source=str(data.get("source")),
            usd_per_m_output=_num(data, "usd_per_m_output", where),
            n=_int(data, "n", where),
            usd_per_1k_requests=_num(data, "usd_per_1k_requests", where),
            usd_per_1k_requests_sd=_num(data, "usd_per_1k_requests_sd", where),
            usd_per_1k_requests_ci=None if ci is None else (float(ci[0]), float(ci[1])),
            input_tokens_mean=_num(data, "input_tokens_mean", where),
            cached_input_tokens_mean=_num(data, "cached_input_tokens_mean", where),
            output_tokens_mean=_num(data, "output_tokens_mean", where),
            reasoning_tokens_mean=_num(data, "reasoning_tokens_mean", where),
        )


def _dists(data: Mapping[str, Any], names: Sequence[str], where: str) -> dict[str, Distribution]:
    return {m: Distribution.from_dict(_obj(data, m, where), f"{where}: {m}") for m in names}


@dataclass(frozen=True, slots=True)
class StreamShape:
    """How a group's ok measured requests arrived (docs/report.md "Buffered
    streams"): ``judged`` requests, ``buffered`` of them delivered in a few reads
    (left out of ``tpot_s``, ``itl_s`` and ``decode_tps``); medians of reads per
    token and burst share over the judged and over the buffered ones, and the
    buffered ones' largest-read share;
    ``buffered_decode_tps`` is what 1 / TPOT of the buffered ones would have read
    (kept apart, not a decode speed)."""

    judged: int = 0
    buffered: int = 0
    #: Of ``buffered``: those the client itself held (its loop lagged at their first
    #: read), and the worst loop lag among them (ms).
    client_held: int = 0
    client_held_lag_max_ms: float | None = None
    #: Of ``buffered``, not client-held: those whose first read came within 50 ms of
    #: the send (held less than that: no proxy or server to blame).
    short_hold: int = 0
    reads_per_token_p50: float | None = None
    burst_share_p50: float | None = None
    buffered_reads_per_token_p50: float | None = None
    buffered_burst_share_p50: float | None = None
    buffered_first_read_share_p50: float | None = None
    buffered_decode_tps: Distribution = Distribution()

    @property
    def buffered_share(self) -> float | None:
        """Buffered / judged; None when nothing was judged."""
        return self.buffered / self.judged if self.judged else None

    @property
    def held_elsewhere(self) -> int:
        """Buffered requests a proxy or the server held: neither the client's doing nor
        too short to blame."""
        return self.buffered - self.client_held - self.short_hold

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "judged": self.judged,
            "buffered": self.buffered,
            "client_held": self.client_held,
            "short_hold": self.short_hold,
        }
        out["buffered_share"] = self.buffered_share
        out.update({name: getattr(self, name) for name in _float_fields(self)})
        out["buffered_decode_tps"] = self.buffered_decode_tps.to_dict()
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], where: str) -> StreamShape:
        return cls(
            judged=_int(data, "judged", where),
            buffered=_int(data, "buffered", where),
            client_held=_int(data, "client_held", where),
            short_hold=_int(data, "short_hold", where),
            **_float_values(cls, data, where),
            buffered_decode_tps=Distribution.from_dict(
                _obj(data, "buffered_decode_tps", where), f"{where}: buffered_decode_tps"
            ),
        )


def _float_fields(cls: Any) -> list[str]:
    """The optional-number fields of a dataclass (what from_dict reads with _num)."""
    return [f.name for f in dataclasses.fields(cls) if f.type == "float | None"]


def _float_values(cls: Any, data: Mapping[str, Any], where: str) -> dict[str, Any]:
    return {name: _num(data, name, where) for name in _float_fields(cls)}


@dataclass(frozen=True, slots=True)
class ServerTimings:
    """What the server said about a group's ok measured requests (llama.cpp
    ``timings``, vLLM ``metrics``, NIM ``stats``; tokrate.analysis.server_timings,
    docs/report.md "Client vs server"): ``n`` requests carried timings, under the
    response keys ``sources``; ``decode_tps`` = the server's decode speed, ``prompt_s``
    its prefill time, ``queue_s`` / ``ttft_s`` / ``decode_s`` its queue wait, time to
    first token and decode time; ``ttft_minus_server_s`` / ``decode_minus_server_s`` the
    per-request client minus server figures (network + client overhead);
    ``decode_vs_server_p50`` = median over requests of client decode_tps / server's
    - 1 (negative: network + client cost speed); ``ttft_minus_prompt_p50_s`` /
    ``ttft_minus_prompt_min_s`` = client TTFT - server prompt time (>= 0 when honest);
    ``spec_acceptance_p50`` the median accepted share of drafted tokens
    (speculative decoding), None when not reported."""

    n: int
    decode_tps: Distribution = Distribution()
    prompt_s: Distribution = Distribution()
    decode_vs_server_p50: float | None = None
    ttft_minus_prompt_p50_s: float | None = None
    ttft_minus_prompt_min_s: float | None = None
    spec_acceptance_p50: float | None = None
    sources: tuple[str, ...] = ("timings",)
    queue_s: Distribution = Distribution()
    ttft_s: Distribution = Distribution()
    decode_s: Distribution = Distribution()
    ttft_minus_server_s: Distribution = Distribution()
    decode_minus_server_s: Distribution = Distribution()

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"n": self.n, "sources": list(self.sources)}
        out.update({m: getattr(self, m).to_dict() for m in _SERVER_DISTS})
        out.update({name: getattr(self, name) for name in _float_fields(self)})
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], where: str) -> ServerTimings:
        sources = data.get("sources") or ["timings"]
        if not isinstance(sources, list):
            raise _bad(where, "sources must be a list")
        values: dict[str, Any] = {
            **_dists(data, _SERVER_DISTS, where),
            **_float_values(cls, data, where),
        }
        return cls(n=_int(data, "n", where), sources=tuple(str(s) for s in sources), **values)


#: The distributions of :class:`ServerTimings`, in summary.json order.
_SERVER_DISTS: Final = (
    "decode_tps",
    "prompt_s",
    "queue_s",
    "ttft_s",
    "decode_s",
    "ttft_minus_server_s",
    "decode_minus_server_s",
)


@dataclass(frozen=True, slots=True)
class TurnCache:
    """One turn's prompt-cache hit rate over a group's sessions."""

    turn: int
    n: int
    hit_rate: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"turn": self.turn, "n": self.n, "hit_rate": self.hit_rate}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], where: str) -> TurnCache:
        return cls(
            turn=_int(data, "turn", where),
            n=_int(data, "n", where),
            hit_rate=_num(data, "hit_rate", where),
        )


@dataclass(frozen=True, slots=True)
class CacheUse:
    """What the server said about its prompt cache over a group's ok measured requests
    (tokrate.analysis.cache_use; docs/run-folder.md "summary.json"): ``n`` requests
    reported cached tokens, ``hit_requests`` of them had some; ``input_tokens`` /
    ``cached_tokens`` their sums (each cached figure capped at its input); ``hit_rate``
    = cached / input; ``write_tokens`` the cache writes reported apart (Anthropic
    ``cache_creation_input_tokens``), None when no server reported them;
    ``ttft_cold_s`` / ``ttft_cached_s`` TTFT of the requests with nothing / something
    cached, ``cached_share_p50`` the median cached share of the latter's prompts;
    ``by_turn`` per turn of sessions, ``session_hit_rate`` over sessions."""

    n: int
    hit_requests: int = 0
    input_tokens: int = 0
    cached_tokens: int = 0
    write_tokens: int | None = None
    hit_rate: float | None = None
    ttft_cold_s: Distribution = Distribution()
    ttft_cached_s: Distribution = Distribution()
    cached_share_p50: float | None = None
    by_turn: tuple[TurnCache, ...] = ()
    session_hit_rate: Distribution = Distribution()

    def to_dict(self) -> dict[str, Any]:
        return {
            "n": self.n,
            "hit_requests": self.hit_requests,
            "input_tokens": self.input_tokens,
            "cached_tokens": self.cached_tokens,
            "write_tokens": self.write_tokens,
            "hit_rate": self.hit_rate,
            "ttft_cold_s": self.ttft_cold_s.to_dict(),
            "ttft_cached_s": self.ttft_cached_s.to_dict(),
            "cached_share_p50": self.cached_share_p50,
            "by_turn": [t.to_dict() for t in self.by_turn],
            "session_hit_rate": self.session_hit_rate.to_dict(),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], where: str) -> CacheUse:
        turns = data.get("by_turn") or []
        if not isinstance(turns, list):
            raise _bad(where, "by_turn must be a list")
        written = data.get("write_tokens")
        return cls(
            n=_int(data, "n", where),
            hit_requests=_int(data, "hit_requests", where),
            input_tokens=_int(data, "input_tokens", where),
            cached_tokens=_int(data, "cached_tokens", where),
            write_tokens=None if written is None else _int(data, "write_tokens", where),
            hit_rate=_num(data, "hit_rate", where),
            **_dists(data, ("ttft_cold_s", "ttft_cached_s", "session_hit_rate"), where),
            cached_share_p50=_num(data, "cached_share_p50", where),
            by_turn=tuple(
                TurnCache.from_dict(t, f"{where}: by_turn[{i}]") for i, t in enumerate(turns)
            ),
        )


@dataclass(frozen=True, slots=True)
class ServerCounters:
    """What one target's server counted on its ``/metrics`` over the run
    (tokrate.analysis.server_counters; docs/run-folder.md "summary.json"): the increase
    of each counter from the run's first scrape to its last (``window_s`` seconds
    apart, ``scrapes`` of them), warm-up and any other client's requests included.
    ``model`` is "" where the server labels no model. ``prefix_query_tokens`` /
    ``prefix_hit_tokens``: prompt tokens looked up in / found in the prefix cache,
    ``prefix_hit_rate`` hits / queries (or, with ``hit_rate_from_gauge``, the mean of a
    hit-rate gauge such as SGLang's, with no token counts); ``draft_tokens`` /
    ``accepted_tokens`` of speculative decoding and ``spec_acceptance`` accepted /
    drafted. None: the server exported no such counter. ``sources``: the sample
    names read."""

    endpoint: str
    model: str
    sources: tuple[str, ...] = ()
    window_s: float | None = None
    scrapes: int = 0
    prefix_query_tokens: int | None = None
    prefix_hit_tokens: int | None = None
    prefix_hit_rate: float | None = None
    hit_rate_from_gauge: bool = False
    draft_tokens: int | None = None
    accepted_tokens: int | None = None
    spec_acceptance: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "endpoint": self.endpoint,
            "model": self.model,
            "sources": list(self.sources),
            "window_s": self.window_s,
            "scrapes": self.scrapes,
            "prefix_query_tokens": self.prefix_query_tokens,
            "prefix_hit_tokens": self.prefix_hit_tokens,
            "prefix_hit_rate": self.prefix_hit_rate,
            "hit_rate_from_gauge": self.hit_rate_from_gauge,
            "draft_tokens": self.draft_tokens,
            "accepted_tokens": self.accepted_tokens,
            "spec_acceptance": self.spec_acceptance,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], where: str) -> ServerCounters:
        if not isinstance(data, Mapping):
            raise _bad(where, "not an object")
        sources = data.get("sources") or []
        if not isinstance(sources, list):
            raise _bad(where, "sources must be a list")

        def opt_int(key: str) -> int | None:
            return None if data.get(key) is None else _int(data, key, where)

        return cls(
            endpoint=str(data.get("endpoint") or ""),
            model=str(data.get("model") or ""),
            sources=tuple(str(x) for x in sources),
            window_s=_num(data, "window_s", where),
            scrapes=_int(data, "scrapes", where),
            prefix_query_tokens=opt_int("prefix_query_tokens"),
            prefix_hit_tokens=opt_int("prefix_hit_tokens"),
            prefix_hit_rate=_num(data, "prefix_hit_rate", where),
            hit_rate_from_gauge=bool(data.get("hit_rate_from_gauge")),
            draft_tokens=opt_int("draft_tokens"),
            accepted_tokens=opt_int("accepted_tokens"),
            spec_acceptance=_num(data, "spec_acceptance", where),
        )


@dataclass(frozen=True, slots=True)
class SloCounts:
    """How the SLOs judged a group's (or a task's) requests (docs/definitions.md
    "SLO met"): ``met`` of ``judged`` requests met every limit set (a failed request
    is judged and misses; cancelled and unsent ones are not judged); ``unjudged``
    requests could not be judged because a limit set needs more output tokens than
    they had (a TPOT or ITL p99 limit on a one-token answer) and no other limit
    failed them: they neither meet nor miss. ``short_answers``: ok requests judged
    against a TPOT limit on 2-4 output tokens (a TPOT of 1-3 gaps)."""

    met: int = 0
    judged: int = 0
    unjudged: int = 0
    short_answers: int = 0

    def to_dict(self) -> dict[str, int]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Any, where: str) -> SloCounts | None:
        if data is None:
            return None
        if not isinstance(data, Mapping):
            raise _bad(where, "not an object")
        return cls(*(_int(data, f.name, where) for f in dataclasses.fields(cls)))


@dataclass(frozen=True, slots=True)
class TaskGroup:
    """One task's part of a group (same counting rules)."""

    task: str
    counts: GroupCounts
    ttft_s: Distribution
    tpot_s: Distribution
    e2e_s: Distribution
    decode_tps: Distribution
    slo_met_fraction: float | None = None
    quality: Quality | None = None
    #: What this task's requests cost (None: the target has no price).
    cost: Cost | None = None
    slo: SloCounts | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"task": self.task, "counts": self.counts.to_dict()}
        for m in TASK_METRICS:
            out[m] = getattr(self, m).to_dict()
        out["slo_met_fraction"] = self.slo_met_fraction
        out["slo"] = None if self.slo is None else self.slo.to_dict()
        out["quality"] = None if self.quality is None else self.quality.to_dict()
        out["cost"] = None if self.cost is None else self.cost.to_dict()
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], where: str) -> TaskGroup:
        return cls(
            task=str(data.get("task")),
            counts=GroupCounts.from_dict(_obj(data, "counts", where), where),
            **_dists(data, TASK_METRICS, where),
            slo_met_fraction=_num(data, "slo_met_fraction", where),
            quality=Quality.from_dict(data.get("quality"), f"{where}: quality"),
            cost=Cost.from_dict(data.get("cost"), f"{where}: cost"),
            slo=SloCounts.from_dict(data.get("slo"), f"{where}: slo"),
        )


@dataclass(frozen=True, slots=True)
class Group:
    """One endpoint x model x scenario of a run (docs/run-folder.md "summary.json")."""

    endpoint: str
    model: str
    scenario: str
    concurrency: int | None
    rate_rps: float | None
    counts: GroupCounts
    ttft_s: Distribution = Distribution()
    tpot_s: Distribution = Distribution()
    itl_s: Distribution = Distribution()
    e2e_s: Distribution = Distribution()
    decode_tps: Distribution = Distribution()
    first_answer_s: Distribution = Distribution()
    ttft_from_scheduled_s: Distribution = Distribution()
    send_delay_s: Distribution = Distribution()
    ttft_from_due_s: Distribution = Distribution()
    send_queue_s: Distribution = Distribution()
    errors_by_class: Mapping[str, int] = field(default_factory=dict)
    window_s: float | None = None
    aggregate_output_tps: float | None = None
    requests_per_s: float | None = None
    goodput_rps: float | None = None
    slo_met_fraction: float | None = None
    output_tokens_total: int = 0
    input_tokens_total: int = 0
    cost: Cost | None = None
    by_task: tuple[TaskGroup, ...] = ()
    stream: StreamShape | None = None
    server: ServerTimings | None = None
    quality: Quality | None = None
    cache: CacheUse | None = None
    slo: SloCounts | None = None

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.endpoint, self.model, self.scenario)

    @property
    def level(self) -> str:
        """The load level as every table writes it ("c=4", "rate=2/s")."""
        return level_label(self.concurrency, self.rate_rps, self.scenario)

    @property
    def load_value(self) -> float | None:
        """Concurrency or rate as a number, for ordering levels."""
        if self.concurrency is not None:
            return float(self.concurrency)
        return self.rate_rps

    def distribution(self, metric: str) -> Distribution:
        """A distribution by metric name (one of DIST_METRICS)."""
        if metric not in DIST_METRICS:
            raise KeyError(metric)
        value: Distribution = getattr(self, metric)
        return value

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "endpoint": self.endpoint,
            "model": self.model,
            "scenario": self.scenario,
            "concurrency": self.concurrency,
            "rate_rps": self.rate_rps,
            "task": None,
            "counts": self.counts.to_dict(),
            "errors_by_class": dict(self.errors_by_class),
        }
        for m in DIST_METRICS:
            out[m] = getattr(self, m).to_dict()
        out.update(
            {
                "window_s": self.window_s,
                "aggregate_output_tps": self.aggregate_output_tps,
                "requests_per_s": self.requests_per_s,
                "goodput_rps": self.goodput_rps,
                "slo_met_fraction": self.slo_met_fraction,
                "slo": None if self.slo is None else self.slo.to_dict(),
                "output_tokens_total": self.output_tokens_total,
                "input_tokens_total": self.input_tokens_total,
                "cost": None if self.cost is None else self.cost.to_dict(),
                "by_task": [t.to_dict() for t in self.by_task],
                "stream": None if self.stream is None else self.stream.to_dict(),
                "server": None if self.server is None else self.server.to_dict(),
                "quality": None if self.quality is None else self.quality.to_dict(),
                "cache": None if self.cache is None else self.cache.to_dict(),
            }
        )
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], where: str) -> Group:
        errors = _obj(data, "errors_by_class", where)
        tasks = data.get("by_task") or []
        if not isinstance(tasks, list):
            raise _bad(where, "by_task must be a list")
        concurrency = _num(data, "concurrency", where)
        return cls(
            endpoint=str(data.get("endpoint")),
            model=str(data.get("model")),
            scenario=str(data.get("scenario")),
            concurrency=None if concurrency is None else int(concurrency),
            rate_rps=_num(data, "rate_rps", where),
            counts=GroupCounts.from_dict(_obj(data, "counts", where), where),
            **_dists(data, DIST_METRICS, where),
            errors_by_class={str(k): int(v) for k, v in errors.items()},
            window_s=_num(data, "window_s", where),
            aggregate_output_tps=_num(data, "aggregate_output_tps", where),
            requests_per_s=_num(data, "requests_per_s", where),
            goodput_rps=_num(data, "goodput_rps", where),
            slo_met_fraction=_num(data, "slo_met_fraction", where),
            slo=SloCounts.from_dict(data.get("slo"), f"{where}: slo"),
            output_tokens_total=_int(data, "output_tokens_total", where),
            input_tokens_total=_int(data, "input_tokens_total", where),
            cost=Cost.from_dict(data.get("cost"), f"{where}: cost"),
            by_task=tuple(
                TaskGroup.from_dict(t, f"{where}: by_task[{i}]") for i, t in enumerate(tasks)
            ),
            stream=StreamShape.from_dict(_obj(data, "stream", where), f"{where}: stream")
            if data.get("stream") is not None
            else None,
            server=ServerTimings.from_dict(_obj(data, "server", where), f"{where}: server")
            if data.get("server") is not None
            else None,
            quality=Quality.from_dict(data.get("quality"), f"{where}: quality"),
            cache=CacheUse.from_dict(_obj(data, "cache", where), f"{where}: cache")
            if data.get("cache") is not None
            else None,
        )


@dataclass(frozen=True, slots=True)
class Summary:
    """summary.json: every group of one run, in report order (targets as run.json
    lists them, scenarios in sweep order)."""

    run_id: str | None
    groups: tuple[Group, ...]
    schema_version: int = SUMMARY_SCHEMA_VERSION
    #: A capacity search's result (capacity.json); None for a sweep (and old files).
    capacity: CapacityResult | None = None
    #: The servers' own /metrics counters over the run, per target (empty: none scraped).
    server_counters: tuple[ServerCounters, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "schema_version": self.schema_version,
            "run_id": self.run_id,
            "groups": [g.to_dict() for g in self.groups],
        }
        if self.capacity is not None:
            out["capacity"] = self.capacity.to_dict()
        if self.server_counters:
            out["server_counters"] = [c.to_dict() for c in self.server_counters]
        return out

    def counters(self, endpoint: str, model: str) -> ServerCounters | None:
        """The server counters of a target (its model's, else the whole server's)."""
        for c in self.server_counters:
            if c.endpoint == endpoint and c.model == model:
                return c
        return next(
            (c for c in self.server_counters if c.endpoint == endpoint and c.model == ""), None
        )

    def group(self, endpoint: str, model: str, scenario: str) -> Group | None:
        for g in self.groups:
            if g.key == (endpoint, model, scenario):
                return g
        return None

    @classmethod
    def from_dict(cls, data: Any, where: str = "summary.json") -> Summary:
        """Raises RunFolderError (one line) for an unknown schema version or a
        mistyped field."""
        if not isinstance(data, Mapping):
            raise _bad(where, "not a JSON object")
        version = data.get("schema_version")
        if version not in SUMMARY_SCHEMA_HISTORY:
            raise _bad(
                where,
                f"schema_version {version!r} is not supported"
                f" (known: {sorted(SUMMARY_SCHEMA_HISTORY)}); upgrade tokrate",
            )
        groups = data.get("groups") or []
        if not isinstance(groups, list) or not all(isinstance(g, Mapping) for g in groups):
            raise _bad(where, "groups must be a list of objects")
        run_id = data.get("run_id")
        return cls(
            run_id=None if run_id is None else str(run_id),
            groups=tuple(
                Group.from_dict(g, f"{where}: groups[{i}]")
                for i, g in enumerate(groups)
                if g.get("task") is None
            ),
            schema_version=int(version),
            capacity=(
                None
                if data.get("capacity") is None
                else CapacityResult.from_dict(data["capacity"], f"{where}: capacity")
            ),
            server_counters=tuple(
                ServerCounters.from_dict(c, f"{where}: server_counters[{i}]")
                for i, c in enumerate(_list(data, "server_counters", where))
            ),
        )
