"""Drive tokrate against a real server as a user does, and read what the server says.

:func:`bench` runs :func:`tokrate.run_benchmark` (the library call behind ``tokrate run``)
and returns the run folder's records. :func:`distinct_length_prompts` writes prompts whose
token counts all differ, so a request's ``input_tokens`` (from usage) identifies it in
llama-server's log; :func:`llama_log_timings` parses that log's per-task ``print_timing``
lines, the same ``timings`` object llama-server puts in the last chunk of a stream.
"""

from __future__ import annotations

import itertools
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import orjson
import polars as pl

from tokrate.load.run import run_benchmark
from tokrate.runfolder.loaded_run import LoadedRun, load_run
from tokrate.spec.types import (
    ClientSpec,
    EndpointSpec,
    LoadSpec,
    ModelSpec,
    OutputSpec,
    PromptsSpec,
    RunSpec,
)


def distinct_length_prompts(path: Path, count: int, *, base_words: int = 12) -> Path:
    """``count`` chat prompts, prompt i with ``base_words + 3 i`` words of one repeated
    word, so their token counts are strictly increasing with i."""
    lines = []
    for i in range(count):
        text = " ".join(["benchmark"] * (base_words + 3 * i))
        lines.append(orjson.dumps({"id": f"p{i:02d}", "task": "chat", "prompt": text}))
    path.write_bytes(b"\n".join(lines) + b"\n")
    return path


def bench_run(
    out: Path,
    run_id: str,
    base_url: str,
    models: Sequence[ModelSpec],
    prompts: Path,
    *,
    concurrency: tuple[int, ...] = (1,),
    requests: int = 4,
    max_tokens: int | None = 128,
    client: str = "fast",
    api_key_env: str | None = None,
    warmup_requests: int = 1,
    unique_prompts: bool = False,
    model_check: str = "auto",
) -> LoadedRun:
    """One tokrate run against ``base_url``; returns its loaded run folder."""
    endpoint = models[0].endpoint
    spec = RunSpec(
        endpoints=(
            EndpointSpec(endpoint, base_url, api_key_env=api_key_env, model_check=model_check),  # type: ignore[arg-type]
        ),
        models=tuple(models),
        load=LoadSpec(
            concurrency=concurrency,
            requests=requests,
            warmup_requests=warmup_requests,
            targets="sequential",
        ),
        prompts=PromptsSpec(paths=(str(prompts),), max_tokens=max_tokens),
        client=ClientSpec(kind=client, unique_prompts=unique_prompts),  # type: ignore[arg-type]
        output=OutputSpec(dir=str(out), run_id=run_id, report=False),
    )
    result = run_benchmark(spec)
    assert result.exit_code == 0, f"tokrate run {run_id} exited {result.exit_code}"
    return load_run(result.run_dir)


def bench(out: Path, run_id: str, base_url: str, *args: Any, **kwargs: Any) -> pl.DataFrame:
    """:func:`bench_run`'s records (warm-up included)."""
    return bench_run(out, run_id, base_url, *args, **kwargs).records


@dataclass(frozen=True, slots=True)
class LlamaTimings:
    """One task's ``print_timing`` block (llama-server's ``timings`` object, ms)."""

    slot: int
    task: int
    prompt_ms: float
    prompt_n: int
    predicted_ms: float
    predicted_n: int
    predicted_per_token_ms: float
    predicted_per_second: float

    @property
    def decode_tps(self) -> float:
        """Tokens/s over the n-1 decode steps, from ``predicted_ms`` (the log rounds the
        per-token figures to 0.01 ms, 5% at the smallest model's 0.2 ms per token)."""
        return (self.predicted_n - 1) / (self.predicted_ms / 1000.0)


_PROMPT_LINE = re.compile(
    r"print_timing: id\s+(\d+) \| task (\d+) \| prompt eval time =\s*([\d.]+) ms /\s*(\d+) tokens"
)
_EVAL_LINE = re.compile(
    r"print_timing: id\s+(\d+) \| task (\d+) \|\s+eval time =\s*([\d.]+) ms /\s*(\d+) tokens"
    r" \(\s*([\d.]+) ms per token,\s*([\d.]+) tokens per second\)"
)


def llama_log_timings(log_text: str) -> list[LlamaTimings]:
    """Every finished task in a llama-server log, in log order."""
    prompts: dict[int, tuple[float, int]] = {}
    out = []
    for line in log_text.splitlines():
        if m := _PROMPT_LINE.search(line):
            prompts[int(m.group(2))] = (float(m.group(3)), int(m.group(4)))
        elif m := _EVAL_LINE.search(line):
            task = int(m.group(2))
            prompt_ms, prompt_n = prompts.pop(task)
            out.append(
                LlamaTimings(
                    slot=int(m.group(1)),
                    task=task,
                    prompt_ms=prompt_ms,
                    prompt_n=prompt_n,
                    predicted_ms=float(m.group(3)),
                    predicted_n=int(m.group(4)),
                    predicted_per_token_ms=float(m.group(5)),
                    predicted_per_second=float(m.group(6)),
                )
            )
    return out


def ok_records(records: pl.DataFrame, *, warmup: bool = False) -> list[dict[str, Any]]:
    frame = records.filter((pl.col("status") == "ok") & (pl.col("warmup") == warmup))
    return frame.sort("t0_ns").to_dicts()


class LogCursor:
    """The part of a server log written after :meth:`mark` (runs share one log)."""

    def __init__(self, log: Path) -> None:
        self.log = log
        self.offset = 0

    def mark(self) -> None:
        self.offset = self.log.stat().st_size

    def timings_since_mark(self, expected: int, timeout_s: float = 10.0) -> list[LlamaTimings]:
        """The tasks finished since :meth:`mark`; waits for ``expected`` of them, since
        llama-server prints a task's timings when it frees the slot, just after the
        last bytes of the stream went out."""
        deadline = time.monotonic() + timeout_s
        while True:
            with self.log.open("rb") as f:
                f.seek(self.offset)
                found = llama_log_timings(f.read().decode("utf-8", errors="replace"))
            if len(found) >= expected or time.monotonic() > deadline:
                return found
            time.sleep(0.1)


def match_by_prompt_tokens(
    records: Sequence[dict[str, Any]], timings: Sequence[LlamaTimings]
) -> list[tuple[dict[str, Any], LlamaTimings]]:
    """Pair each record with the server task that processed the same number of prompt
    tokens (the prompts all differ in length and the prompt cache is off, so within one
    scenario the pairing is unique)."""
    by_length = {t.prompt_n: t for t in timings}
    assert len(by_length) == len(timings), "two server tasks had the same prompt length"
    pairs = []
    for rec in records:
        task = by_length.get(rec["input_tokens"])
        assert task is not None, f"no server task with {rec['input_tokens']} prompt tokens"
        pairs.append((rec, task))
    tasks = [t.task for _, t in pairs]
    assert len(set(tasks)) == len(tasks), "two records matched one server task"
    return pairs


@dataclass(frozen=True, slots=True)
class RawEvent:
    """One SSE ``data:`` line as it arrived: seconds since the request was sent, and the
    parsed JSON (``None`` for ``[DONE]``)."""

    at_s: float
    data: dict[str, Any] | None

    @property
    def is_done(self) -> bool:
        return self.data is None


def raw_stream(
    base_url: str,
    model: str,
    text: str,
    max_tokens: int,
    *,
    api_key: str | None = None,
    **extra: Any,
) -> list[RawEvent]:
    """Stream one chat request (usage asked for; ``extra`` merged into the body) and keep
    every event with its arrival time: what the server really sends, independent of
    tokrate's parsers."""
    body = {
        "model": model,
        "messages": [{"role": "user", "content": text}],
        "max_tokens": max_tokens,
        "stream": True,
        "stream_options": {"include_usage": True},
        **extra,
    }
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    events = []
    with httpx.Client(timeout=120.0) as client:
        t0 = time.perf_counter()
        url = base_url + "/chat/completions"
        with client.stream("POST", url, json=body, headers=headers) as resp:
            assert resp.status_code == 200, resp.read().decode()
            for line in resp.iter_lines():
                if not line.startswith("data:"):
                    continue
                payload = line[5:].strip()
                at = time.perf_counter() - t0
                events.append(RawEvent(at, None if payload == "[DONE]" else orjson.loads(payload)))
    return events


def median_decode_tps(records: Sequence[dict[str, Any]]) -> float:
    speeds = sorted(1.0 / rec["tpot_s"] for rec in records)
    return speeds[len(speeds) // 2]


def assert_falls_with_size(runs_by_size: Sequence[Sequence[dict[str, Any]]]) -> None:
    """Median single-stream decode speed strictly falls from each size to the next."""
    medians = [median_decode_tps(records) for records in runs_by_size]
    assert all(a > b for a, b in itertools.pairwise(medians)), medians


def content_of(event: RawEvent) -> str:
    if event.data is None:
        return ""
    return "".join(str((c.get("delta") or {}).get("content") or "") for c in event.data["choices"])


def run_and_match(
    server_log: Path,
    out: Path,
    run_id: str,
    base_url: str,
    model: ModelSpec,
    *,
    concurrency: int,
    requests: int,
    max_tokens: int,
    **bench_kwargs: Any,
) -> tuple[list[tuple[dict[str, Any], LlamaTimings]], LoadedRun]:
    """One tokrate run (a warm-up request per stream, then ``requests``) against
    ``base_url`` — llama-server itself or a gateway in front of it — with every measured
    record paired with the llama-server task (read from ``server_log``) that served it."""
    prompts = distinct_length_prompts(out / f"{run_id}.jsonl", requests + concurrency)
    cursor = LogCursor(server_log)
    cursor.mark()
    run = bench_run(
        out,
        run_id,
        base_url,
        [model],
        prompts,
        concurrency=(concurrency,),
        requests=requests,
        max_tokens=max_tokens,
        warmup_requests=concurrency,
        **bench_kwargs,
    )
    measured = ok_records(run.records)
    assert len(measured) == requests, run.records.select("status", "error_message").to_dicts()
    timings = cursor.timings_since_mark(requests + concurrency)
    return match_by_prompt_tokens(measured, timings), run


def worst_decode_diff(pairs: Sequence[tuple[dict[str, Any], LlamaTimings]]) -> float:
    """The largest relative difference, client 1/TPOT vs server decode speed."""
    return max((1.0 / rec["tpot_s"] / task.decode_tps - 1.0 for rec, task in pairs), key=abs)
