"""summary.json as frozen types: :class:`Summary` of :class:`Group` s.

:func:`tokrate.analysis.metrics.summarize` builds a Summary from records; the store writes it
with :func:`tokrate.runfolder.jsondoc.to_json` and :func:`tokrate.runfolder.loaded_run.load_run`
reads it back with :func:`summary_from_json`: a key is a field, in the file's order. Every reader (terminal table, report, history) uses these
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

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Final

from tokrate.errors import RunFolderError
from tokrate.runfolder.capacity_result import CapacityResult
from tokrate.runfolder.jsondoc import OMIT_IF_EMPTY, OMIT_IF_NONE, from_json
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
    "summary_from_json",
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
    # Keyword-only where the file's key order differs from the constructor's.
    n: int = field(default=0, kw_only=True)
    usd_per_1k_requests: float | None = field(default=None, kw_only=True)
    usd_per_1k_requests_sd: float | None = field(default=None, kw_only=True)
    usd_per_1k_requests_ci: tuple[float, float] | None = field(default=None, kw_only=True)
    input_tokens_mean: float | None = field(default=None, kw_only=True)
    cached_input_tokens_mean: float | None = field(default=None, kw_only=True)
    output_tokens_mean: float | None = field(default=None, kw_only=True)
    reasoning_tokens_mean: float | None = field(default=None, kw_only=True)
    usd_per_m_output: float | None = None


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
    #: Of ``buffered``, not client-held: those whose first read came within 50 ms of
    #: the send (held less than that: no proxy or server to blame).
    short_hold: int = field(default=0, kw_only=True)
    client_held_lag_max_ms: float | None = None
    reads_per_token_p50: float | None = None
    burst_share_p50: float | None = None
    buffered_reads_per_token_p50: float | None = None
    buffered_burst_share_p50: float | None = None
    buffered_first_read_share_p50: float | None = None
    buffered_decode_tps: Distribution = Distribution()
    #: Written for readers of the file (jsondoc), never read back.
    __json_computed__: ClassVar = {"short_hold": ("buffered_share",)}

    @property
    def buffered_share(self) -> float | None:
        """Buffered / judged; None when nothing was judged."""
        return self.buffered / self.judged if self.judged else None

    @property
    def held_elsewhere(self) -> int:
        """Buffered requests a proxy or the server held: neither the client's doing nor
        too short to blame."""
        return self.buffered - self.client_held - self.short_hold


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
    #: Files before schema 5 name no sources: their timings came under ``timings``.
    sources: tuple[str, ...] = field(default=("timings",), kw_only=True)
    decode_tps: Distribution = Distribution()
    prompt_s: Distribution = Distribution()
    queue_s: Distribution = field(default=Distribution(), kw_only=True)
    ttft_s: Distribution = field(default=Distribution(), kw_only=True)
    decode_s: Distribution = field(default=Distribution(), kw_only=True)
    ttft_minus_server_s: Distribution = field(default=Distribution(), kw_only=True)
    decode_minus_server_s: Distribution = field(default=Distribution(), kw_only=True)
    decode_vs_server_p50: float | None = None
    ttft_minus_prompt_p50_s: float | None = None
    ttft_minus_prompt_min_s: float | None = None
    spec_acceptance_p50: float | None = None


@dataclass(frozen=True, slots=True)
class TurnCache:
    """One turn's prompt-cache hit rate over a group's sessions."""

    turn: int
    n: int
    hit_rate: float | None = None


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
    slo: SloCounts | None = field(default=None, kw_only=True)
    quality: Quality | None = None
    #: What this task's requests cost (None: the target has no price).
    cost: Cost | None = None


@dataclass(frozen=True, slots=True)
class Group:
    """One endpoint x model x scenario of a run (docs/run-folder.md "summary.json")."""

    endpoint: str
    model: str
    scenario: str
    concurrency: int | None
    rate_rps: float | None
    counts: GroupCounts
    errors_by_class: Mapping[str, int] = field(default_factory=dict, kw_only=True)
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
    window_s: float | None = None
    aggregate_output_tps: float | None = None
    requests_per_s: float | None = None
    goodput_rps: float | None = None
    slo_met_fraction: float | None = None
    slo: SloCounts | None = field(default=None, kw_only=True)
    output_tokens_total: int = 0
    input_tokens_total: int = 0
    cost: Cost | None = None
    by_task: tuple[TaskGroup, ...] = ()
    stream: StreamShape | None = None
    server: ServerTimings | None = None
    quality: Quality | None = None
    cache: CacheUse | None = None
    #: Written for readers of the file (jsondoc), never read back.
    __json_computed__: ClassVar = {"rate_rps": ("task",)}

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.endpoint, self.model, self.scenario)

    @property
    def task(self) -> None:
        """A group is every task's (summary.json writes ``"task": null``; schema 1 also
        listed one row per task, which :func:`summary_from_json` drops)."""
        return None

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


@dataclass(frozen=True, slots=True)
class Summary:
    """summary.json: every group of one run, in report order (targets as run.json
    lists them, scenarios in sweep order)."""

    schema_version: int = field(default=SUMMARY_SCHEMA_VERSION, kw_only=True)
    run_id: str | None
    groups: tuple[Group, ...]
    #: A capacity search's result (capacity.json); None for a sweep (and old files).
    capacity: CapacityResult | None = field(default=None, metadata=OMIT_IF_NONE)
    #: The servers' own /metrics counters over the run, per target (empty: none scraped).
    server_counters: tuple[ServerCounters, ...] = field(default=(), metadata=OMIT_IF_EMPTY)

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


def summary_from_json(data: Any, where: str = "summary.json") -> Summary:
    """summary.json's document. Raises RunFolderError (one line) for an unknown schema
    version or a mistyped field."""
    if not isinstance(data, Mapping):
        raise RunFolderError(f"{where}: not a JSON object")
    version = data.get("schema_version")
    if version not in SUMMARY_SCHEMA_HISTORY:
        raise RunFolderError(
            f"{where}: schema_version {version!r} is not supported"
            f" (known: {sorted(SUMMARY_SCHEMA_HISTORY)}); upgrade tokrate"
        )
    groups = data.get("groups")
    if isinstance(groups, list):  # schema 1's per-task rows (by_task since) are left out
        data = {**data, "groups": [g for g in groups if not _task_row(g)]}
    return from_json(Summary, data, where)


def _task_row(group: object) -> bool:
    return isinstance(group, Mapping) and group.get("task") is not None
