"""tokrate scrapes llama-server's Prometheus ``/metrics`` (``--metrics``) during a run.

One llama-server (the 24 M model, 4 slots, ``-t 1``) loaded by 6 streams: the page is
parsed by prometheus_client's parser into server_metrics.parquet, the known llama.cpp
names map to their roles, and the server's own counts show what the client cannot see
directly: at most 4 requests processing (its slots) while the other streams wait
(``requests_deferred``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import polars as pl
import pytest

from real_servers import harness
from real_servers import models as model_files
from real_servers.paths import ServerMissing, cache_dir, missing
from real_servers.servers import Server, llama_server
from tokrate.analysis.server_roles import role_series
from tokrate.load.run import run_benchmark
from tokrate.report.build import build_report
from tokrate.runfolder.loaded_run import load_run
from tokrate.spec.types import (
    ClientSpec,
    EndpointSpec,
    LoadSpec,
    ModelSpec,
    OutputSpec,
    PromptsSpec,
    RunSpec,
)

pytestmark = pytest.mark.real_server

SIZE = "rand-24m"
SLOTS = 4
STREAMS = 6


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    shape = next(s for s in model_files.GGUF_SHAPES if s.name == SIZE)
    logs = cache_dir() / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    with contextlib.ExitStack() as stack:
        try:
            path = model_files.gguf_model(shape)
            srv = stack.enter_context(
                llama_server(
                    path,
                    SIZE,
                    logs / f"llama-metrics-{SIZE}.log",
                    slots=SLOTS,
                    context=SLOTS * 1024,
                )
            )
        except ServerMissing as exc:
            missing(str(exc))
        yield srv


def test_llama_server_metrics_are_scraped_and_show_its_slots_and_queue(
    server: Server, tmp_path: Path
) -> None:
    root = server.base_url.removesuffix("/v1")
    prompts = harness.distinct_length_prompts(tmp_path / "p.jsonl", 12)
    spec = RunSpec(
        endpoints=(
            EndpointSpec(
                "llama", server.base_url, metrics_url=root + "/metrics", metrics_interval_s=0.1
            ),
        ),
        models=(ModelSpec("llama", SIZE, params_b=0.024, extra_body=(("ignore_eos", True),)),),
        load=LoadSpec(concurrency=(STREAMS,), requests=12),
        prompts=PromptsSpec(paths=(str(prompts),), max_tokens=256),
        client=ClientSpec(unique_prompts=False),
        output=OutputSpec(dir=str(tmp_path), run_id="llama-metrics", formats=("png",)),
    )
    result = run_benchmark(spec)
    assert result.exit_code == 0
    assert not [w for w in result.warnings if "server metrics" in w], result.warnings
    run = load_run(result.run_dir)
    (scrape,) = run.info.server_metrics
    assert scrape.failures == 0 and scrape.scrapes >= 10
    samples = run.server_metrics
    assert samples is not None and samples.height == scrape.samples
    names = set(samples["metric"].unique())
    assert {"llamacpp:requests_processing", "llamacpp:requests_deferred"} <= names, names
    roles = role_series(samples)
    assert roles["model"].is_null().all()  # llama-server labels nothing by model
    first_send = run.records["started_at"].min()
    last_end = (run.records["started_at"] + run.records["e2e_s"]).max()
    during = roles.filter((pl.col("at") > first_send) & (pl.col("at") < last_end))
    running = during.filter(pl.col("role") == "running")["value"]
    waiting = during.filter(pl.col("role") == "waiting")["value"]
    print(f"llama-server /metrics: {sorted(names)}")  # noqa: T201  (what this build exports)
    print(f"running max {running.max()}, waiting max {waiting.max()}")  # noqa: T201
    assert running.max() == SLOTS  # every slot busy, never more
    assert waiting.max() >= 1  # type: ignore[operator]  # the streams beyond the slots wait
    out = build_report([result.run_dir], formats=("png",))
    assert (out / "charts" / "server_load.png").exists()
