"""The process that measures a run never imports the analysis stack (polars, numpy,
matplotlib): parquet, summary, report and the baseline check come from one child
(python -m tokrate.finish), a capacity search's probes are judged by another
(python -m tokrate.finish.probe_judge), the tables are drawn here from what they
wrote, and the results are the same as in one process. Every tokrate module the run
loads is one the lean-wall contracts in pyproject.toml check (so lint-imports keeps
the wall without a run)."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import orjson

from tokrate.runfolder.loaded_run import load_run
from tokrate.sim.model import Tier
from tokrate.sim.server import SimConfig, simulator_process

_PROBE = """
import sys
from tokrate.cli import main
code = main(sys.argv[1:])
heavy = sorted(m for m in ("polars", "numpy", "matplotlib") if m in sys.modules)
print("HEAVY=" + ",".join(heavy), file=sys.stderr)
ours = sorted(m for m in sys.modules if m == "tokrate" or m.startswith("tokrate."))
print("TOKRATE=" + ",".join(ours), file=sys.stderr)
raise SystemExit(code)
"""

ROOT = Path(__file__).resolve().parents[2]


def _lean_wall() -> tuple[set[str], set[str]]:
    """(folders, modules) the lean-wall contracts of pyproject.toml name."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    folders: set[str] = set()
    modules: set[str] = set()
    for contract in config["tool"]["importlinter"]["contracts"]:
        if contract["name"].startswith("lean wall"):
            assert contract["forbidden_modules"] == ["polars", "numpy", "matplotlib"]
            target = modules if contract.get("as_packages") is False else folders
            target.update(contract["source_modules"])
    return folders, modules


def _outside_the_wall(stderr: str) -> list[str]:
    """The tokrate modules a run loaded that no lean-wall contract checks."""
    (line,) = [x for x in stderr.splitlines() if x.startswith("TOKRATE=")]
    folders, modules = _lean_wall()
    return [
        m
        for m in line.removeprefix("TOKRATE=").split(",")
        if m not in modules and not any(m == f or m.startswith(f + ".") for f in folders)
    ]


TIER = Tier(
    name="fixed",
    params_b=7.0,
    active_params_b=7.0,
    fixed_ttft_ms=5.0,
    fixed_itl_ms=1.0,
    output_tokens_min=8,
    output_tokens_max=8,
)


def test_a_run_never_loads_polars_numpy_or_matplotlib(tmp_path: Path) -> None:
    with simulator_process(SimConfig(tiers=(TIER,), time_scale=1.0)) as base:
        done = subprocess.run(
            [
                sys.executable,
                "-c",
                _PROBE,
                "run",
                "--base-url",
                base,
                "-m",
                "fixed",
                "--concurrency",
                "4",
                "--requests",
                "8",
                "--output-dir",
                str(tmp_path),
                "--run-id",
                "lean",
                "--model-check",
                "off",
            ],
            capture_output=True,
            text=True,
            timeout=300,
        )
    assert done.returncode == 0, done.stderr
    assert "HEAVY=\n" in done.stderr, done.stderr
    assert _outside_the_wall(done.stderr) == []
    run_dir = tmp_path / "lean"
    # Everything the children wrote is there, and the table was printed.
    assert (run_dir / "records.parquet").is_file() and (run_dir / "report.html").is_file()
    loaded = load_run(run_dir)
    assert loaded.info.status == "complete" and loaded.records.height == 8
    assert loaded.summary is not None and loaded.info.calibration is not None
    assert "fixed" in done.stdout and "TTFT" in done.stdout
    assert max(len(line) for line in done.stdout.splitlines()) <= 80
    assert orjson.loads((run_dir / "summary.json").read_bytes())["groups"]


def _run(base: str, out: Path, run_id: str, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-c",
            _PROBE,
            "run",
            "--base-url",
            base,
            "-m",
            "fixed",
            "--concurrency",
            "4",
            "--requests",
            "64",
            "--output-dir",
            str(out),
            "--run-id",
            run_id,
            "--model-check",
            "off",
            "--no-report",
            *extra,
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )


#: Thresholds no busy machine crosses between two runs of one fixed-latency tier (a
#: 1 ms ITL on 2 shared cores moved tpot_p50 by +7% between back-to-back runs): this
#: test is about where the verdict is computed, not about the verdict.
_THRESHOLDS = ("ttft_p95=+900%", "tpot_p50=+900%", "e2e_p95=+900%", "decode_tps_p50=-90%")
_LOOSE = tuple(arg for text in _THRESHOLDS for arg in ("--threshold", text))


def test_a_baseline_check_runs_in_the_child_with_the_same_verdict_and_table(
    tmp_path: Path,
) -> None:
    with simulator_process(SimConfig(tiers=(TIER,), time_scale=1.0)) as base:
        first = _run(base, tmp_path, "a", "--baseline", "latest-good")
        second = _run(base, tmp_path, "b", "--baseline", "latest-good", *_LOOSE)
        bad = _run(
            base,
            tmp_path,
            "c",
            "--baseline",
            str(tmp_path / "a"),
            "--threshold",
            "ttft_p95=+900%",
            "--thresholds-from-history",
            str(tmp_path / "nowhere"),
        )
    assert first.returncode == 0, first.stderr
    assert "HEAVY=\n" in first.stderr and "no baseline run yet" in first.stderr
    assert _outside_the_wall(second.stderr) == []
    # 64 requests: the p95 rows are inconclusive (a p95 needs 200), the rest unchanged.
    assert second.returncode == 3, second.stderr
    assert "HEAVY=\n" in second.stderr, second.stderr
    # The verdict line and table are what the comparison in this process gives.
    from tokrate.analysis.compare import compare_runs
    from tokrate.report.terminal.comparison_text import baseline_verdict_line

    loose = dict(text.split("=") for text in _THRESHOLDS)
    comparison = compare_runs(tmp_path / "a", tmp_path / "b", loose)
    assert baseline_verdict_line("latest-good", comparison) in second.stderr
    assert second.returncode == comparison.exit_code
    assert "tokrate compare:" in second.stdout and "ttft_p95" in second.stdout
    assert max(len(line) for line in second.stdout.splitlines()) <= 80
    assert (tmp_path / "b" / "comparison.json").is_file()
    # A bad history folder is refused before the run, one line, exit 2.
    assert bad.returncode == 2 and "Traceback" not in bad.stderr


_CAPACITY = """
[load]
capacity = { start = 1, max_level = 2, min_requests = 8, goodput = 0.5, confidence = 0.9 }

[slo]
e2e_s = 5.0
"""


def test_a_capacity_search_judges_its_probes_in_a_child(tmp_path: Path) -> None:
    config = tmp_path / "bench.toml"
    config.write_text(_CAPACITY)
    with simulator_process(SimConfig(tiers=(TIER,), time_scale=1.0)) as base:
        done = _run(base, tmp_path, "cap", "-c", str(config), "--capacity")
    assert done.returncode == 0, done.stderr
    assert "HEAVY=\n" in done.stderr, done.stderr
    assert _outside_the_wall(done.stderr) == []
    loaded = load_run(tmp_path / "cap")
    assert loaded.summary is not None and loaded.summary.capacity is not None
    (target,) = loaded.summary.capacity.targets
    # 8 ms answers against a 5 s limit: every probe meets, the search ends at its top.
    assert (target.capacity, target.verdict) == (2.0, "at_max")
    assert [p.verdict for p in target.probes] == ["meets", "meets"]
    assert all(p.met == p.requests and p.requests >= 8 for p in target.probes)
    assert "capacity" in done.stdout and "at_max" in done.stdout
