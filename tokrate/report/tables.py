"""Report tables as plain, unescaped strings; html.py and text.py escape and render them.

A :class:`Table` is a title, a header row, body rows and an optional note, all plain
text. Numbers are formatted here once so HTML, markdown and the terminal agree.
Unknown values print as "—" (never 0).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import polars as pl

__all__ = [
    "DASH",
    "Table",
    "comparison_table",
    "errors_table",
    "fmt_ms",
    "fmt_num",
    "summary_table",
    "tier_table",
]

DASH: Final = "—"


@dataclass(frozen=True, slots=True)
class Table:
    title: str
    header: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]
    note: str = ""
    numeric: tuple[bool, ...] = field(default=())


def fmt_ms(seconds: float | None) -> str:
    """Seconds as milliseconds with 3 significant digits ("—" when unknown)."""
    if seconds is None:
        return DASH
    ms = seconds * 1000.0
    if ms >= 100:
        return f"{ms:,.0f} ms"
    if ms >= 10:
        return f"{ms:.1f} ms"
    return f"{ms:.2f} ms"


def fmt_num(value: float | None, digits: int = 1, suffix: str = "") -> str:
    """A number with ``digits`` decimals and thousands separators ("—" when unknown)."""
    if value is None:
        return DASH
    return f"{value:,.{digits}f}{suffix}"


def _pct(value: float | None) -> str:
    return DASH if value is None else f"{value * 100:.0f}%"


def _level(g: Mapping[str, Any]) -> str:
    if g.get("concurrency") is not None:
        return f"c={g['concurrency']}"
    if g.get("rate_rps") is not None:
        return f"{g['rate_rps']:g} req/s"
    return str(g.get("scenario"))


def _cost(g: Mapping[str, Any]) -> str:
    cost = g.get("cost")
    if not cost:
        return DASH
    mark = "" if cost.get("source") == "price" else " (GPU-h)"
    return f"${cost['usd_per_m_output']:,.2f}{mark}"


def summary_table(run_key: str, summary: Mapping[str, Any], *, title: str | None = None) -> Table:
    """One row per group (endpoint, model, scenario) of one run's summary."""
    header = (
        "endpoint", "model", "level", "ok", "errors", "TTFT p50", "TTFT p95", "TPOT p50",
        "ITL p99", "E2E p95", "decode tok/s p50", "aggregate tok/s", "req/s", "goodput req/s",
        "SLO met", "$ / M out",
    )  # fmt: skip
    rows = []
    for g in summary.get("groups") or []:
        counts = g["counts"]
        rows.append(
            (
                str(g["endpoint"]), str(g["model"]), _level(g), str(counts["ok"]),
                str(counts["error"] + counts["cancelled"]), fmt_ms(g["ttft_s"]["p50"]),
                fmt_ms(g["ttft_s"]["p95"]), fmt_ms(g["tpot_s"]["p50"]), fmt_ms(g["itl_s"]["p99"]),
                fmt_ms(g["e2e_s"]["p95"]), fmt_num(g["decode_tps"]["p50"]),
                fmt_num(g.get("aggregate_output_tps")), fmt_num(g.get("requests_per_s"), 2),
                fmt_num(g.get("goodput_rps"), 2), _pct(g.get("slo_met_fraction")), _cost(g),
            )
        )  # fmt: skip
    numeric = (False, False, False) + (True,) * (len(header) - 3)
    return Table(title or f"Summary: {run_key}", header, tuple(rows), numeric=numeric)


def comparison_table(
    summaries: Sequence[tuple[str, Mapping[str, Any]]],
    decode_ci: Mapping[tuple[str, str, str, str], tuple[float, float]] | None = None,
) -> Table:
    """Multi-run: one row per (endpoint, model, level), a column per run for decode
    tok/s p50 and TTFT p95 (the two numbers a run-vs-run decision turns on).

    ``decode_ci`` maps (run key, endpoint, model, scenario) to the bootstrap 95% CI of
    the decode median, shown as "p50 [low–high]" so overlap is visible at a glance."""
    decode_ci = decode_ci or {}
    keys: dict[tuple[str, str, str], None] = {}
    values: dict[tuple[str, tuple[str, str, str]], Mapping[str, Any]] = {}
    for run_key, summary in summaries:
        for g in summary.get("groups") or []:
            k = (str(g["endpoint"]), str(g["model"]), _level(g))
            keys.setdefault(k, None)
            values[(run_key, k)] = g
    runs = [k for k, _ in summaries]
    header = (
        "endpoint",
        "model",
        "level",
        *(f"{label} · {r}" for label in ("decode tok/s p50", "TTFT p95") for r in runs),
    )
    rows = []
    for k in keys:
        cells = list(k)
        for metric in ("decode", "ttft"):
            for r in runs:
                g = values.get((r, k))
                if g is None:
                    cells.append(DASH)
                elif metric == "decode":
                    ci = decode_ci.get((r, str(g["endpoint"]), str(g["model"]), str(g["scenario"])))
                    text = fmt_num(g["decode_tps"]["p50"])
                    if ci is not None:
                        text += f" [{ci[0]:,.1f}–{ci[1]:,.1f}]"
                    cells.append(text)
                else:
                    cells.append(fmt_ms(g["ttft_s"]["p95"]))
        rows.append(tuple(cells))
    numeric = (False,) * 3 + (True,) * (len(header) - 3)
    note = (
        "Decode tok/s: median [bootstrap 95% CI of the median]; intervals that do not "
        "overlap mean a real difference."
        if decode_ci
        else ""
    )
    return Table("Runs side by side", header, tuple(rows), note=note, numeric=numeric)


def tier_table(
    rows: Sequence[Mapping[str, Any]], slo_set: bool, slo: Mapping[str, Any], attainment: float
) -> Table:
    """The tier pick table from tokrate.report.data.tier_picks rows."""
    header = ("task", "load", "met every SLO", "fastest (E2E p50)", "cheapest", "smallest")
    body = []
    for r in rows:
        passing = ", ".join(r["passing"]) if r["passing"] else "none"
        body.append(
            (
                str(r["task"]), str(r["level"]), f"{len(r['passing'])}/{r['candidates']}: {passing}",
                r["fastest"] or DASH, r["cheapest"] or DASH, r["smallest"] or DASH,
            )
        )  # fmt: skip
    if slo_set:
        limits = ", ".join(
            f"{k.removesuffix('_s')} ≤ {fmt_ms(v)}" for k, v in slo.items() if v is not None
        )
        note = (
            f"A model meets the bar when ≥ {attainment * 100:.0f}% of its requests met every "
            f"SLO ({limits}); failed requests count as misses."
        )
    else:
        note = (
            "No SLOs were set ([slo] in the config), so every model with ok requests passes; "
            "set ttft_s / tpot_s / e2e_s / itl_p99_s to pick the smallest model that clears the bar."
        )
    return Table("Tier pick", header, tuple(body), note=note)


def errors_table(errors: pl.DataFrame) -> Table:
    """Failed requests by (series, model, error class, HTTP status), with an example
    message (server text, shown escaped by the renderers)."""
    header = ("series", "model", "class", "HTTP", "count", "example message")
    rows = []
    for r in errors.iter_rows(named=True):
        rows.append(
            (
                str(r["series"]), str(r["model"]), str(r["error_class"]),
                DASH if r["http_status"] is None else str(r["http_status"]), str(r["n"]),
                (r["example"] or "")[:300],
            )
        )  # fmt: skip
    numeric = (False, False, False, True, True, False)
    return Table("Errors", header, tuple(rows), numeric=numeric)
