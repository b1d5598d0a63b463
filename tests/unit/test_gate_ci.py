"""The nightly gate speaks CI: a slower night that also failed some requests is caught
and named, in the --quiet lines, in comparison.md's detectable changes and in a JUnit
file (tokrate.report.terminal.junit)."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

from helpers.runfolders import make_records, summaries_of, summary_of, write_run

from tokrate.cli import main
from tokrate.finish.baseline import check_baseline
from tokrate.report.terminal.comparison_text import (
    attention_lines,
    detectable_lines,
    render_markdown,
)
from tokrate.report.terminal.junit import junit_xml
from tokrate.report.terminal.metrics_file import metrics_text
from tokrate.runfolder.comparison import read_comparison
from tokrate.runfolder.store import LATEST_GOOD, load_run_info, load_summary


def _stamp(i: int) -> str:
    return f"2026-03-{1 + i:02d}T03:17:00Z"


def test_a_slower_night_that_also_failed_requests_exits_1_and_says_so(tmp_path: Path) -> None:
    """Seven unchanged nights, then one where sim-70b is 1.5x slower and 1% of its
    requests fail with HTTP 500: latency is judged on the ok requests (197 of 200, above
    the 130 a p95 needs), so the night exits 1 naming sim-70b's ttft_p95; the --quiet
    lines, the detectable changes and the JUnit file say the same."""
    nights = {f"n{i:02d}": make_records(f"n{i:02d}", seed=i) for i in range(7)}
    nights["n07"] = make_records("n07", seed=7, slow={"sim-70b": 1.5}, error_every={"sim-70b": 100})
    # Each night with its summary.json, as a finished run has one (without one, every
    # check re-summarised every earlier night from its records).
    summaries = summaries_of(nights)
    for i, (name, recs) in enumerate(nights.items()):
        night = write_run(tmp_path, name, recs, started_at=_stamp(i), summary=summaries[name])
        code = check_baseline(night, LATEST_GOOD, tmp_path)
        assert (code == 1) if name == "n07" else (code in (0, 3))
    c = read_comparison(night)
    assert c is not None
    row = c.result("sim", "sim-70b", "c=4", "ttft_p95")
    assert row is not None and row.verdict == "regressed" and row.n_current == 198
    lines = attention_lines(c)
    assert any(ln.startswith("regressed: sim-70b c=4 ttft_p95 1.") for ln in lines), lines
    assert not any("sim-7b" in ln for ln in lines if ln.startswith("regressed"))
    # Six earlier healthy nights: every series has a noise limit, stated per metric.
    detectable = detectable_lines(c)
    assert any(ln.startswith("on these 7 nights ttft_p95 moves ±") for ln in detectable)
    assert all(ln.endswith("smaller changes cannot be told from noise") for ln in detectable)
    assert "Smallest change this history lets the gate detect" in render_markdown(c)
    suite = ET.fromstring(junit_xml(c)).find("testsuite")
    assert suite is not None
    cases = {(t.get("classname"), t.get("name")): t for t in suite.iter("testcase")}
    assert len(cases) == len(c.results)
    failure = cases[("sim-70b c=4", "ttft_p95")].find("failure")
    assert failure is not None
    assert failure.get("message", "").startswith("sim-70b c=4 ttft_p95: 1.")
    assert failure.get("message", "").endswith(", regressed")
    assert cases[("sim-7b c=4", "ttft_p95")].find("failure") is None
    assert int(suite.get("failures", "0")) == sum(r.verdict == "regressed" for r in c.results)


def test_compare_writes_a_junit_file_with_skipped_inconclusive_rows(tmp_path: Path) -> None:
    """`tokrate compare --junit`: a failure per regressed row, skipped (with the reason)
    for a row with too few samples; names from servers are escaped by the XML writer."""
    base = write_run(tmp_path, "base", make_records("base", seed=1, models=("a<b>&c", "sim-70b")))
    slow = make_records("cur", seed=2, models=("a<b>&c", "sim-70b"), slow={"sim-70b": 1.3})
    cur = write_run(tmp_path, "cur", slow)
    out = tmp_path / "gate.xml"
    assert (
        main(
            [
                "compare",
                str(base),
                str(cur),
                "--junit",
                str(out),
                "-o",
                str(tmp_path / "c.md"),
                "--format",
                "md",
                "--threshold",
                "ttft_p99=+10%",
            ]
        )
        == 1
    )
    suite = ET.parse(out).getroot().find("testsuite")
    assert suite is not None
    cases = list(suite.iter("testcase"))
    assert {t.get("classname") for t in cases} == {"a<b>&c c=4", "sim-70b c=4"}
    failed = {
        t.get("name")
        for t in cases
        if t.find("failure") is not None and t.get("classname") == "sim-70b c=4"
    }
    assert "tpot_p50" in failed
    skipped = [t.find("skipped") for t in cases if t.find("skipped") is not None]
    # ttft_p99 needs 662 samples (LoadGen's minimum at 99%): 200 are too few.
    assert any("too few" in (s.get("message") or "") for s in skipped if s is not None)


def test_the_metrics_file_parses_as_prometheus_text(tmp_path: Path) -> None:
    """--metrics-file's text, read back by prometheus_client's own parser (what
    node_exporter's textfile collector speaks): per target and level the TTFT and TPOT
    quantiles, throughput and error ratio, labelled with the run and its benchmark; a
    label value with quotes and backslashes survives."""
    from prometheus_client.parser import text_string_to_metric_families

    recs = make_records("m", seed=1, models=("sim-7b", 'x"y\\z'), error_every={"sim-7b": 50})
    run = write_run(tmp_path, "m", recs, summary=summary_of("m", recs))
    summary, info = load_summary(run), load_run_info(run)
    assert summary is not None
    text = metrics_text(summary, info)
    families = {f.name: f for f in text_string_to_metric_families(text)}
    assert {
        "tokrate_ttft_seconds",
        "tokrate_tpot_seconds",
        "tokrate_output_tokens_per_second",
        "tokrate_error_ratio",
        "tokrate_run_timestamp_seconds",
    } <= set(families)
    ttft = {
        (s.labels["model"], s.labels["quantile"]): s.value
        for s in families["tokrate_ttft_seconds"].samples
    }
    group = next(g for g in summary.groups if g.model == "sim-7b")
    assert ttft[("sim-7b", "0.95")] == group.ttft_s.p95
    assert ('x"y\\z', "0.5") in ttft
    errors = {s.labels["model"]: s.value for s in families["tokrate_error_ratio"].samples}
    assert errors["sim-7b"] == 4 / 200 and errors['x"y\\z'] == 0.0
    sample = families["tokrate_error_ratio"].samples[0]
    assert sample.labels["run_id"] == "m" and sample.labels["benchmark"] == info.fingerprint
    # No checked answers, no price: those families are absent, not 0.
    assert (
        "tokrate_pass_ratio" not in families
        and "tokrate_cost_usd_per_million_output_tokens" not in families
    )
