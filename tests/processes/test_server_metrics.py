"""Server metrics: the simulator's /metrics, the scrape during a run, the report overlay.

Everything over loopback against the real simulator (its own process where the test
reads timing-dependent load) and real httpx; the bad-URL run goes through the CLI in a
subprocess, as a user meets it.
"""

from __future__ import annotations

import http.server
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import polars as pl
import pytest
from helpers.specs import sim_spec, synthetic_prompts

from tokrate.analysis.server_roles import ROLE_METRICS, role_series
from tokrate.errors import ConfigError
from tokrate.load.run import run_benchmark
from tokrate.load.scrape import parse_metrics_text
from tokrate.report.build import build_report
from tokrate.runfolder.loaded_run import load_run
from tokrate.runfolder.server_metrics import SERVER_METRICS_FILE, server_metrics_schema
from tokrate.runfolder.server_samples import SERVER_SAMPLES_FILE
from tokrate.sim.model import default_tiers
from tokrate.sim.server import running_simulator
from tokrate.spec.config_file import load_spec
from tokrate.spec.types import EndpointSpec, RunSpec

ROOT = Path(__file__).resolve().parents[2]


def _root(base_url: str) -> str:
    return base_url.removesuffix("/v1")


def _frame(text: str, endpoint: str = "e") -> pl.DataFrame:
    rows = parse_metrics_text(text)
    return pl.DataFrame(
        {
            "t_s": [0.0] * len(rows),
            "at": [100.0] * len(rows),
            "endpoint": [endpoint] * len(rows),
            "metric": [r[0] for r in rows],
            "labels": [r[1] for r in rows],
            "value": [r[2] for r in rows],
        },
        schema=server_metrics_schema(),
    )


# --- the simulator's page ---------------------------------------------------------------


def test_simulator_serves_its_queue_per_tier_in_prometheus_text() -> None:
    with running_simulator() as url:
        page = httpx.get(_root(url) + "/metrics")
        wrong = httpx.post(_root(url) + "/metrics")
    assert page.status_code == 200
    assert page.headers["content-type"].startswith("text/plain; version=0.0.4")
    roles = role_series(_frame(page.text))
    tiers = {t.name for t in default_tiers()}
    for role in ("running", "waiting", "kv_cache"):
        assert set(roles.filter(pl.col("role") == role)["model"]) == tiers
    assert (roles["value"] == 0).all()  # idle
    assert wrong.status_code == 405 and "GET" in wrong.json()["error"]["message"]


# --- the role mapping -------------------------------------------------------------------


def test_roles_of_each_engine_and_label_handling() -> None:
    vllm = """# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 3
vllm:num_requests_running{engine="1",model_name="m"} 2
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="m"} 7
# TYPE vllm:gpu_cache_usage_perc gauge
vllm:gpu_cache_usage_perc{engine="0",model_name="m"} 0.9
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.25
vllm:kv_cache_usage_perc{engine="1",model_name="m"} 0.75
# TYPE vllm:iteration_tokens_total histogram
vllm:iteration_tokens_total_bucket{le="1.0",model_name="m"} 3.0
vllm:iteration_tokens_total_count{model_name="m"} 3.0
vllm:iteration_tokens_total_sum{model_name="m"} 3.0
"""
    llama = """# HELP llamacpp:requests_processing Number of requests processing.
# TYPE llamacpp:requests_processing gauge
llamacpp:requests_processing 4
# TYPE llamacpp:requests_deferred gauge
llamacpp:requests_deferred 1
# TYPE llamacpp:kv_cache_usage_ratio gauge
llamacpp:kv_cache_usage_ratio 0.5
"""
    frame = pl.concat([_frame(vllm, "vllm"), _frame(llama, "llama")])
    assert frame.height == 6 + 3 + 3  # every sample is kept, histogram parts too
    got = {
        (r["endpoint"], r["role"]): (r["model"], r["metric"], r["value"])
        for r in role_series(frame).iter_rows(named=True)
    }
    assert got == {
        # engines summed for request counts ...
        ("vllm", "running"): ("m", "vllm:num_requests_running", 5.0),
        ("vllm", "waiting"): ("m", "vllm:num_requests_waiting", 7.0),
        # ... averaged for KV use; the V1 name wins over the old one
        ("vllm", "kv_cache"): ("m", "vllm:kv_cache_usage_perc", 0.5),
        ("llama", "running"): (None, "llamacpp:requests_processing", 4.0),
        ("llama", "waiting"): (None, "llamacpp:requests_deferred", 1.0),
        ("llama", "kv_cache"): (None, "llamacpp:kv_cache_usage_ratio", 0.5),
    }  # fmt: skip
    assert {m for names in ROLE_METRICS.values() for m in names} >= {
        "sglang:num_running_reqs",
        "sglang:num_queue_reqs",
        "sglang:token_usage",
        "tgi_batch_current_size",
        "tgi_queue_size",
    }


@pytest.mark.parametrize("text", ["<html><body>502</body></html>", "", '{"a": 1}'])
def test_text_that_is_not_prometheus_is_refused(text: str) -> None:
    with pytest.raises(ValueError):
        parse_metrics_text(text)


# --- the config -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("metrics_url", "ftp://127.0.0.1/metrics", "metrics_url': expected an http:// or https:// URL"),
        ("metrics_url", "", "metrics_url': expected non-empty string"),
        ("metrics_interval_s", 0.01, "metrics_interval_s': at least 0.1 s"),
        ("metrics_interval_s", 0, "metrics_interval_s': expected positive number"),
    ],
)  # fmt: skip
def test_bad_metrics_settings_are_one_line_config_errors(
    tmp_path: Path, field: str, value: object, message: str
) -> None:
    config = tmp_path / "bench.toml"
    shown = f'"{value}"' if isinstance(value, str) else str(value)
    config.write_text(
        '[[endpoint]]\nname = "e"\nbase_url = "http://127.0.0.1:1/v1"\n'
        f'{field} = {shown}\n[[model]]\nname = "m"\n'
    )
    with pytest.raises(ConfigError, match=message) as err:
        load_spec(config)
    assert "\n" not in str(err.value) and "endpoint[0]" in str(err.value)


# --- a run against the simulator --------------------------------------------------------


def _spec(endpoint: EndpointSpec, out: Path, model: str, **load: Any) -> RunSpec:
    return sim_spec(
        endpoint,
        out,
        models=(model,),
        run_id="scraped",
        prompts=synthetic_prompts(96, count=12, input_tokens=256),
        report=True,
        **{"concurrency": (4,), "requests": 12, **load},
    )


@pytest.fixture(scope="module")
def scraped_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    from tokrate.sim.server import SimConfig, simulator_process

    out = tmp_path_factory.mktemp("runs")
    with simulator_process(SimConfig(time_scale=4.0)) as url:
        ep = EndpointSpec("sim", url, metrics_url=_root(url) + "/metrics", metrics_interval_s=0.1)
        result = run_benchmark(_spec(ep, out, "sim-70b"))
    assert result.exit_code == 0
    assert all("event-loop lag" in w for w in result.warnings), result.warnings
    yield result.run_dir


def test_a_run_stores_every_sample_and_running_requests_rise_under_load(scraped_run: Path) -> None:
    run = load_run(scraped_run)
    (scrape,) = run.info.server_metrics
    assert scrape.endpoint == "sim" and scrape.interval_s == 0.1 and scrape.failures == 0
    assert scrape.scrapes >= 5
    samples = run.server_metrics
    assert samples is not None and (scraped_run / SERVER_METRICS_FILE).exists()
    # The measuring process's lean samples file became the parquet in the child.
    assert not (scraped_run / SERVER_SAMPLES_FILE).exists()
    assert samples.schema == pl.Schema(server_metrics_schema())
    assert samples.height == scrape.samples == scrape.scrapes * 3 * len(default_tiers())
    assert samples["t_s"].is_sorted() and (samples["t_s"] >= 0).all()
    # The wall clock lines up with the records': samples span the requests' window.
    first_send = run.records["started_at"].min()
    last_end = (run.records["started_at"] + run.records["e2e_s"]).max()
    assert samples["at"].min() <= first_send + 0.5 and samples["at"].max() >= last_end - 0.5  # type: ignore[operator]
    roles = role_series(samples).filter(pl.col("model") == "sim-70b")
    running = roles.filter(pl.col("role") == "running")
    during = running.filter((pl.col("at") > first_send) & (pl.col("at") < last_end))
    # Idle before (the simulator's idle page is all zeros), 2+ of the 4 streams in the
    # batch while the load runs.
    assert during.height >= 3 and during["value"].max() >= 2  # type: ignore[operator]
    others = role_series(samples).filter(
        (pl.col("model") != "sim-70b") & (pl.col("role") == "running")
    )
    assert (others["value"] == 0).all()  # nothing was sent to them
    kv = roles.filter(pl.col("role") == "kv_cache")["value"]
    assert 0 < kv.max() <= 1  # type: ignore[operator]


def test_the_report_draws_the_server_load_beside_ttft(scraped_run: Path) -> None:
    out = build_report([scraped_run], formats=("png",))
    assert (out / "charts" / "server_load.png").stat().st_size > 10_000
    md = (out / "summary.md").read_text()
    assert "**server metrics**: sim:" in md and "every 0.1 s" in md
    assert "server load:" not in md  # no note: the chart is there
    html = (out / "report.html").read_text()
    assert "Server load" in html and "requests waiting in its queue" in html


def test_a_run_without_metrics_says_so_in_the_report(tmp_path: Path, sim_url: str) -> None:
    result = run_benchmark(_spec(EndpointSpec("sim", sim_url), tmp_path, "sim-7b", requests=4))
    assert not (result.run_dir / SERVER_METRICS_FILE).exists()
    run = load_run(result.run_dir)
    assert run.server_metrics is None and run.info.server_metrics == ()
    md = (result.run_dir / "summary.md").read_text()
    assert "server load: no server metrics in these runs (set" in md


@pytest.fixture
def garbage_server() -> Iterator[str]:
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = b"<html><body>not metrics</body></html>"
            self.send_response(200)
            self.send_header("content-type", "text/html")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/metrics"
    finally:
        server.shutdown()
        server.server_close()


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_failing_scrapes_warn_once_each_and_the_run_is_fine(
    tmp_path: Path, start_sim_process: Callable[..., str], garbage_server: str
) -> None:
    url = start_sim_process()
    bad = {
        "e404": _root(url) + "/no-such-page",
        "refused": f"http://127.0.0.1:{_closed_port()}/metrics",
        "garbage": garbage_server,
    }
    config = tmp_path / "bench.toml"
    config.write_text(
        "".join(
            f'[[endpoint]]\nname = "{name}"\nbase_url = "{url}"\nmetrics_url = "{metrics}"\n'
            f"metrics_interval_s = 0.1\n"
            for name, metrics in bad.items()
        )
        + "".join(f'[[model]]\nendpoint = "{name}"\nname = "sim-7b"\n' for name in bad)
        + "[load]\nrequests = 6\nconcurrency = [2]\n[prompts]\nmax_tokens = 32\n"
        + f'[output]\ndir = "{tmp_path / "runs"}"\nrun_id = "bad"\nreport = true\n'
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [sys.executable, "-m", "tokrate", "run", "-c", str(config)],
        capture_output=True,
        text=True,
        env=env,
        timeout=240,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout
    lines = [line for line in proc.stderr.splitlines() if "server metrics of endpoint" in line]
    assert len(lines) == 3, proc.stderr  # one per endpoint, never one per failed scrape
    first = {"e404": "HTTP 404", "refused": "ConnectError", "garbage": "invalid metric name"}
    for name, why in first.items():
        (line,) = [x for x in lines if f"endpoint {name}:" in x]
        assert why in line and bad[name] in line and "the benchmark itself is unaffected" in line
    run = load_run(tmp_path / "runs" / "bad")
    assert run.info.counts is not None and run.info.counts.ok == 18
    for scrape in run.info.server_metrics:
        assert scrape.failures == scrape.scrapes > 0 and scrape.samples == 0
    assert run.server_metrics is not None and run.server_metrics.height == 0
    md = (tmp_path / "runs" / "bad" / "summary.md").read_text()
    assert "server load: no server metrics in these runs" in md


def test_cli_metrics_url_scrapes_a_base_url_run(tmp_path: Path, sim_url: str) -> None:
    from tokrate.cli import main

    argv = ["run", "--base-url", sim_url, "-m", "sim-7b", "--requests", "4", "--max-tokens", "8"]
    argv += ["--metrics-url", _root(sim_url) + "/metrics", "--output-dir", str(tmp_path)]
    assert main([*argv, "--run-id", "cli", "--no-report", "--quiet"]) == 0
    (scrape,) = load_run(tmp_path / "cli").info.server_metrics
    assert (
        scrape.endpoint == _root(sim_url).removeprefix("http://")
        and scrape.interval_s == 1.0
        and scrape.scrapes >= 1
    )
    assert main(["run", "--metrics-url", "http://127.0.0.1:1/metrics"]) == 2  # needs --base-url


@pytest.mark.chromium
def test_the_server_load_chart_loads_in_chromium(scraped_run: Path, tmp_path: Path) -> None:
    chromium = Path("/usr/bin/chromium")
    if not chromium.exists():
        if os.environ.get("CI") == "true":
            pytest.fail(f"{chromium} is missing; .ci/run installs Debian's chromium")
        pytest.skip(f"{chromium} not installed")
    from playwright.sync_api import sync_playwright

    report = build_report([scraped_run], tmp_path / "report", formats=("png",)) / "report.html"
    problems: list[str] = []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(chromium), args=["--no-sandbox"])
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda e: problems.append(str(e)))
            page.goto(report.as_uri(), wait_until="load")
            figure = page.locator("#chart-server_load")
            assert figure.locator("h3").inner_text() == "Server load"
            complete, width, height = figure.locator("img").evaluate(
                "i => [i.complete, i.naturalWidth, i.naturalHeight]"
            )
            # Four panels stacked: TTFT, running, waiting, KV-cache use.
            assert complete and width > 1000 and height > width * 0.8
            # Right after the throughput timeline, so both read on one clock.
            ids = page.eval_on_selector_all("figure", "fs => fs.map(f => f.id)")
            assert ids.index("chart-server_load") == ids.index("chart-timeline") + 1
        finally:
            browser.close()
    assert problems == []


def test_an_unlabelled_server_is_drawn_as_its_one_model(scraped_run: Path) -> None:
    from tokrate.report.timeline_data import server_points

    run = load_run(scraped_run)
    page = "# TYPE llamacpp:requests_processing gauge\nllamacpp:requests_processing 3\n"
    samples = _frame(page, "sim").with_columns(
        pl.lit(run.records["started_at"].min() + 1.0).alias("at")
    )
    (row,) = server_points([("k", run.records, samples)]).iter_rows(named=True)
    assert row["series"] == "sim" and row["model"] == "sim-70b" and row["value"] == 3.0
    assert abs(row["t_s"] - 1.0) < 1e-6  # on the records' clock: seconds since the first send
