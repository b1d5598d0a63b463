"""`--requests auto`: each level sends until every judged statistic has its samples
(LoadGen's minimum for a percentile: 130 ok requests for a p95), within
`load.max_requests`; run.json says per target and level why it stopped."""

from __future__ import annotations

import json
from pathlib import Path

from tokrate.analysis.tier_pick import TierRun, decide_tiers
from tokrate.cli import main
from tokrate.runfolder.store import load_run_info, load_summary


def _run(out: Path, run_id: str, *extra: str, max_tokens: bool = True) -> int:
    """``tokrate run --requests auto`` on sim-1b (and ``extra``); ``max_tokens``: every
    answer 8 tokens long, else each prompt's own."""
    return main(
        [
            "run",
            "-m",
            "sim-1b",
            "--concurrency",
            "4",
            "--requests",
            "auto",
            *(["--max-tokens", "8"] if max_tokens else []),
            "--time-scale",
            "20",
            "--output-dir",
            str(out),
            "--run-id",
            run_id,
            "--quiet",
            "--no-report",
            *extra,
        ]
    )


def test_auto_sends_until_every_verdict_can_be_made(tmp_path: Path) -> None:
    assert _run(tmp_path, "first", "--baseline", "latest-good") == 0
    assert _run(tmp_path, "second", "--baseline", "latest-good") in (0, 1, 3)
    for name in ("first", "second"):
        info = json.loads((tmp_path / name / "run.json").read_text())
        (stop,) = info["sampling"]
        assert stop["reason"] == "judged" and stop["needed"] == 130
        # Stopped once judged, far below max_requests (1000): what was in flight and the
        # records on their way to the driver (a few dozen at 50x speed) come on top.
        assert 130 <= stop["ok"] <= stop["sent"] < 400
        assert info["config"]["load"]["requests"] == "auto"
    doc = json.loads((tmp_path / "second" / "comparison.json").read_text())
    assert not [r for r in doc["results"] if "too few" in (r["reason"] or "")], doc["results"]


def test_auto_stops_at_max_requests_and_says_so(tmp_path: Path) -> None:
    """A p99 threshold needs 662 ok requests; with max_requests = 40 the level stops
    there, and run.json says so."""
    config = tmp_path / "bench.toml"
    config.write_text('[load]\nmax_requests = 40\n\n[compare]\nthresholds = ["ttft_p99=+10%"]\n')
    assert _run(tmp_path, "capped", "-c", str(config)) == 0
    info = json.loads((tmp_path / "capped" / "run.json").read_text())
    (stop,) = info["sampling"]
    assert stop["reason"] == "max_requests" and stop["needed"] == 662
    assert stop["sent"] == 40 and stop["unmet"][0] == "ttft_p99: 40 of the 662 ok requests"
    (warning,) = [w for w in info["warnings"] if "--requests auto" in w]
    assert warning.startswith(
        "sim-1b (sim) at c=4: --requests auto reached load.max_requests after 40 requests"
        " with too few samples for ttft_p99: 40 of the 662 ok requests; "
    )
    assert warning.endswith("Raise load.max_requests to judge them")


#: The thresholds' statistics off but the error rate's (10 ok requests), so the tier
#: pick's shares decide how long a level sends.
_SHARES_ONLY = '["ttft_p95=off", "tpot_p50=off", "e2e_p95=off", "decode_tps_p50=off"]'


def _prompt_file(path: Path, lines: list[dict[str, object]]) -> Path:
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def test_auto_sends_until_the_tier_picks_shares_can_be_judged(tmp_path: Path) -> None:
    """The SLO-met share of each task and the pass rate of a checked task against its
    bar each need their requests (20 for a 95% bar): with one checked prompt in eight
    and a 95% pass bar, each model sends until 20 checked answers came back, far past
    the error rate's 10 (or its budget, 300), and the tier pick then decides every
    cell."""
    chat = [
        {"id": f"chat{i}", "task": "chat", "prompt": f"say {i}", "max_tokens": 8} for i in range(6)
    ]
    labels = [
        {
            "id": "lab1",
            "task": "classification",
            "prompt": "ticket: billing or shipping?",
            "max_tokens": 8,
            "expect": {"one_of": ["billing", "shipping"], "example": "billing"},
        },
        {"id": "lab2", "task": "classification", "prompt": "ticket: which?", "max_tokens": 8},
    ]
    prompts = _prompt_file(tmp_path / "tasks.jsonl", chat + labels)
    config = tmp_path / "bench.toml"
    config.write_text(
        f'[load]\nmax_requests = 300\n\n[prompts]\npaths = ["{prompts}"]\n\n'
        "[slo]\nttft_s = 5.0\nmin_pass_rate_by_task = { classification = 0.95 }\n\n"
        f"[compare]\nthresholds = {_SHARES_ONLY}\n"
    )
    assert _run(tmp_path, "shares", "-c", str(config), "-m", "sim-70b") == 0
    folder = tmp_path / "shares"
    info = load_run_info(folder)
    summary = load_summary(folder)
    assert summary is not None
    assert len(info.sampling) == 2
    for stop in info.sampling:
        assert stop.reason == "judged" and stop.unmet == (), stop
        assert stop.needed == 10  # the error rate's: the shares asked for more
        assert stop.limiting == "pass rate of task classification (95% bar)", stop
        assert stop.sent <= 300
    # The level ended on its judgement, not its budget: the slower model (each target
    # sends its own stream; the faster one goes on until the level stops) needed about
    # 160 requests for its 20 checked answers, and stopped there.
    assert min(stop.sent for stop in info.sampling) < 300
    checked = {
        g.model: t.quality.n
        for g in summary.groups
        for t in g.by_task
        if t.task == "classification" and t.quality is not None
    }
    assert set(checked) == {"sim-1b", "sim-70b"} and min(checked.values()) >= 20, checked
    decision = decide_tiers([TierRun("shares", summary, info)])
    assert decision.checked and decision.task_cells
    for cell in decision.task_cells:
        assert not cell.pooled, cell
        for candidate in cell.candidates:
            for judgement in candidate.judgements:
                assert judgement.verdict != "undecided", (cell.tasks, judgement)


def test_a_share_that_cannot_be_judged_ends_on_the_budget_and_says_why(tmp_path: Path) -> None:
    """A TPOT limit cannot judge a one-token answer: the SLO-met share of a task of
    one-token answers never gets its requests, so the level sends its max_requests and
    run.json names that share."""
    prompts = _prompt_file(
        tmp_path / "tasks.jsonl",
        [
            {"id": "a", "task": "chat", "prompt": "say a", "max_tokens": 8},
            {"id": "b", "task": "chat", "prompt": "say b", "max_tokens": 8},
            {"id": "yes", "task": "oneword", "prompt": "yes or no?", "max_tokens": 1},
        ],
    )
    config = tmp_path / "bench.toml"
    config.write_text(
        f'[load]\nmax_requests = 30\n\n[prompts]\npaths = ["{prompts}"]\n\n'
        f"[slo]\ntpot_s = 1.0\n\n[compare]\nthresholds = {_SHARES_ONLY}\n"
    )
    assert _run(tmp_path, "short", "-c", str(config), max_tokens=False) == 0
    (stop,) = load_run_info(tmp_path / "short").sampling
    assert stop.reason == "max_requests" and stop.sent == 30 and stop.limiting == ""
    assert "SLO-met share of task oneword: 0 of the 20 requests the SLOs judge" in stop.unmet
    (warning,) = [w for w in load_run_info(tmp_path / "short").warnings if "--requests auto" in w]
    assert "SLO-met share of task oneword: 0 of the 20" in warning
