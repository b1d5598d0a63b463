"""``tokrate calibrate`` against a real simulator in its own process, and a run's
verdict against the saved floor (run.json ``calibration``, the report's meta line)."""

from __future__ import annotations

import math
from pathlib import Path

import orjson
import pytest
from helpers.hostile_server import hostile_server
from helpers.specs import sim_spec

from tokrate.analysis.calibration import judge_run
from tokrate.cli import main
from tokrate.client.kernel_stamps import kernel_stamps_supported
from tokrate.errors import UsageError
from tokrate.load.run import run_benchmark
from tokrate.runfolder.calibration import (
    Calibration,
    LevelFloor,
    load_calibration,
    save_calibration,
)
from tokrate.runfolder.loaded_run import load_run
from tokrate.spec.types import PromptsSpec, RunSpec

#: What this machine's fast client stamps with (kernel on Linux).
STAMPS = "kernel" if kernel_stamps_supported() is None else "user"


def _level(c: int, loop_p99: float, lag_p99: float = 0.1) -> LevelFloor:
    return LevelFloor(c, 2 * c, 0, 64 * c, STAMPS, 0.05, lag_p99, 12.0, loop_p99, loop_p99 * 2)


def _calibration(*levels: LevelFloor) -> Calibration:
    return Calibration(
        "2026-12-03T07:00:00+00:00", "vm", "0.1.0", "auto", 50.0, 20.0, 32, 1.0, 1.0, levels
    )


def test_calibrate_measures_each_level_and_saves_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "cal.json"
    rc = main(
        ["calibrate", "--concurrency", "4,1", "--output", str(out), "--requests-per-stream", "1"]
    )
    assert rc == 0
    printed = capsys.readouterr().out
    lines = [line for line in printed.splitlines() if not line.startswith("saved: ")]
    assert max(len(line) for line in lines) <= 80
    assert "stamp lag p99 within 1 ms" in printed or "stamp lag p99 over 1 ms" in printed
    assert f"saved: {out}" in printed
    cal = load_calibration(out)
    assert cal is not None
    assert [lv.concurrency for lv in cal.levels] == [1, 4]  # sorted
    want = STAMPS
    for lv in cal.levels:
        assert lv.errors == 0 and lv.requests == lv.concurrency
        assert lv.tokens == 32 * lv.concurrency  # every token judged against the truth log
        assert lv.stamp_source == want
        assert 0 <= lv.lag_mean_ms <= lv.lag_p99_ms and math.isfinite(lv.lag_p99_ms)
        assert lv.cpu_us_per_token > 0 and lv.loop_lag_p99_ms >= 0
        assert f"{lv.concurrency:>7}  {want:<6}" in printed
    assert orjson.loads(out.read_bytes())["version"] == 1


def test_a_level_shared_by_worker_processes_counts_every_token_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--workers 2``: the level's streams split over two processes started together,
    every token of both judged against the one truth log, the count saved and said;
    a file written before the count existed loads as one process."""
    out = tmp_path / "cal.json"
    args = ["--concurrency", "4", "--workers", "2", "--requests-per-stream", "1"]
    assert main(["calibrate", *args, "--output", str(out)]) == 0
    assert "worker processes per level: 2 at 4" in capsys.readouterr().out
    cal = load_calibration(out)
    assert cal is not None
    (level,) = cal.levels
    assert level.workers == 2 and level.errors == 0
    assert level.requests == 4 and level.tokens == 32 * 4
    raw = orjson.loads(out.read_bytes())
    del raw["levels"][0]["workers"]
    out.write_bytes(orjson.dumps(raw))
    old = load_calibration(out)
    assert old is not None and old.levels[0].workers == 1


def test_bad_workers_is_one_line_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["calibrate", "--workers", "0"]) == 2
    assert (
        capsys.readouterr().err.strip().endswith("--workers expects a number >= 1 or auto, got '0'")
    )


def test_bad_concurrency_is_one_line_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["calibrate", "--concurrency", "1,x"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--concurrency" in err
    assert main(["calibrate", "--concurrency", "0"]) == 2


def test_a_broken_calibration_file_is_one_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "cal.json"
    path.write_text("{not json")
    with pytest.raises(UsageError, match="not JSON"):
        load_calibration(path)
    path.write_text('{"version": 1, "levels": [{"concurrency": 1}]}')
    with pytest.raises(UsageError, match="not a tokrate calibration"):
        load_calibration(path)
    assert load_calibration(tmp_path / "missing.json") is None


def test_judge_run_inside_outside_beyond_and_uncalibrated(tmp_path: Path) -> None:
    cal = _calibration(_level(1, 1.0), _level(32, 2.0), _level(256, 6.0))
    path = tmp_path / "cal.json"
    inside = judge_run(cal, path=path, concurrency=20, loop_lag_p99_ms=2.5, send_delay_p99_ms=None)
    assert inside["inside"] is True and inside["level"] == 32 and inside["bound_ms"] == 3.0
    assert "within the c=32 floor" in inside["reason"]
    slow = judge_run(cal, path=path, concurrency=20, loop_lag_p99_ms=1.0, send_delay_p99_ms=9.0)
    assert slow["inside"] is False and slow["reason"].startswith("send delay p99 9.0 ms > 3.0 ms")
    beyond = judge_run(cal, path=path, concurrency=512, loop_lag_p99_ms=0, send_delay_p99_ms=None)
    assert beyond["inside"] is False and "beyond the calibrated 256" in beyond["reason"]
    user = judge_run(
        cal,
        path=path,
        concurrency=1,
        loop_lag_p99_ms=0,
        send_delay_p99_ms=None,
        stamp_source="user",
    )
    if STAMPS == "kernel":  # a floor measured with kernel stamps does not cover user ones
        assert user["inside"] is False and "stamps are user" in user["reason"]
    none = judge_run(None, path=path, concurrency=1, loop_lag_p99_ms=0, send_delay_p99_ms=None)
    assert none["inside"] is None and "tokrate calibrate" in none["reason"]


def _spec(url: str, out: Path, prompts: Path, run_id: str) -> RunSpec:
    return sim_spec(
        url,
        out,
        models=("small-7b",),
        run_id=run_id,
        prompts=PromptsSpec(paths=(str(prompts),)),
        report=True,
        formats=("svg",),
    )


def test_every_run_records_its_verdict_and_the_report_shows_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    prompts = tmp_path / "p.jsonl"
    prompts.write_bytes(orjson.dumps({"id": "q", "task": "chat", "prompt": "hi"}) + b"\n")
    cal_path = tmp_path / "cal.json"
    monkeypatch.setenv("TOKRATE_CALIBRATION", str(cal_path))
    with hostile_server() as server:
        url = server.base_url("ok", tokens=4, itl_ms=1)
        first = run_benchmark(_spec(url, tmp_path / "out", prompts, "before"))
        save_calibration(_calibration(_level(1, 1000.0), _level(4, 1000.0)), cal_path)
        second = run_benchmark(_spec(url, tmp_path / "out", prompts, "after"))
    before = load_run(first.run_dir).info.calibration
    assert before is not None and before["inside"] is None
    after = load_run(second.run_dir).info.calibration
    assert after is not None
    assert after["inside"] is True and after["concurrency"] == 2 and after["level"] == 4
    assert after["path"] == str(cal_path)
    page = (second.run_dir / "report.html").read_text()
    assert "calibration" in page and "within the c=4 floor" in page


def test_the_floor_says_within_and_over_with_the_figure_there() -> None:
    """The last lines read one way: "passes 1 ms: at 1024 streams" (p99 17.8 ms there)
    was read as "meets"."""
    from tokrate.report.calibration import render_calibration

    rising = _calibration(_level(1, 1.0, 0.2), _level(256, 1.0, 0.6), _level(1024, 9.0, 17.8))
    assert render_calibration(rising)[-2:] == [
        "stamp lag p99 within 1 ms up to 256 streams; 17.8 ms at 1024 streams",
        "stamp lag p99 within 5 ms up to 256 streams; 17.8 ms at 1024 streams",
    ]
    low = _calibration(_level(1, 1.0, 0.2), _level(32, 1.0, 2.5))
    assert render_calibration(low)[-2:] == [
        "stamp lag p99 within 1 ms up to 1 stream; 2.5 ms at 32 streams",
        "stamp lag p99 within 5 ms at every level (up to 32 streams)",
    ]
    high = _calibration(_level(1, 1.0, 6.0))
    assert render_calibration(high)[-2:] == [
        "stamp lag p99 over 1 ms from the first level: 6.0 ms at 1 stream",
        "stamp lag p99 over 5 ms from the first level: 6.0 ms at 1 stream",
    ]
