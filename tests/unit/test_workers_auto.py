"""``--workers auto`` (the default): worker processes from the cores and the streams
the plan holds; ``load.workers`` takes a count or the word "auto", and says which when
it gets neither."""

from __future__ import annotations

from pathlib import Path

import pytest

from tokrate.errors import ConfigError
from tokrate.load.backends.selection import (
    AUTO_STREAMS_PER_WORKER,
    auto_workers,
    workers_for_streams,
)
from tokrate.load.plan import build_plan
from tokrate.spec.config_file import load_spec
from tokrate.spec.types import RunSpec


def spec(**load: object) -> RunSpec:
    return load_spec(None, {f"load.{k}": v for k, v in load.items()})


@pytest.mark.parametrize(
    ("streams", "cores", "workers"),
    [
        (0, 2, 1),
        (1, 2, 1),
        (AUTO_STREAMS_PER_WORKER, 2, 1),
        (AUTO_STREAMS_PER_WORKER + 1, 2, 2),
        (1_000, 2, 2),
        (2_000, 2, 2),  # never more than one per core
        (2_000, 16, 4),
        (1_000, 1, 1),
    ],
)
def test_one_worker_per_512_streams_at_most_one_per_core(
    streams: int, cores: int, workers: int
) -> None:
    assert workers_for_streams(streams, cores) == workers


def test_without_cores_it_takes_this_process_affinity() -> None:
    assert 1 <= workers_for_streams(10**6) <= 1024


def test_the_largest_closed_loop_level_of_all_targets_decides() -> None:
    """Streams are per target: 300 per target over 2 targets is 600 in one scenario."""
    plan = build_plan(spec(concurrency=[4, 300], requests=600), 8, 2)
    assert auto_workers(plan, cores=4) == 2
    assert auto_workers(build_plan(spec(concurrency=[300], requests=300), 8, 1), cores=4) == 1


def test_open_loop_gets_one() -> None:
    plan = build_plan(spec(rates=[500.0], requests=50), 8, 1)
    assert auto_workers(plan, cores=8) == 1


def test_auto_is_the_default_and_a_count_still_loads() -> None:
    assert spec().load.workers == "auto"
    assert spec(workers=3).load.workers == 3
    assert spec(workers="auto").load.workers == "auto"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('"many"', "key 'load.workers': expected positive integer or one of 'auto', got 'many'"),
        ("0", "key 'load.workers': expected positive integer, got 0"),
        ("5000", "key 'load.workers': at most 1024"),
    ],
)
def test_a_bad_workers_value_says_what_it_takes(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "bench.toml"
    path.write_text(f"[load]\nworkers = {text}\n")
    with pytest.raises(ConfigError, match=message):
        load_spec(path)


def test_a_word_only_setting_still_says_its_words(tmp_path: Path) -> None:
    """``Literal[...] | None`` keys (no other type beside the words) are unchanged."""
    path = tmp_path / "bench.toml"
    path.write_text('[[endpoint]]\nname = "a"\nbase_url = "http://x"\napi = "gemini"\n')
    with pytest.raises(ConfigError, match=r"key 'endpoint\[0\]\.api': expected one of 'chat'"):
        load_spec(path)


def test_only_streams_with_a_request_count() -> None:
    """100,000 streams for one request are one stream: one process, not a spawn of
    workers that would each hold tens of thousands of idle slots."""
    plan = build_plan(spec(concurrency=[100_000], requests=1), 8, 1)
    assert auto_workers(plan, cores=2) == 1
    plan = build_plan(spec(concurrency=[2_000], requests=600), 8, 1)
    assert auto_workers(plan, cores=4) == 2
