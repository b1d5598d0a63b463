"""The terminal summary table of ``tokrate run`` fits 80 columns without cutting a
number (issue 11), the decision columns (SLO met, goodput, $ / M out) first after the
names as in the report (issue 24): exact text on a fixed-width rich console."""

from __future__ import annotations

import io
from typing import Any

from rich.console import Console

from tokrate.report.terminal.run_tables import render_summary
from tokrate.runfolder.summary import summary_from_json


def _dist(p50: float | None, p95: float | None = None) -> dict[str, Any]:
    return {
        "n": 1,
        "mean": p50,
        "p50": p50,
        "p90": p95,
        "p95": p95,
        "p99": p95,
        "min": p50,
        "max": p95,
    }


def _group(
    model: str,
    c: int | None,
    *,
    endpoint: str = "sim",
    ok: int = 30,
    error: int = 0,
    ttft: tuple[float, float] = (0.0137, 0.0614),
    tpot: float = 0.00861,
    decode: float = 116.1,
    agg: float = 111.4,
    goodput: float | None = None,
    slo_met: float | None = None,
    usd: float | None = None,
    rate: float | None = None,
) -> dict[str, Any]:
    return {
        "endpoint": endpoint,
        "model": model,
        "scenario": f"c={c}" if c else f"rate={rate:g}/s",
        "concurrency": c,
        "rate_rps": rate,
        "counts": {
            "scheduled": ok + error,
            "ok": ok,
            "error": error,
            "cancelled": 0,
            "warmup": 0,
            "retried_attempts": 0,
        },
        "ttft_s": _dist(*ttft),
        "tpot_s": _dist(tpot),
        "decode_tps": _dist(decode),
        "aggregate_output_tps": agg,
        "goodput_rps": goodput,
        "slo_met_fraction": slo_met,
        "cost": None
        if usd is None
        else {
            "source": "price",
            "n": ok,
            "usd_per_1k_requests": usd,
            "usd_per_1k_requests_ci": [usd * 0.98, usd * 1.02],
        },
    }


def _render(summary: dict[str, Any], **kw: Any) -> str:
    buf = io.StringIO()
    typed = summary_from_json({"schema_version": 1, **summary})
    render_summary(typed, Console(file=buf, width=80, color_system=None), **kw)
    text = buf.getvalue()
    assert max(len(line) for line in text.splitlines()) <= 80
    return text


def test_one_endpoint_no_slos_no_errors() -> None:
    summary = {
        "run_id": "20261202-215912-3a9a",
        "groups": [
            _group("sim-1b", 1, ttft=(0.00261, 0.0102), tpot=0.00123, decode=813.8, agg=769.8),
            _group("sim-1b", 8, ttft=(0.0248, 0.025), tpot=0.00126, decode=791.5, agg=4535.8),
            _group("sim-70b", 1, ttft=(0.0725, 0.33), tpot=0.0477, decode=21.0, agg=20.3),
            _group("sim-70b", 8, ttft=(0.69, 0.6904), tpot=0.0479, decode=20.9, agg=127.8),
        ],
    }
    assert _render(summary) == SNAPSHOT_SIMPLE


def test_label_title_slos_errors_and_one_level() -> None:
    summary = {
        "run_id": "x",
        "groups": [
            _group(
                "small-8b",
                16,
                ok=97,
                error=3,
                ttft=(0.412, 1.873),
                tpot=0.0213,
                decode=46.9,
                agg=702.4,
                goodput=12.25,
                slo_met=0.96,
                usd=0.35,
            ),
            _group(
                "large-70b",
                16,
                ok=100,
                ttft=(1.204, 4.551),
                tpot=0.0558,
                decode=17.9,
                agg=284.0,
                goodput=0.5,
                slo_met=0.04,
                usd=12.5,
            ),
        ],
    }
    assert _render(summary, title="tokrate run nightly gpu-a") == SNAPSHOT_SLO


def test_two_endpoints_long_names_and_big_numbers_share_a_target_column() -> None:
    summary = {
        "run_id": "ceiling",
        "groups": [
            _group(
                "meta-llama/Llama-3.1-70B-Instruct",
                64,
                endpoint="openai-gateway",
                ok=1000,
                error=12,
                agg=260884.3,
                goodput=12.34,
                decode=1234.5,
                slo_met=0.12,
            ),
            _group(
                "meta-llama/Llama-3.1-70B-Instruct",
                64,
                endpoint="vllm-prod",
                ok=1000,
                agg=113332.0,
                goodput=101.5,
                rate=None,
                slo_met=1.0,
            ),
        ],
    }
    assert _render(summary) == SNAPSHOT_WIDE


def test_open_loop_levels_read_as_rates() -> None:
    summary = {
        "run_id": "open",
        "groups": [_group("m", None, rate=2.0), _group("m", None, rate=0.5)],
    }
    text = _render(summary)
    assert [line.split()[1] for line in text.splitlines()[4:]] == ["rate=2/s", "rate=0.5/s"]


SNAPSHOT_SIMPLE = (
    "tokrate run 20261202-215912-3a9a · endpoint sim · no errors\n"
    "                     TTFT    TTFT    TPOT   tok/s  tok/s\n"
    "model    load  ok  p50 ms  p95 ms  p50 ms  stream  total\n"
    "────────────────────────────────────────────────────────\n"
    "sim-1b   c=1   30    2.61    10.2    1.23     814    770\n"
    "sim-1b   c=8   30    24.8    25.0    1.26     792  4,536\n"
    "sim-70b  c=1   30    72.5     330    47.7    21.0   20.3\n"
    "sim-70b  c=8   30     690     690    47.9    20.9    128\n"
)
SNAPSHOT_SLO = (
    "tokrate run nightly gpu-a · endpoint sim · c=16\n"
    "           SLO  goodput  $ / 1k              TTFT    TTFT    TPOT   tok/s  tok/s\n"
    "model      met    req/s     req   ok  err  p50 ms  p95 ms  p50 ms  stream  total\n"
    "────────────────────────────────────────────────────────────────────────────────\n"
    "small-8b   96%    12.25   0.350   97    3     412   1,873    21.3    46.9    702\n"
    "large-70b   4%     0.50   12.50  100    0   1,204   4,551    55.8    17.9    284\n"
    "$ / 1k req: what 1,000 of these requests cost at the model's token prices on \n"
    "their own token mix; 95% CI: small-8b $0.343–$0.357, large-70b $12.25–$12.75.\n"
)
SNAPSHOT_WIDE = (
    "tokrate run ceiling · c=64\n"
    "                SLO  goodput               TTFT    TTFT    TPOT   tok/s    tok/s\n"
    "target          met    req/s    ok  err  p50 ms  p95 ms  p50 ms  stream    total\n"
    "────────────────────────────────────────────────────────────────────────────────\n"
    "openai-gatewa   12%    12.34  1000   12    13.7    61.4    8.61   1,234  260,884\n"
    "y/meta-llama/                                                                   \n"
    "Llama-3.1-70B                                                                   \n"
    "-Instruct                                                                       \n"
    "vllm-prod/met  100%   101.50  1000    0    13.7    61.4    8.61     116  113,332\n"
    "a-llama/Llama                                                                   \n"
    "-3.1-70B-Inst                                                                   \n"
    "ruct                                                                            \n"
)
