"""Metrics: pure polars functions over a records frame, and summary.json.

Input is a frame (DataFrame or LazyFrame) with ``tokrate.runfolder.records_frame.RECORD_POLARS_SCHEMA``.
Rules (docs/run-folder.md, docs/definitions.md):

- Only ``status == "ok"`` and non-warm-up records enter latency statistics; counts
  include every record (warm-up counted apart).
- A buffered stream (:mod:`tokrate.analysis.buffering`: delivered in a few reads by a proxy)
  has no TPOT, ITL or decode speed: :func:`derive` nulls them (``tpot_measured_s``
  keeps the record's value), so the summary, report, compare and history all leave it
  out of those statistics; TTFT, E2E and counts keep it. Server-reported timings
  (:mod:`tokrate.analysis.server_timings`) are summarised per group beside the client's.
- An empty answer (:func:`empty_answer_expr`: ok, but no chunk carried content) stays
  ok in the counts and requests/s; its output tokens are left out of throughput and
  it misses every SLO (it delivered nothing); it has no TTFT, TPOT or ITL anyway.
- ``decode_tps`` per request = 1 / ``tpot_s``; ITL = diffs of ``chunk_offsets_s``;
  ``ttft_from_scheduled_s`` = ``send_delay_s`` + ``ttft_s`` (open loop only, so a
  saturated client cannot hide queueing); the records' own ``send_queue_s`` and
  ``ttft_from_due_s`` say the same in both loops (from the moment each request was due:
  its schedule, or its slot freeing).
- The window of a group (endpoint, model, scenario) is :func:`window_exprs`: from the
  moment its first non-warm-up request was sent (wall clock ``started_at`` at t0, when
  it left; in records before t0 was the send's (no ``t0_source``), plus the request's
  own connection set-up ``connect_s``, so opening a connection, which a cold start did
  inside t0, never stretches it) to its last non-warm-up end (``started_at
  + e2e_s``). Aggregate throughput = output tokens of its ok non-warm-up requests /
  window; requests/s = ok requests / window; goodput = requests that met every SLO /
  window. On a zero-delay ceiling run this agrees with the server's own count (tokens
  / first request received to last write) within 2%
  (``tests/loopback/test_run_window.py``, ``benchmarks/window_agreement.py``).
- A request meets the SLOs when it is ok and each SLO the user set holds: ``ttft_s``,
  ``tpot_s``, ``e2e_s`` <= their limits, and the p99 of its own ITL gaps <=
  ``itl_p99_s`` (:func:`slo_judgement_exprs`). A limit on a value the request is too
  short to have (TPOT of a one-token answer, ITL of a one-chunk stream) cannot judge
  it: unless another limit failed it, it is *unjudged* (summary ``slo.unjudged``),
  neither met nor missed. ``slo_met_fraction`` = met / judged, judged being the ok +
  error requests less the unjudged (a failed request misses; cancelled ones are left
  out, the user stopped them). No SLO set: goodput and the fraction are None.
- A request the client never sent (:func:`client_side_expr`, error class ``not_sent``:
  its own pool, loop or connect held it until a timeout) is the client's failure: it
  is counted apart (``counts.not_sent``), not in ``counts.error``, the error rate
  (:func:`server_error_expr`) or the SLO fraction; the run warns about it.
- Cost: each priced request (measured, final attempt, ok) costs its own tokens at the
  target's prices, or its share of the GPU-hours (:mod:`tokrate.analysis.cost`);
  summarised per group and task as USD per 1,000 requests with its interval.

- A retried request counts once, by its last attempt (:func:`final_attempts`), in
  every statistic here and in every comparison (compare, history and the report call
  the same function); superseded attempts are counted apart.

Every function returns None (not 0) for what cannot be known. The summary's types and
schema history live in :mod:`tokrate.runfolder.summary`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final, TypeVar

import polars as pl

from tokrate.analysis.buffering import (
    client_held_expr,
    short_hold_expr,
    stream_aggs,
    stream_entry,
    with_buffering,
)
from tokrate.analysis.cache_use import (
    cache_aggs,
    cache_entry,
    cache_exprs,
    turn_and_session_rows,
)
from tokrate.analysis.cost import cost_aggs, cost_entry, with_cost
from tokrate.analysis.ordering import model_key, natural_key
from tokrate.analysis.quality import quality_aggs, quality_entry
from tokrate.analysis.server_timings import (
    server_aggs,
    server_entry,
    server_timing_exprs,
    versus_server_exprs,
)
from tokrate.analysis.stats import dist_exprs, row_to_distribution
from tokrate.runfolder.run_info import RunInfo, TargetInfo
from tokrate.runfolder.summary import (
    DIST_METRICS,
    TASK_METRICS,
    CacheUse,
    Distribution,
    Group,
    GroupCounts,
    SloCounts,
    Summary,
    TaskGroup,
)
from tokrate.spec.types import CLIENT_SIDE_CLASSES

__all__ = [
    "GROUP_KEYS",
    "SLO_COLUMNS",
    "SLO_KEYS",
    "analysed",
    "client_side_expr",
    "decode_tps_expr",
    "derive",
    "empty_answer_expr",
    "final_attempts",
    "is_final_attempt",
    "ok_mask",
    "server_error_expr",
    "short_answer_expr",
    "slo_judgement_exprs",
    "slo_met_expr",
    "summarize",
    "window_exprs",
]

GROUP_KEYS: Final = ("endpoint", "model", "scenario")
SLO_KEYS: Final = ("ttft_s", "tpot_s", "e2e_s", "itl_p99_s")
#: The :func:`derive`-d column each [slo] key judges a request by.
SLO_COLUMNS: Final[Mapping[str, str]] = {
    "ttft_s": "ttft_s",
    "tpot_s": "tpot_s",
    "e2e_s": "e2e_s",
    "itl_p99_s": "itl_p99_req_s",
}

FrameT = TypeVar("FrameT", pl.DataFrame, pl.LazyFrame)


def decode_tps_expr() -> pl.Expr:
    """Per-request decode speed, tokens/s: 1 / tpot_s (None when tpot_s is None or 0,
    a stream that arrived in one read has no measurable decode speed)."""
    tpot = pl.col("tpot_s")
    return pl.when(tpot > 0).then(1.0 / tpot).otherwise(None).alias("decode_tps")


def empty_answer_expr() -> pl.Expr:
    """True on an ok request whose stream carried no content: no chunk with answer,
    reasoning or tool-call text (a server whose detokenizer produced empty strings, as
    transformers serve did for 64 tokens, still counts them in its usage)."""
    no_chunk = pl.col("chunk_offsets_s").list.len().fill_null(0) == 0
    return (pl.col("status") == "ok") & no_chunk & pl.col("ttft_s").is_null()


def is_final_attempt() -> pl.Expr:
    """True on the last attempt of each planned request (per endpoint, model, scenario
    and request index): a retried request counts once, by its last attempt."""
    attempt = pl.col("attempt").fill_null(1)
    return attempt == attempt.max().over([*GROUP_KEYS, "request_index"])


def final_attempts(frame: FrameT) -> FrameT:
    """Only the last attempt of every planned request."""
    return frame.filter(is_final_attempt())


def analysed(frame: FrameT) -> FrameT:
    """What every comparison resamples: final attempts of measured (non-warm-up)
    requests, with :func:`derive`'s columns."""
    return derive(final_attempts(frame)).filter(pl.col("is_measured"))


def derive(frame: FrameT) -> FrameT:
    """Add the per-request derived columns.

    Adds the buffered-stream columns of :mod:`tokrate.analysis.buffering` (``stream_reads``,
    ``reads_per_token``, ``burst_share``, ``buffered``, and who held a buffered one:
    ``client_held``, ``short_hold``); ``tpot_measured_s`` (the
    record's tpot_s as measured); ``tpot_s`` (None on a buffered request: its
    per-token figures are the proxy's flushes, not decoding); ``decode_tps`` (tokens/s,
    1 / tpot_s; None when tpot_s is None or <= 0); ``itl_s`` (list of seconds between
    successive content chunks; None when buffered), ``itl_p99_req_s`` (p99 of the
    request's own gaps), ``ttft_from_scheduled_s`` (seconds, None in closed loop),
    ``end_at`` (wall-clock Unix seconds at end of stream; ``started_at`` when e2e is
    unknown), ``is_measured`` (not warm-up), ``empty_answer`` (:func:`empty_answer_expr`),
    the server-timing columns of :mod:`tokrate.analysis.server_timings` and the
    prompt-cache columns of :mod:`tokrate.analysis.cache_use`.
    """
    buffered = pl.col("buffered")
    gaps = pl.col("chunk_offsets_s").list.diff(null_behavior="drop")
    # Masked after the diff: masking the list column first (otherwise(None)) panics in
    # polars when every request is buffered.
    itl = pl.when(~buffered).then(gaps)
    framed = (
        with_buffering(frame)
        .with_columns(
            *server_timing_exprs(),
            *cache_exprs(),
            pl.col("tpot_s").alias("tpot_measured_s"),
        )
        .with_columns(pl.when(~buffered).then(pl.col("tpot_s")).otherwise(None).alias("tpot_s"))
    )
    return framed.with_columns(
        client_held_expr(),
        decode_tps_expr(),
        itl.alias("itl_s"),
        pl.when(~buffered)
        .then(gaps.list.eval(pl.element().quantile(0.99, interpolation="linear")).list.first())
        .alias("itl_p99_req_s"),
        (pl.col("send_delay_s") + pl.col("ttft_s")).alias("ttft_from_scheduled_s"),
        (pl.col("started_at") + pl.col("e2e_s").fill_null(0.0)).alias("end_at"),
        (~pl.col("warmup").fill_null(False)).alias("is_measured"),
        empty_answer_expr().alias("empty_answer"),
    ).with_columns(short_hold_expr(), *versus_server_exprs())


def ok_mask() -> pl.Expr:
    """True for records that enter latency statistics (ok and not warm-up)."""
    return pl.col("is_measured") & (pl.col("status") == "ok")


def client_side_expr() -> pl.Expr:
    """True for a failure that is the client's, not the server's (its error class is
    one of :data:`~tokrate.spec.types.CLIENT_SIDE_CLASSES`: the request was never sent)."""
    return (pl.col("status") == "error") & pl.col("error_class").is_in(
        sorted(CLIENT_SIDE_CLASSES)
    ).fill_null(False)


def server_error_expr() -> pl.Expr:
    """True for a failed request the server is answerable for: what the error rate
    counts (every ``status == "error"`` but :func:`client_side_expr`)."""
    return (pl.col("status") == "error") & ~client_side_expr()


def _too_short(key: str) -> pl.Expr | None:
    """True where the request has too few output tokens for limit ``key`` to judge
    it: TPOT needs 2 tokens, an ITL p99 needs 2 content chunks (one gap). A buffered
    stream is not "too short": its per-token figures are withheld for another reason
    and hold vacuously, as before (docs/report.md "Buffered streams")."""
    if key == "tpot_s":
        return pl.col("output_tokens").fill_null(0) < 2
    if key == "itl_p99_s":
        return (pl.col("chunk_offsets_s").list.len().fill_null(0) < 2) & ~pl.col("buffered")
    return None


def slo_judgement_exprs(slo: Mapping[str, float | None]) -> tuple[pl.Expr, pl.Expr] | None:
    """Per request on a :func:`derive`-d frame, (met, unjudged) against the SLOs set;
    None when none is set (docs/definitions.md "SLO met").

    A request *misses* when it failed, delivered nothing (an empty answer) or a value
    it has is over its limit. Otherwise it *meets*, unless a limit set needs more
    output tokens than it had (TPOT of a one-token answer, the ITL of a one-chunk
    stream): then it is *unjudged*, neither met nor missed, and left out of the met
    fraction. A value withheld for another reason (a buffered stream's TPOT) holds
    vacuously."""
    over: list[pl.Expr] = []
    short: list[pl.Expr] = []
    for key, column in SLO_COLUMNS.items():
        limit = slo.get(key)
        if limit is None:
            continue
        over.append((pl.col(column) > float(limit)).fill_null(False))
        too_short = _too_short(key)
        if too_short is not None:
            short.append(too_short)
    if not over:
        return None
    # An empty answer misses: no limit "holds vacuously" for an answer that never came.
    delivered = (pl.col("status") == "ok") & ~empty_answer_expr()
    fails = pl.any_horizontal(over)
    cannot = pl.any_horizontal(short) if short else pl.lit(False)
    return delivered & ~fails & ~cannot, delivered & ~fails & cannot


def slo_met_expr(slo: Mapping[str, float | None]) -> pl.Expr | None:
    """Per-request "met every SLO set" on a :func:`derive`-d frame; None if none set
    (an unjudged request, :func:`slo_judgement_exprs`, did not meet them)."""
    judged = slo_judgement_exprs(slo)
    return None if judged is None else judged[0]


def short_answer_expr() -> pl.Expr:
    """True on an ok request with a TPOT from 2-4 output tokens: 1-3 gaps, a figure a
    single late chunk moves by a third or more."""
    tokens = pl.col("output_tokens")
    return (pl.col("status") == "ok") & pl.col("tpot_s").is_not_null() & tokens.is_between(2, 4)


def _itl_stats(d: pl.LazyFrame, keys: list[str]) -> pl.DataFrame:
    """ITL distribution per group over every gap of every ok measured request that was
    not buffered (``d`` is :func:`derive`-d: its ``itl_s`` is None on those).

    Exact, and bounded in memory: only the row numbers of each group are gathered up
    front, then the gaps of one group at a time are summarised. Doing all groups in one
    polars query holds four copies of every gap at once (the gaps, the explode and the
    grouped lists: about 1 GB for a million-record run); one group at a time holds one
    group's gaps.
    """
    base = d.select([*keys, "status", "is_measured", "itl_s"]).collect()
    gaps_by_row = base.get_column("itl_s")
    members = (
        base.lazy()
        .with_row_index("_row")
        .filter(ok_mask())
        .group_by(keys)
        .agg(pl.col("_row"))
        .collect()
    )
    rows: list[dict[str, Any]] = []
    for row in members.iter_rows(named=True):
        gaps = (
            gaps_by_row.gather(row["_row"])
            .explode(empty_as_null=False)
            .cast(pl.Float64)
            .drop_nulls()
            .drop_nans()
        )
        stats = pl.DataFrame({"g": gaps}).select(dist_exprs("g", "itl_s"))
        rows.append({**{k: row[k] for k in keys}, **stats.row(0, named=True)})
    schema: dict[str, Any] = {k: pl.String for k in keys}
    schema["itl_s__n"] = pl.UInt32
    schema.update(
        {f"itl_s__{k}": pl.Float64 for k in ("mean", "p50", "p90", "p95", "p99", "min", "max")}
    )
    return pl.DataFrame(rows, schema=schema, orient="row") if rows else pl.DataFrame(schema=schema)


def window_exprs(measured: pl.Expr) -> tuple[pl.Expr, pl.Expr]:
    """The measured window of a group, as two aggregations over a :func:`derive`-d
    frame: ``window_start`` (wall-clock Unix seconds at which the first ``measured``
    request was sent: its t0; a record from before t0 was the send (no ``t0_source``)
    adds its connection set-up, unknown set-up counting as 0)
    and ``window_end`` (the last ``measured`` request's end of stream). The one place
    the window is defined (docs/definitions.md "aggregate throughput")."""
    set_up = pl.when(pl.col("t0_source").is_null()).then(pl.col("connect_s").fill_null(0.0))
    sent_at = pl.col("started_at") + set_up.otherwise(0.0)
    return (
        sent_at.filter(measured).min().alias("window_start"),
        pl.col("end_at").filter(measured).max().alias("window_end"),
    )


def _aggregations(
    slo_set: bool, metrics: Sequence[str], tpot_limited: bool = False
) -> list[pl.Expr]:
    measured = pl.col("is_measured")
    ok = ok_mask()
    status = pl.col("status")
    aggs: list[pl.Expr] = [
        measured.sum().alias("n_scheduled"),
        ok.sum().alias("n_ok"),
        (measured & server_error_expr()).sum().alias("n_error"),
        (measured & client_side_expr()).sum().alias("n_not_sent"),
        (measured & (status == "cancelled")).sum().alias("n_cancelled"),
        (~measured).sum().alias("n_warmup"),
        *window_exprs(measured),
        # An empty answer's tokens were counted by the server but never delivered.
        pl.col("output_tokens")
        .filter(ok & ~pl.col("empty_answer"))
        .sum()
        .alias("output_tokens_total"),
        pl.col("input_tokens").filter(ok).sum().alias("input_tokens_total"),
        pl.col("concurrency").drop_nulls().first().alias("concurrency"),
        pl.col("rate_rps").drop_nulls().first().alias("rate_rps"),
    ]
    for metric in metrics:
        if metric != "itl_s":  # ITL gaps: see _itl_query
            aggs += dist_exprs(pl.col(metric).filter(ok), metric)
    if slo_set:
        sent = measured & (status != "cancelled") & ~client_side_expr()
        unjudged = measured & pl.col("slo_unjudged")
        aggs += [
            pl.col("slo_met").filter(measured).sum().alias("n_slo_met"),
            (sent & ~pl.col("slo_unjudged")).sum().alias("n_judged"),
            unjudged.sum().alias("n_slo_unjudged"),
            (measured & short_answer_expr() & pl.lit(tpot_limited)).sum().alias("n_short"),
        ]
    return aggs


def summarize(records: pl.DataFrame | pl.LazyFrame, run: RunInfo) -> Summary:
    """The :class:`~tokrate.runfolder.summary.Summary` (summary.json) of one run's records.

    ``records`` has RECORD_POLARS_SCHEMA; ``run`` supplies the SLOs, targets (prices)
    and scenarios (levels, order). Groups are ordered by model size (active
    parameters; unknown last), model name, endpoint (tokrate.analysis.ordering), then
    scenario in run.json order (sweep order).
    """
    lf = records.lazy() if isinstance(records, pl.DataFrame) else records
    slo = run.slo.as_mapping()
    judged = slo_judgement_exprs(slo)
    met = None if judged is None else judged[0]
    tpot_limited = slo.get("tpot_s") is not None
    d = derive(lf)
    if judged is not None:
        d = d.with_columns(judged[0].alias("slo_met"), judged[1].alias("slo_unjudged"))
    keys = list(GROUP_KEYS)
    final = d.filter(is_final_attempt())
    final = with_cost(final, run)
    groups_q = final.group_by(keys).agg(
        *_aggregations(met is not None, DIST_METRICS, tpot_limited),
        *cost_aggs(ok_mask()),
        *quality_aggs(),
        *stream_aggs(ok_mask()),
        *server_aggs(ok_mask()),
        *cache_aggs(ok_mask()),
    )
    tasks_q = final.group_by([*keys, "task"]).agg(
        *_aggregations(met is not None, TASK_METRICS, tpot_limited),
        *quality_aggs(),
        *cost_aggs(ok_mask()),
    )
    errors_q = (
        final.filter(pl.col("is_measured") & pl.col("error_class").is_not_null())
        .group_by([*keys, "error_class"])
        .agg(pl.len().alias("n"))
    )
    retried_q = d.filter(~is_final_attempt()).group_by(keys).agg(pl.len().alias("n_retried"))
    turns_q, sessions_q = turn_and_session_rows(final, keys, ok_mask())
    groups_df, tasks_df, errors_df, retried_df, turns_df, sessions_df = pl.collect_all(
        [groups_q, tasks_q, errors_q, retried_q, turns_q, sessions_q]
    )
    groups_df = groups_df.join(retried_df, on=keys, how="left", nulls_equal=True)
    groups_df = groups_df.join(_itl_stats(d, keys), on=keys, how="left", nulls_equal=True)

    errors: dict[tuple[str, str, str], dict[str, int]] = {}
    for row in errors_df.sort([*keys, "error_class"]).iter_rows(named=True):
        errors.setdefault(_key(row), {})[row["error_class"]] = int(row["n"])
    by_task: dict[tuple[str, str, str], list[TaskGroup]] = {}
    for row in tasks_df.sort([*keys, "task"]).iter_rows(named=True):
        target = run.target(row["endpoint"], row["model"])
        by_task.setdefault(_key(row), []).append(_task_entry(row, met is not None, target))

    turns: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    for row in turns_df.iter_rows(named=True):
        turns.setdefault(_key(row), []).append(row)
    sessions = {_key(row): row for row in sessions_df.iter_rows(named=True)}

    slo_set = met is not None
    groups = [
        _group_entry(
            row,
            slo_set,
            run,
            errors.get(_key(row), {}),
            tuple(by_task.get(_key(row), ())),
            cache_entry(row, turns.get(_key(row), ()), sessions.get(_key(row))),
        )
        for row in groups_df.iter_rows(named=True)
    ]
    # Models by size, then name (tokrate.analysis.ordering: the order of every table),
    # each model's endpoints by name, then scenarios in sweep order.
    size = {t.key: t.size_b for t in run.targets}
    order = {s.name: i for i, s in enumerate(run.scenarios)}
    groups.sort(
        key=lambda g: (
            model_key(g.model, size.get((g.endpoint, g.model))),
            natural_key(g.endpoint),
            order.get(g.scenario, len(order)),
            natural_key(g.scenario),
        )
    )
    return Summary(run_id=run.run_id, groups=tuple(groups))


def _key(row: Mapping[str, Any]) -> tuple[str, str, str]:
    return (row["endpoint"], row["model"], row["scenario"])


def _counts(row: Mapping[str, Any], retried: int = 0) -> GroupCounts:
    return GroupCounts(
        scheduled=int(row["n_scheduled"] or 0),
        ok=int(row["n_ok"] or 0),
        error=int(row["n_error"] or 0),
        not_sent=int(row["n_not_sent"] or 0),
        cancelled=int(row["n_cancelled"] or 0),
        warmup=int(row["n_warmup"] or 0),
        retried_attempts=retried,
    )


def _distribution(row: Mapping[str, Any], metric: str) -> Distribution:
    return Distribution(**row_to_distribution(row, metric))


def _fraction(row: Mapping[str, Any], slo_set: bool) -> float | None:
    if not slo_set or not row.get("n_judged"):
        return None
    return float(row["n_slo_met"] or 0) / float(row["n_judged"])


def _slo_counts(row: Mapping[str, Any], slo_set: bool) -> SloCounts | None:
    if not slo_set:
        return None
    return SloCounts(
        met=int(row["n_slo_met"] or 0),
        judged=int(row["n_judged"] or 0),
        unjudged=int(row["n_slo_unjudged"] or 0),
        short_answers=int(row["n_short"] or 0),
    )


def _task_entry(row: Mapping[str, Any], slo_set: bool, target: TargetInfo | None) -> TaskGroup:
    return TaskGroup(
        task=str(row["task"]),
        counts=_counts(row),
        ttft_s=_distribution(row, "ttft_s"),
        tpot_s=_distribution(row, "tpot_s"),
        e2e_s=_distribution(row, "e2e_s"),
        decode_tps=_distribution(row, "decode_tps"),
        slo_met_fraction=_fraction(row, slo_set),
        quality=quality_entry(row),
        cost=cost_entry(row, target, None),
        slo=_slo_counts(row, slo_set),
    )


def _per_s(count: float | None, window_s: float | None) -> float | None:
    if count is None or window_s is None or window_s <= 0:
        return None
    return float(count) / window_s


def _group_entry(
    row: Mapping[str, Any],
    slo_set: bool,
    run: RunInfo,
    errors: Mapping[str, int],
    by_task: tuple[TaskGroup, ...],
    cache: CacheUse | None = None,
) -> Group:
    start, end = row["window_start"], row["window_end"]
    window_s = None if start is None or end is None or end <= start else float(end - start)
    counts = _counts(row, int(row.get("n_retried") or 0))
    scenario = run.scenario(row["scenario"])
    concurrency = row["concurrency"]
    if concurrency is None and scenario is not None:
        concurrency = scenario.concurrency
    rate = row["rate_rps"]
    if rate is None and scenario is not None:
        rate = scenario.rate_rps
    out_total = int(row["output_tokens_total"] or 0)
    tps = _per_s(out_total, window_s) if counts.ok else None
    return Group(
        endpoint=row["endpoint"],
        model=row["model"],
        scenario=row["scenario"],
        concurrency=None if concurrency is None else int(concurrency),
        rate_rps=None if rate is None else float(rate),
        counts=counts,
        **{m: _distribution(row, m) for m in DIST_METRICS},
        errors_by_class=dict(errors),
        window_s=window_s,
        aggregate_output_tps=tps,
        requests_per_s=_per_s(counts.ok, window_s),
        goodput_rps=_per_s(row.get("n_slo_met") or 0, window_s) if slo_set else None,
        slo_met_fraction=_fraction(row, slo_set),
        slo=_slo_counts(row, slo_set),
        output_tokens_total=out_total,
        input_tokens_total=int(row["input_tokens_total"] or 0),
        cost=cost_entry(row, run.target(row["endpoint"], row["model"]), tps),
        by_task=by_task,
        stream=stream_entry(row),
        server=server_entry(row),
        quality=quality_entry(row),
        cache=cache,
    )
