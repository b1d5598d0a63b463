"""report.html in a real headless Chromium (Debian's /usr/bin/chromium via Playwright).

Checks the page offline as a reader opens it: no console errors, no failed or external
requests, every chart image decodes, tables scroll instead of overflowing at phone
width, and saves screenshots under test-artifacts/. Skipped where Chromium is absent,
unless CI=true (then a missing browser fails).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers.default_run import DefaultRun
from helpers.synthetic import SyntheticTier, default_synthetic_tiers, synthetic_run

from tokrate.cli import main
from tokrate.report.build import build_report
from tokrate.textfmt import DASH

CHROMIUM = Path("/usr/bin/chromium")
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"
ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]

pytestmark = pytest.mark.chromium


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    if not CHROMIUM.exists():
        if os.environ.get("CI") == "true":
            pytest.fail(f"{CHROMIUM} is missing; .ci/run installs Debian's chromium")
        pytest.skip(f"{CHROMIUM} not installed")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=ARGS)
        try:
            yield browser
        finally:
            browser.close()


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tiers = [
        SyntheticTier(
            t.name,
            t.params_b,
            t.active_params_b,
            t.bytes_per_param,
            t.gpus,
            price_out_per_m=0.1 * t.params_b,
        )
        for t in default_synthetic_tiers()
    ]
    run = synthetic_run(
        tmp_path_factory.mktemp("run") / "r",
        run_id="chromium",
        tiers=tiers,
        concurrency=(1, 8),
        requests_per_level=12,
        output_tokens=16,
        error_rate=0.1,
        slo={"ttft_s": 1.0},
    )
    return build_report([run], formats=("png",)) / "report.html"


def _open(browser: Any, report: Path, width: int, height: int) -> tuple[Any, list[str], list[str]]:
    page = browser.new_page(viewport={"width": width, "height": height})
    problems: list[str] = []
    requests: list[str] = []
    page.on(
        "console",
        lambda m: (
            problems.append(f"console {m.type}: {m.text}")
            if m.type in ("error", "warning")
            else None
        ),
    )
    page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
    page.on("requestfailed", lambda r: problems.append(f"failed request: {r.url}"))
    page.on("request", lambda r: requests.append(r.url))
    page.goto(report.as_uri(), wait_until="load")
    return page, problems, requests


def test_report_opens_cleanly_in_chromium(browser: Any, report: Path) -> None:
    page, problems, requests = _open(browser, report, 1280, 900)
    try:
        assert problems == []
        # Only the file itself and its data: images; nothing reaches the network.
        assert [u for u in requests if not u.startswith(("file:", "data:"))] == []
        sizes = page.eval_on_selector_all(
            "img", "imgs => imgs.map(i => [i.complete, i.naturalWidth, i.naturalHeight])"
        )
        assert len(sizes) == 6
        assert all(complete and w > 0 and h > 0 for complete, w, h in sizes)
        assert page.locator("#tier-pick table").count() == 1
        # At 1280 px the page never scrolls sideways: a wide summary table scrolls inside
        # its own box instead of being clipped.
        assert page.evaluate("document.documentElement.scrollWidth - window.innerWidth") <= 1
        boxes = page.eval_on_selector_all(
            "section[id^=summary] .scroll",
            "els => els.map(e => [getComputedStyle(e).overflowX, e.scrollWidth, e.clientWidth])",
        )
        assert boxes and all(ox in ("auto", "scroll") for ox, _sw, _cw in boxes)
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "report-desktop.png"), full_page=True)
    finally:
        page.close()


def test_report_fits_a_phone(browser: Any, report: Path) -> None:
    page, problems, _ = _open(browser, report, 390, 844)
    try:
        assert problems == []
        # The page itself never scrolls sideways; wide tables scroll inside their box.
        overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
        assert overflow <= 1
        _charts_legible(page, 390)
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "report-phone.png"), full_page=False)
    finally:
        page.close()


def test_degenerate_report_opens_cleanly(browser: Any, tmp_path: Path) -> None:
    """Single-read streams (TPOT 0, zero gaps) and a failed target: the report still
    opens with no console error, every chart it kept loads, and it says what it left out."""
    import polars as pl

    run = synthetic_run(
        tmp_path / "r",
        run_id="degenerate",
        concurrency=(1, 4),
        requests_per_level=6,
        error_rate=0.3,
    )
    frame = pl.read_parquet(run / "records.parquet").with_columns(
        pl.lit(0.0).alias("tpot_s"),
        pl.col("ttft_s").alias("e2e_s"),
        pl.col("chunk_offsets_s").list.eval(pl.element() * 0 + pl.element().first()),
    )
    frame.write_parquet(run / "records.parquet")
    (run / "summary.json").unlink(missing_ok=True)
    report = build_report([run], formats=("png",)) / "report.html"
    page, problems, _ = _open(browser, report, 1280, 900)
    try:
        assert problems == []
        sizes = page.eval_on_selector_all(
            "img", "imgs => imgs.map(i => [i.complete, i.naturalWidth])"
        )
        assert sizes and all(complete and w > 0 for complete, w in sizes)
        assert "no measurable decode speed" in page.inner_text("#left-out")
        csp = page.eval_on_selector_all("meta[http-equiv]", "ms => ms.length")
        assert csp == 1  # the Content-Security-Policy is a real <meta> element
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "report-degenerate.png"), full_page=True)
    finally:
        page.close()


def test_buffered_and_server_timed_report_opens_cleanly(browser: Any, tmp_path: Path) -> None:
    """A run where a third of the streams came through a buffering proxy and every
    request carried server timings: the warnings say "stream held back (proxy or server)",
    the tables and the client-vs-server chart render, nothing fails to load."""
    tiers = [SyntheticTier("m-1b", 1.0, 1.0), SyntheticTier("m-7b", 7.0, 7.0)]
    run = synthetic_run(
        tmp_path / "r",
        run_id="buffered",
        tiers=tiers,
        requests_per_level=12,
        buffered=0.35,
        server_timings=True,
        hardware="cpu-ddr5-2ch",
        seed=3,
    )
    report = build_report([run], formats=("png",)) / "report.html"
    page, problems, _ = _open(browser, report, 1280, 900)
    try:
        assert problems == []
        sizes = page.eval_on_selector_all(
            "img", "imgs => imgs.map(i => [i.alt, i.complete, i.naturalWidth])"
        )
        assert all(complete and w > 0 for _alt, complete, w in sizes)
        assert "Client vs server" in {alt for alt, _c, _w in sizes}
        warnings = page.inner_text("#warnings")
        assert "stream held back (proxy or server): ITL/TPOT not meaningful" in warnings
        headings = page.eval_on_selector_all("section h2", "hs => hs.map(h => h.textContent)")
        assert {"Buffered streams", "Client vs server"} <= set(headings)
        assert page.evaluate("document.documentElement.scrollWidth - window.innerWidth") <= 1
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "report-buffered-server.png"), full_page=True)
    finally:
        page.close()


@pytest.fixture(scope="module")
def default_run(shared_default_run: DefaultRun) -> Path:
    """The report of a real default `tokrate run` (the six simulator tiers at c=1 and
    c=8, 30 requests per target and level, the demo SLOs, the bundled sets with their
    checked classification and extraction prompts, no prices): the page issue 24 asks
    about, with every verdict sentence the run really gives. The run is the one
    loopback/test_run_default.py checks (helpers.default_run)."""
    assert shared_default_run.exit_code == 0, shared_default_run.err
    return shared_default_run.run_dir / "report.html"


def _visible_right(page: Any, selector: str) -> float:
    """The right edge of what is visible of ``selector``'s box: the viewport's, or its
    scrolling container's when that is narrower."""
    return float(
        page.evaluate(
            """sel => {
                const el = document.querySelector(sel);
                const box = el.closest('.scroll') || document.documentElement;
                return Math.min(box.getBoundingClientRect().right, window.innerWidth);
            }""",
            selector,
        )
    )


def _header_boxes(page: Any, table: str) -> dict[str, Any]:
    return dict(
        page.eval_on_selector_all(
            f"{table} thead th",
            "ths => ths.map(th => [th.textContent, th.getBoundingClientRect().toJSON()])",
        )
    )


@pytest.mark.slow  # default_run: the real default run in real time (~40 s)
def test_the_decision_shows_without_scrolling_at_1400px(browser: Any, default_run: Path) -> None:
    """At 1400 x 900 a default run's report shows, without scrolling in either
    direction, every verdict sentence (the pick per task, held to the pass-rate bar
    where answers were checked, and the one line on pooling), the tier pick's decision
    columns, and the summary's SLO met / goodput / cost columns (issue 24)."""
    page, problems, _ = _open(browser, default_run, 1400, 900)
    try:
        assert problems == []
        assert page.evaluate("window.scrollY") == 0
        sentences = page.locator("#verdict p")
        texts = sentences.all_inner_texts()
        assert texts[0].startswith("At c=8 each model has as few as 4 requests of a task")
        assert {
            t.split(" pick ")[0].split(" there ")[0].split(" no tier")[0] for t in texts[1:]
        } == {
            "For chat, code and summarization",
            "For classification",
            "For extraction",
        }
        assert "For chat, code and summarization pick sim-1b: meets TTFT ≤ 500 ms" in texts[1]
        for k in range(sentences.count()):
            box = sentences.nth(k).bounding_box()
            assert box is not None and box["y"] >= 0 and box["y"] + box["height"] <= 900, (k, box)
            assert box["x"] + box["width"] <= 1400, (k, box)
        tier = _header_boxes(page, "#tier-pick")
        right = _visible_right(page, "#tier-pick table")
        # No prices in a default run: no cost column, the pick is the smallest.
        assert "$ / 1k req (pick)" not in tier
        for name in ("load", "tasks", "pick", "SLO met (pick)", "also meets"):
            box = tier[name]
            assert box["right"] <= right + 0.5 and box["bottom"] <= 900, (name, box)
        summary = _header_boxes(page, "#summary-0")
        right = _visible_right(page, "#summary-0 table")
        for name in ("model", "level", "SLO met", "goodput req/s", "$ / 1k req (95% CI)"):
            assert summary[name]["right"] <= right + 0.5, (name, summary[name], right)
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "report-1400.png"), full_page=False)
    finally:
        page.close()


@pytest.mark.slow  # default_run (above)
def test_the_routing_table_shows_the_verdicts_routes(browser: Any, default_run: Path) -> None:
    """The default run's report, as a reader sees it: its routing table gives each
    checked task the route routing.json holds and the verdict sentence picks, and the
    task of too few checked answers (extraction: 4, 10 needed) says so instead."""
    routing = json.loads((default_run.parent / "routing.json").read_text())
    page, problems, _ = _open(browser, default_run, 1400, 900)
    try:
        assert problems == []
        verdict = page.locator("#verdict p").all_inner_texts()
        section = page.locator("section", has=page.locator("h2", has_text="Routing table"))
        rows = [
            [" ".join(cell.split()) for cell in row.locator("td").all_inner_texts()]
            for row in section.locator("tbody tr").all()
        ]
        assert (
            {row[0] for row in rows}
            == set(routing["routes"])
            == {
                "classification",
                "extraction",
            }
        )
        for task, _bar, shown, evidence in rows:
            route = routing["routes"][task]
            sentence = next(t for t in verdict if t.startswith(f"For {task} "))
            if route is None:
                assert shown == "no route" and " pick " not in sentence
                assert evidence == routing["unrouted"][task]["reason"]
            else:
                assert shown == route["model"]
                assert sentence.startswith(f"For {task} pick {route['model']}:")
        extraction = next(row for row in rows if row[0] == "extraction")
        assert extraction[2:] == [
            "no route",
            "too few checked answers to decide: as few as 4 per model, and a 90% pass-rate "
            "bar needs at least 10",
        ]
    finally:
        page.close()


# --- the four report kinds as documents (issue 44) ---------------------------------

#: A4 and Letter portrait with the page's 12 mm margins, in CSS px (96 per inch): the
#: width Chromium lays a printed page out at.
PRINT_WIDTHS = {"A4": round((210 - 24) / 25.4 * 96), "Letter": round(8.5 * 96 - 24 / 25.4 * 96)}


@pytest.fixture(scope="module")
def ab_report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`tokrate report A B`: the same tiers twice, B's sim-70b a third slower."""
    root = tmp_path_factory.mktemp("ab")
    a = synthetic_run(root / "a", run_id="night-a", concurrency=(1, 8), requests_per_level=24)
    b = synthetic_run(
        root / "b", run_id="night-b", concurrency=(1, 8), requests_per_level=24, seed=7
    )
    return build_report([a, b], root / "ab", formats=("png",)) / "report.html"


@pytest.fixture(scope="module")
def history_report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`tokrate history` over three nights, the last one's sim-70b 30% slower."""
    from helpers.runfolders import make_records, write_run

    from tokrate.report.history_pages import build_history

    root = tmp_path_factory.mktemp("nights")
    for i in range(3):
        rid = f"night-{i}"
        records = make_records(rid, seed=i, n=30, slow={"sim-70b": 1.3} if i == 2 else None)
        write_run(root, rid, records, started_at=f"2026-01-0{i + 1}T02:00:00Z")
    out, _ = build_history(root, root / "history")
    return out / "history.html"


@pytest.fixture(params=["default", "prices-slos", "a-vs-b", "history"])
def kind(request: pytest.FixtureRequest) -> tuple[str, Path]:
    fixture = {
        "default": "default_run",
        "prices-slos": "report",
        "a-vs-b": "ab_report",
        "history": "history_report",
    }[request.param]
    return request.param, request.getfixturevalue(fixture)


_CELLS_OUTSIDE = """width => [...document.querySelectorAll('th, td')].flatMap(c => {
    const style = getComputedStyle(c);
    if (c.closest('thead') && getComputedStyle(c.closest('thead tr')).position === 'absolute')
        return [];  // a stacked table's header row: each cell carries its label
    const box = c.getBoundingClientRect();
    const out = [];
    if (box.width === 0 || style.display === 'none' || style.visibility === 'hidden')
        out.push(['hidden', c.textContent]);
    if (box.left < -0.5 || box.right > width + 0.5)
        out.push(['outside the page', c.textContent, box.left, box.right]);
    if (c.scrollWidth > c.clientWidth + 1)
        out.push(['text past its cell', c.textContent, c.scrollWidth, c.clientWidth]);
    return out;
})"""


def _charts_legible(page: Any, width: int) -> None:
    """On a narrow screen a chart keeps its drawn size (its text as legible as at
    1400 px) and scrolls sideways inside its own box, which fits the window."""
    charts = page.eval_on_selector_all(
        ".chart",
        """cs => cs.map(c => {
            const img = c.querySelector('img');
            return [c.getBoundingClientRect().right, img.getBoundingClientRect().width,
                    img.naturalWidth, getComputedStyle(c).overflowX];
        })""",
    )
    assert charts
    for right, shown, natural, overflow in charts:
        assert right <= width + 0.5 and overflow in ("auto", "scroll")
        assert shown >= natural - 0.5, (shown, natural)


def test_printing_keeps_every_table_cell_on_the_page(browser: Any, kind: tuple[str, Path]) -> None:
    """Each report kind printed portrait on A4 and Letter: every table cell (text
    included) lies inside the page's width, body text is at least 9 pt, and a heading
    is kept with what follows it. The PDFs are kept under test-artifacts/."""
    name, report = kind
    for paper, width in PRINT_WIDTHS.items():
        page = browser.new_page(viewport={"width": width, "height": 1100})
        try:
            page.goto(report.as_uri(), wait_until="load")
            page.emulate_media(media="print")
            assert page.locator("table").count() > 0
            assert page.evaluate(_CELLS_OUTSIDE, width) == [], (name, paper)
            assert page.evaluate("document.documentElement.scrollWidth") <= width + 1
            sizes = page.eval_on_selector_all(
                "body, p, li, td, th, dd",
                "els => els.map(e => parseFloat(getComputedStyle(e).fontSize))",
            )
            assert min(sizes) >= 12.0 - 0.01  # 9 pt = 12 CSS px
            breaks = page.eval_on_selector_all(
                "h2", "hs => hs.map(h => getComputedStyle(h).breakAfter)"
            )
            assert breaks and set(breaks) == {"avoid"}
            ARTIFACTS.mkdir(exist_ok=True)
            pdf = page.pdf(format=paper, path=str(ARTIFACTS / f"{name}-{paper}.pdf"))
            assert pdf.startswith(b"%PDF")
        finally:
            page.close()


def test_at_800px_every_column_shows(browser: Any, kind: tuple[str, Path]) -> None:
    """At 800 px no column is hidden: tables reflow to stacked rows, every cell inside
    the window under its column's name, and the page never scrolls sideways. Screenshots
    of the top of each kind at 1400 and 800 px go to test-artifacts/."""
    name, report = kind
    page, problems, _ = _open(browser, report, 800, 1000)
    try:
        assert problems == []
        assert page.evaluate(_CELLS_OUTSIDE, 800) == []
        assert page.evaluate("document.documentElement.scrollWidth") <= 801
        labels = page.eval_on_selector_all(
            "tbody td",
            "tds => tds.map(td => [td.dataset.label, getComputedStyle(td, '::before').content])",
        )
        assert labels and all(content == f'"{label}"' for label, content in labels)
        # No machine path anywhere, the collapsed configuration included.
        text = page.text_content("body") or ""
        assert "/tmp/" not in text and str(Path.home()) + "/" not in text
        _charts_legible(page, 800)
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / f"{name}-800.png"))
    finally:
        page.close()
    page, problems, _ = _open(browser, report, 1400, 900)
    try:
        assert problems == []
        assert page.evaluate("document.documentElement.scrollWidth") <= 1401
        page.screenshot(path=str(ARTIFACTS / f"{name}-1400.png"))
    finally:
        page.close()


def test_multi_run_and_history_reports_lead_with_their_verdict(
    browser: Any, ab_report: Path, history_report: Path
) -> None:
    """`tokrate report A B` opens with whether B changed from A, its table first;
    `tokrate history` with the latest run's verdict per series and whether anything
    lies outside its band, its Series table first; no page names an absolute path."""
    for report, opening, first_table in (
        (ab_report, "Did night-b change from night-a? ", "What changed: night-b vs night-a"),
        (history_report, "Latest run night-2: ", "Series"),
    ):
        page, problems, _ = _open(browser, report, 1400, 900)
        try:
            assert problems == []
            verdict = page.locator("#verdict p").all_inner_texts()
            assert verdict[0].startswith(opening), verdict[0]
            first = page.eval_on_selector("body > section h2", "h => h.textContent")
            assert first == first_table
            text = page.text_content("body") or ""
            assert str(report.parent.parent) not in text and "/tmp/" not in text
        finally:
            page.close()
    page, _, _ = _open(browser, history_report, 1400, 900)
    try:
        verdict = page.locator("#verdict p").all_inner_texts()
        # The planted change: sim-70b's last night is outside its band, never "unchanged".
        slow = [v for v in verdict if v.startswith("sim-70b c=4 tpot_p50")]
        assert slow and "regressed" in slow[0]
        per_series = verdict[1:-1]
        # Four series of the last night lie outside their band against its reference
        # (the median of the two nights before it, issue 40).
        assert len(per_series) == 4 and not any("unchanged" in v for v in per_series)
        titles = page.eval_on_selector_all("figure h3", "hs => hs.map(h => h.textContent)")
        assert "TPOT p50 over time" in titles and "error rate over time" not in titles
        assert "error rate over time: left out" in page.inner_text("#left-out")
    finally:
        page.close()


#: Two hosted-like tiers of a stand-in provider (a `tokrate sim` reached by URL): no
#: size in their names, acme-pro the faster and, on short prompts, by far the cheaper
#: although its output price is the higher.
_HOSTED = """include_defaults = false
[[tier]]
name = "acme-mini"
params_b = 8.0
task_accuracy = "classification=0.97"
[[tier]]
name = "acme-pro"
params_b = 3.0
task_accuracy = "classification=0.99"
"""


@pytest.fixture(scope="module")
def hosted_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real run of the README's Job 1 shape against a stand-in provider: priced
    tiers without sizes, the bundled checked classification prompts, lenient SLOs."""
    from tokrate.sim.server import SimConfig, simulator_process

    tmp = tmp_path_factory.mktemp("hosted")
    tiers = tmp / "tiers.toml"
    tiers.write_text(_HOSTED)
    with simulator_process(SimConfig(tiers_file=str(tiers), time_scale=20.0)) as url:
        config = tmp / "pick.toml"
        config.write_text(
            f'[[endpoint]]\nname = "acme"\nbase_url = "{url}"\n'
            '[[model]]\nname = "acme-mini"\nprice_in_per_m = 3.0\nprice_out_per_m = 0.5\n'
            '[[model]]\nname = "acme-pro"\nprice_in_per_m = 0.1\nprice_out_per_m = 0.6\n'
            '[prompts]\nsets = ["classification"]\n'
            "[load]\nconcurrency = [4]\nrequests = 48\n"
            "[slo]\nttft_s = 2.0\ntpot_s = 0.5\n"
        )
        assert main(["run", "-c", str(config), "--output-dir", str(tmp / "out"), "--quiet"]) == 0
    (run_dir,) = list((tmp / "out").iterdir())
    return run_dir / "report.html"


def test_the_verdict_the_cost_column_and_the_quality_chart_agree(
    browser: Any, hosted_run: Path
) -> None:
    """issue 38: what the report opens with can be checked against what it shows under
    it. The verdict's pick and its cost per 1,000 requests (with interval) are the
    summary table's cost cell for that model; its pass rate is the routing table's; the
    quality chart (cost on x: no sizes known) names the same level and draws the same
    n and intervals."""
    import re

    from tokrate.report.contents import build_model, load_inputs

    page, problems, _ = _open(browser, hosted_run, 1400, 900)
    try:
        assert problems == []
        (sentence,) = page.locator("#verdict p").all_inner_texts()
        sentence = " ".join(sentence.split())
        assert "smallest" not in sentence
        m = re.match(r"For classification pick (\S+): .* at (c=\d+) in", sentence)
        assert m is not None, sentence
        pick, level = m.groups()
        cost = re.search(
            r"(\$[\d.,]+) per 1,000 requests \(95% CI (\$[\d.,]+)–(\$[\d.,]+); token prices",
            sentence,
        )
        assert cost is not None, sentence
        value, lo, hi = cost.groups()
        # The summary table: the pick's row at that level shows the same figure and interval.
        section = page.locator("section[id^=summary]")
        header = [" ".join(h.split()) for h in section.locator("thead th").all_inner_texts()]
        rows = [
            [" ".join(c.split()) for c in row.locator("td").all_inner_texts()]
            for row in section.locator("tbody tr").all()
        ]
        col = header.index("$ / 1k req (95% CI)")
        (row,) = [r for r in rows if r[header.index("model")] == pick and r[2] == level]
        assert row[col] == f"{value} [{lo[1:]}–{hi[1:]}]", (row[col], sentence)
        # It is the cheaper one: the other tier's figure is higher, as the sentence says.
        (other,) = [r for r in rows if r[header.index("model")] != pick and r[2] == level]
        ratio = re.search(r"(\d[\d.,]*)x cheaper than (\S+) \((\$[\d.,]+) per 1,000", sentence)
        assert ratio is not None and other[col].startswith(ratio.group(3)), (other, sentence)
        # The pass rate in the sentence is the routing table's, at the same level.
        routing = page.locator("section", has=page.locator("h2", has_text="Routing table"))
        (route,) = [
            [" ".join(c.split()) for c in r.locator("td").all_inner_texts()]
            for r in routing.locator("tbody tr").all()
        ]
        passes = re.search(r"passes (\d+)/(\d+) checked answers \(95% CI (\d+)–(\d+)%\)", sentence)
        assert passes is not None, sentence
        k, n, clo, chi = passes.groups()
        assert route[2] == pick
        assert route[3].startswith(f"passes {k}/{n} = ") and f"(95% CI {clo}–{chi}%)" in route[3]
        # The quality chart: drawn (no size known: against cost), named for that level.
        figure = page.locator("#chart-quality_vs_cost")
        assert figure.count() == 1
        assert f"Answer quality vs cost at {level}" in figure.inner_text()
        size = figure.locator("img").evaluate("i => [i.complete, i.naturalWidth]")
        assert size[0] and size[1] > 0
    finally:
        page.close()
    # What the chart is drawn from: each model's n and interval are the routing table's.
    model = build_model(load_inputs([hosted_run.parent]))
    chart = next(c for c in model.charts if c.name == "quality_vs_cost")
    data: Any = chart.data
    assert data.level == level and data.axis == "cost"
    point = next(p for p in data.points if p.label == pick)
    assert (point.n, round(point.rate * point.n)) == (int(n), int(k))
    assert (round(point.lo * 100), round(point.hi * 100)) == (int(clo), int(chi))


def test_routing_json_names_the_verdicts_pick_at_its_cost(hosted_run: Path) -> None:
    """issue 38: routing.json, summary.json and the verdict agree: the route at the
    verdict's level is the cheapest tier that meets, and each candidate's cost is its
    task's cost in summary.json."""
    import orjson

    from tokrate.runfolder.loaded_run import load_run

    routing = orjson.loads((hosted_run.parent / "routing.json").read_bytes())
    run = load_run(hosted_run.parent)
    assert run.summary is not None
    heaviest = routing["levels"][-1]
    (task,) = heaviest["tasks"]
    assert task["rule"] == "cheapest" and task["route"] is not None
    costs = {
        g.model: next(t.cost for t in g.by_task if t.task == task["task"])
        for g in run.summary.groups
        if g.level == heaviest["level"]
    }
    meets = [c for c in task["candidates"] if c["verdict"] == "meets"]
    for c in task["candidates"]:
        cost = costs[c["model"]]
        assert cost is not None and c["cost"]["usd_per_1k_requests"] == cost.usd_per_1k_requests
    cheapest = min(meets, key=lambda c: c["cost"]["usd_per_1k_requests"])
    assert task["route"]["model"] == cheapest["model"]


def test_the_quality_chart_is_drawn_for_all_and_none_passed(browser: Any, tmp_path: Path) -> None:
    """A model that passed all 19 of its checked answers and one that passed none of
    5: the quality table says 19/19 and 0/5, and the page shows the quality chart,
    decoded, with no "failed to draw" note (the Wilson ends 0.9999999999999999 and
    2.8e-17 gave a negative error bar and lost the chart, issue 44)."""
    import polars as pl

    from tokrate.report.model import not_drawn

    tiers = [SyntheticTier("m-1b", 1.0, 1.0), SyntheticTier("m-7b", 7.0, 7.0)]
    run = synthetic_run(
        tmp_path / "r",
        run_id="checked",
        tiers=tiers,
        requests_per_level=19,
        tasks=("classification",),
    )
    # m-7b passed each of its 19 answers; m-1b had 5 checked (the rest had no expect)
    # and failed them all.
    frame = pl.read_parquet(run / "records.parquet")
    assert frame.filter(pl.col("status") != "ok").height == 0
    nth = pl.int_range(pl.len()).over("model")
    frame = frame.with_columns(
        pl.when(pl.col("model") == "m-7b")
        .then(pl.lit(True))
        .when(nth < 5)
        .then(pl.lit(False))
        .otherwise(None)
        .alias("check_passed")
    )
    frame.write_parquet(run / "records.parquet")
    report = build_report([run], formats=("png",)) / "report.html"
    page, problems, _ = _open(browser, report, 1400, 900)
    try:
        assert problems == []
        section = page.locator("section", has=page.locator("h2", has_text="Answer quality"))
        rows = {
            tuple(row.locator("td").all_inner_texts()[:4])
            for row in section.first.locator("tbody tr").all()
        }
        assert rows == {
            ("m-1b", "classification", "5", "0"),
            ("m-7b", "classification", "19", "19"),
        }
        figure = page.locator("#chart-quality_vs_size")
        assert figure.count() == 1
        title = figure.locator("h3").inner_text()
        assert title.startswith("Answer quality vs size"), title
        chart = figure.locator("img")
        assert chart.evaluate("i => i.complete && i.naturalWidth > 0 && i.naturalHeight > 0")
        body = page.text_content("body") or ""
        assert not_drawn(title) not in body and "failed to draw" not in body
    finally:
        page.close()


def _ran(report: Path) -> list[str]:
    """The models the runs behind ``report`` measured, in the report's order (by active
    size; the simulator's tiers): every run folder beside the report's own folder."""
    from tokrate.physics import DEFAULT_TIER_SIZES
    from tokrate.runfolder.loaded_run import load_run

    runs = [p.parent for p in sorted(report.parent.parent.glob("*/run.json"))]
    assert runs
    models = {str(m) for run in runs for m in load_run(run).records.get_column("model")}
    size = {t.name: t.active_params_b for t in DEFAULT_TIER_SIZES}
    return sorted(models, key=size.__getitem__)


def _pixels_in(png: bytes, color: str) -> int:
    """How many pixels of ``png`` are ``color`` (within 2 of 255 per channel: the
    drawn colour itself, not a blend of it with the background)."""
    import io

    import matplotlib.colors
    import matplotlib.image
    import numpy as np

    rgb = np.asarray(matplotlib.image.imread(io.BytesIO(png), format="png"))[..., :3]
    want = np.asarray(matplotlib.colors.to_rgb(color))
    return int((np.abs(rgb - want) <= 2 / 255).all(axis=-1).sum())


def test_one_colour_per_model_across_every_chart(browser: Any, kind: tuple[str, Path]) -> None:
    """Each report kind's colour key is the report model's assignment: every model the
    runs measured, nothing else, in size order, one colour each. Every chart carries
    what its drawn figure shows per model (read back from the figure the PNG was saved
    from): each model in the key's colour and no other; the PNG the page shows holds
    pixels of exactly that colour; every model is in some chart; and a legend names
    only models that were run, in the key's order (issue 44)."""
    import base64

    from tokrate.physics import DEFAULT_TIER_SIZES

    name, report = kind
    ran = _ran(report)
    page, problems, _ = _open(browser, report, 1400, 900)
    try:
        assert problems == []
        key = page.eval_on_selector_all(
            "#colour-key li", "lis => lis.map(li => [li.dataset.model, li.dataset.color])"
        )
        figures = page.eval_on_selector_all(
            "#charts figure",
            """fs => fs.map(f => [f.id, JSON.parse(f.dataset.colors),
                JSON.parse(f.dataset.legend), f.querySelector('img').src])""",
        )
        swatches = page.eval_on_selector_all(
            "#colour-key .swatch", "ss => ss.map(s => getComputedStyle(s).color)"
        )
    finally:
        page.close()
    assert [m for m, _c in key] == ran, name
    colors = dict(key)
    assert len(set(colors.values())) == len(colors), key
    # The key shows each model in its colour (rgb() as the browser computes it).
    import matplotlib.colors

    assert swatches == [
        "rgb({}, {}, {})".format(*(round(v * 255) for v in matplotlib.colors.to_rgb(c)))
        for _m, c in key
    ]
    universe = {t.name for t in DEFAULT_TIER_SIZES} | set(ran)
    shown: set[str] = set()
    for fig_id, drawn, legend, src in figures:
        for model, used in drawn.items():
            assert used == [colors[model]], (name, fig_id, model, used, colors[model])
            png = base64.b64decode(src.split(",", 1)[1])
            assert _pixels_in(png, colors[model]) > 0, (name, fig_id, model)
        shown |= set(drawn)
        named = [_named_model(entry, universe) for entry in legend]
        in_legend = [m for m in dict.fromkeys(named) if m is not None]
        assert set(in_legend) <= set(ran), (name, fig_id, legend)
        assert in_legend == [m for m in ran if m in in_legend], (name, fig_id, legend)
    assert figures and shown == set(ran), (name, sorted(shown))


def _named_model(text: str, models: set[str]) -> str | None:
    """The model ``text`` names as a whole word (the longest that fits), else None."""
    for model in sorted(models, key=len, reverse=True):
        if re.search(rf"(?<![\w.\-]){re.escape(model)}(?![\w.\-])", text):
            return model
    return None


#: Every table of the page: (section id, title, header, rows of (cell text, prose),
#: notes). A prose cell (a column of _PROSE) restates the verdict in words: it cannot
#: vouch for a measured figure, only for a rule's.
_TABLES = """PROSE => [...document.querySelectorAll('section')].filter(s => s.querySelector(
    ':scope > .scroll > table')).map(s => [s.id, s.querySelector('h2').textContent,
    [...s.querySelectorAll('thead th')].map(th => th.textContent),
    [...s.querySelectorAll('tbody tr')].map(tr => [...tr.querySelectorAll('td')].map(
        td => [td.innerText.split(/\\s+/).join(' ').trim(), PROSE.includes(td.dataset.label)])),
    [...s.querySelectorAll('.note')].map(n => n.textContent)])"""
_PROSE = ("does not meet", "why not", "evidence", "why", "example message")
#: A figure in a sentence: a number, with its thousands commas and decimals as written,
#: a fraction ("27/29") or a range ("78–98%"), a leading "$" and a trailing "%", "x"
#: (a ratio) or "B" (billions of parameters) kept.
_FIGURE = re.compile(
    r"(?<![\w.\-/=])\$?\d[\d,]*(?:\.\d+)?(?:[–/]\$?\d[\d,]*(?:\.\d+)?)?[%xB]?(?![\w\-])"
)
_VERDICTS = "regressed|improved|unchanged|inconclusive|not comparable"
#: A count of the lead table's rows by their verdict: "24 inconclusive", "Inconclusive
#: (24):", and a list's rest: "and 18 more".
_COUNTED = re.compile(rf"\b(\d+) ({_VERDICTS})\b")
_HEADED = re.compile(rf"\b({_VERDICTS}) \((\d+)\): (.*?); and (\d+) more\b", re.IGNORECASE)
#: A rule's or a setting's figure: an SLO limit or a bar ("≤ 500 ms", "< 90%", "a 95%
#: bar"), a minimum sample ("needs at least 20", "fewer than the 20", "a p95 needs
#: 130"): stated in a table's note or cells (prose included), not measured.
_RULE = re.compile(
    r"(?:[≤<≥>]|needs(?: at least)?|fewer than the|at least) (\$?\d[\d,.]*%?)"
    r"|\b(\d+%) (?:pass-rate )?bar\b"
)
#: A ratio to its limit, written beside both figures: "59.6 ms vs ≤ 30 ms (2x the
#: limit)"; the ratio is checked against them (two significant digits).
_TO_LIMIT = re.compile(r"([\d.,]+) (ms|s) vs ≤ ([\d.,]+) \2 \(([\d.]+)x the limit\)")


def _ratio_range(value: str, limit: str) -> tuple[float, float]:
    """The smallest and largest value / limit of figures that print as ``value`` and
    ``limit`` (each within half a unit of its last printed digit)."""

    def bounds(figure: str) -> tuple[float, float]:
        digits = figure.replace(",", "")
        half = 0.5 * 10.0 ** -(len(digits.partition(".")[2]))
        return float(digits) - half, float(digits) + half

    (v_lo, v_hi), (l_lo, l_hi) = bounds(value), bounds(limit)
    return v_lo / l_hi, v_hi / l_lo


#: Advice, not a figure: "send about 150 requests per model and level (--requests 150)".
_ADVICE = re.compile(r"send about \d+ requests per model and level \(--requests \d+\)")
#: What a figure measured per level is written with.
_MEASURED = re.compile(r"\d (?:ms|s|tok/s|req/s)\b|\d(?:\.\d+)?x\b|\$\d|\d+/\d+ |pass rate")
_LEVEL = re.compile(r"\bc=?\d+\b|\b[\d.]+ ?req/s\b|\b[\d.]+/s\b")


def _scrubbed(sentence: str, names: set[str]) -> str:
    """``sentence`` without what only looks like a figure: model and run names
    (sim-8x7b, night-1), level names (c=8), metric names (p95, ttft_p95) and the
    interval's confidence ("95% CI")."""
    for name in sorted(names, key=len, reverse=True):
        sentence = re.sub(rf"(?<![\w.\-]){re.escape(name)}(?![\w.\-])", " ", sentence)
    sentence = re.sub(r"\b\d+% CI\b", " ", sentence)
    sentence = re.sub(r"\bc=?\d+\b", " ", sentence)
    return re.sub(r"\b\w*p\d+\b", " ", sentence)


def _verdict_of(cell: str) -> str:
    """A verdict cell's verdict: "outside its band, inconclusive (vs ...)" is
    inconclusive, "not_comparable" not comparable."""
    words = cell.split(" (")[0].replace("_", " ")
    return words.split(", ")[-1]


def _items(listed: str) -> int:
    """How many items a "; "-separated list holds (a ";" inside brackets is not one)."""
    depth, count = 0, 1
    for char in listed:
        depth += {"(": 1, ")": -1}.get(char, 0)
        count += char == ";" and depth == 0
    return count


def _in(figure: str, texts: list[str]) -> bool:
    """Whether ``figure`` is written, whole, in one of ``texts``."""
    token = re.compile(rf"(?<![\w.,$]){re.escape(figure)}(?![\w]|[.,]\d)")
    return any(token.search(t) for t in texts)


def test_every_number_in_a_sentence_is_in_a_table(browser: Any, kind: tuple[str, Path]) -> None:
    """Each report kind's verdict sentences quote only figures a reader finds in a
    value cell of a table of the same page, as written ("59.6 ms" is the cell "59.6
    ms", "27/29" and "78–98%" as the cells show them). The documented equivalences: a
    count of verdicts ("24 inconclusive", "of 60 ... rows", "10 series", "4 outside
    their band", "and 18 more") is the count of the lead table's rows with that
    verdict; a rule's figure (a limit, a bar, a minimum sample) is stated in a table's
    note; a ratio to a limit is the two figures beside it divided. Every sentence that
    quotes a measured figure names its load level (issue 44)."""
    name, report = kind
    page, problems, _ = _open(browser, report, 1400, 900)
    try:
        assert problems == []
        sentences = [" ".join(s.split()) for s in page.locator("#verdict p").all_inner_texts()]
        tables = page.evaluate(_TABLES, list(_PROSE))
    finally:
        page.close()
    assert sentences and tables, name
    every = [(text, prose) for *_h, rows, _n in tables for row in rows for text, prose in row]
    cells = [text for text, prose in every if not prose]
    prose = [text for text, prose in every if prose]
    notes = [" ".join(n.split()) for *_head, _rows, ns in tables for n in ns]
    tables = [
        (i, t, h, [[text for text, _p in row] for row in rows], n) for i, t, h, rows, n in tables
    ]
    names = set(_ran(report)) | {p.parent.name for p in report.parent.parent.glob("*/run.json")}
    lead_id, _title, header, rows, _notes = tables[0]
    column = next(
        (i for i, h in enumerate(header) if h in ("verdict", "latest vs its reference")), None
    )
    verdicts = [_verdict_of(r[column]) for r in rows] if column is not None else []
    outside = header.index("outside the band") if "outside the band" in header else None
    checked = 0
    for sentence in sentences:
        text = _ADVICE.sub(" ", _scrubbed(sentence, names))
        for n in re.findall(r"\bof (\d+) target, level and metric rows\b", text) + re.findall(
            r"\b(\d+) series\b", text
        ):
            assert int(n) == len(rows), (name, sentence)
        for n in re.findall(r"\b(\d+) judged against\b", text):
            assert int(n) == sum(v != "not judged" for v in verdicts), (name, sentence)
        for n in re.findall(r"\b(\d+) (?:outside their band|point\(s\) lie outside)\b", text):
            assert outside is not None, (name, sentence)
            marked = [m for r in rows if r[outside] != DASH for m in r[outside].split("; ")]
            assert int(n) == len(marked), (name, sentence, marked)
        for verdict, n, listed, more in _HEADED.findall(text):
            assert int(n) == verdicts.count(verdict.lower()), (name, sentence)
            assert _items(listed) + int(more) == int(n), (name, sentence)
        for n, verdict in _COUNTED.findall(text):
            assert int(n) == verdicts.count(verdict), (name, lead_id, verdict, sentence)
        for value, _unit, limit, ratio in _TO_LIMIT.findall(text):
            # The ratio is of the unrounded figures: it must be what some value and limit
            # that print as these give (58.5 / 30 may be 1.95 or 1.951, so 1.9 or 2).
            lo, hi = _ratio_range(value, limit)
            assert float(f"{lo:.2g}") <= float(ratio) <= float(f"{hi:.2g}"), (
                name,
                value,
                limit,
                ratio,
            )
            assert _in(value, cells), (name, value, sentence)
        for figure in (a or b for a, b in _RULE.findall(text)):
            assert _in(figure, notes + cells + prose), (name, figure, sentence)
        # A list's counts are checked; its items' own figures are checked below.
        text = _HEADED.sub(lambda m: f" {m.group(3)} ", text)
        for pattern in (
            _COUNTED,
            _TO_LIMIT,
            _RULE,
            re.compile(r"\bof \d+ target, level and metric rows\b"),
            re.compile(r"\b\d+ (?:series|judged against|outside their band)\b"),
            re.compile(r"\b\d+ point\(s\) lie outside\b"),
        ):
            text = pattern.sub(" ", text)
        for figure in _FIGURE.findall(text):
            assert _in(figure, cells), (name, figure, sentence)
            checked += 1
        if _MEASURED.search(sentence):
            assert _LEVEL.search(sentence), (name, sentence)
    assert checked, (name, sentences)
