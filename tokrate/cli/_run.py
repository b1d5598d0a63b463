"""``tokrate run``: flags -> spec overrides -> run_benchmark -> tables."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Final

from tokrate.cli._common import Subparsers
from tokrate.errors import UsageError
from tokrate.runfolder.jsondoc import to_json

if TYPE_CHECKING:
    from rich.console import Console

    from tokrate.load.finish import RunResult
    from tokrate.spec.command_line import RunFlags
    from tokrate.spec.types import RunSpec

__all__ = ["add_run"]


def _requests(text: str) -> int | str:
    """``--requests``: a count, or "auto"."""
    if text == "auto":
        return text
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: a whole number or auto") from None


def _workers(text: str) -> int | str:
    """``--workers``: a count, or "auto"."""
    if text == "auto":
        return text
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number or 'auto', got {text!r}") from None


def add_run(sub: Subparsers) -> None:
    p = sub.add_parser(
        "run",
        help="run a benchmark (the simulator when no endpoint is given)",
        description="Every flag overrides the config file. See docs/running.md.",
    )
    a = p.add_argument
    a("-c", "--config", metavar="TOML", help="benchmark config file (bench.toml)")
    a(
        "--base-url",
        help="OpenAI-compatible base URL (ends in /v1); replaces the config's endpoints",
    )
    a("--api-key-env", metavar="VAR", help="environment variable holding the API key")
    a(
        "--metrics-url",
        metavar="URL",
        help="with --base-url: the server's Prometheus /metrics, scraped during the run",
    )
    a("-m", "--model", action="append", metavar="NAME", help="model name (repeatable)")
    a("--prompts", action="append", metavar="PATH", help="prompt file or folder (repeatable)")
    a("--concurrency", metavar="N[,N...]", help="closed-loop sweep, e.g. 1,4,16")
    a("--rate", metavar="RPS[,RPS...]", help="open-loop sweep in requests/s, e.g. 1,2,5")
    a("--arrival", choices=("constant", "poisson", "gamma"), help="open-loop arrivals")
    a(
        "--requests",
        type=_requests,
        metavar="N|auto",
        help="measured requests per target and level; auto: until every judged statistic"
        " has its samples, at most load.max_requests (1000)",
    )
    a("--duration", metavar="SECONDS", help="time limit per scenario (e.g. 30, 30s, 2m)")
    a("--warmup", metavar="N|Ns", help="warm-up: a request count (5) or seconds (10s)")
    a("--targets-mode", choices=("interleaved", "sequential", "parallel"))
    a("--client", choices=("fast", "httpx", "openai"))
    a(
        "--api",
        choices=("chat", "completions", "responses", "anthropic"),
        help="protocol: Chat Completions (default), legacy Completions, the Responses API"
        " (/responses) or Anthropic Messages (/messages); [[endpoint]] api wins",
    )
    a(
        "--body",
        action="append",
        metavar="KEY=JSON",
        help="a body field for every request, e.g. top_k=40 or"
        ' reasoning=\'{"effort":"low"}\' (repeatable; wins over every extra_body)',
    )
    a("--max-tokens", type=int, metavar="N", help="max output tokens per request")
    a(
        "--max-cost",
        type=float,
        metavar="USD",
        help="refuse a plan that may cost more at the models' token prices, and stop"
        " sending when the measured spend reaches it ([load] max_cost_usd)",
    )
    a("--seed", type=int)
    a("--output-dir", metavar="DIR", help="parent folder of run folders (default reports)")
    a("--run-id", help="run folder name (default YYYYMMDD-HHMMSS-xxxx)")
    a(
        "--hardware",
        metavar="PROFILE",
        help="bound-line hardware: profile name, bandwidth=900GB/s or a .toml file",
    )
    a(
        "--workers",
        type=_workers,
        metavar="N|auto",
        help="local worker processes (default auto: from the cores and the planned streams)",
    )
    a("--ray", metavar="ADDR", help="run workers on a Ray cluster (auto or ray://host:port)")
    a("--baseline", metavar="REF", help="compare against a run folder or latest-good")
    a(
        "--threshold",
        action="append",
        default=None,
        metavar="METRIC=+N%",
        help="with --baseline: adjust a regression threshold (repeatable; as for compare)",
    )
    a(
        "--thresholds-from-history",
        metavar="DIR|off",
        help="with --baseline: widen each series' threshold to the run-to-run noise of the"
        " earlier runs under DIR (default: the output folder; off: no fit;"
        " docs/regressions.md)",
    )
    a(
        "--no-confirm",
        action="store_true",
        help="with --baseline: report a regression without re-measuring its scenario first",
    )
    a("--label", metavar="TEXT", help="a name for the run, shown instead of its id")
    a(
        "--no-preconnect",
        action="store_true",
        help="measure cold starts: open no connection before the window (TTFT from due"
        " then includes TCP/TLS set-up)",
    )
    a(
        "--model-check",
        choices=("auto", "probe", "off"),
        help="pre-flight model check of every endpoint (default auto: /models, else a"
        " one-token request per model)",
    )
    a(
        "--progress-interval",
        metavar="SECONDS",
        help="seconds between plain progress lines when stderr is not a terminal (10)",
    )
    a(
        "--capacity",
        action="store_true",
        help="search each target's highest load meeting every [slo] instead of a sweep"
        " (settings: [load] capacity; see docs/running.md)",
    )
    a(
        "--junit",
        metavar="PATH",
        help="with --baseline: write the verdicts as JUnit XML (one testcase per target,"
        " level and metric; a failure per regression) for CI test reports",
    )
    a(
        "--metrics-file",
        metavar="PATH",
        help="write the run's headline figures per target and level as a Prometheus text"
        " file (node_exporter's textfile collector; docs/regressions.md)",
    )
    a(
        "--quiet",
        action="store_true",
        help="no live progress and no summary table; with --baseline one line per"
        " regressed or inconclusive metric and the path of comparison.md",
    )
    a("--json", action="store_true", help="print summary.json to stdout")
    a("--no-report", action="store_true", help="skip charts and HTML")
    a("--time-scale", type=float, metavar="X", help="simulator only: speed factor of its clock")
    p.set_defaults(func=_cmd_run)


def _run_list(text: str, kind: type, flag: str) -> tuple[object, ...]:
    try:
        values = tuple(kind(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise UsageError(f"tokrate run: {flag} {text!r}: expected a comma-separated list") from None
    if not values:
        raise UsageError(f"tokrate run: {flag} {text!r}: empty list")
    return values


def _run_seconds(text: str, flag: str) -> float:
    scale = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
    body, unit = text.strip(), "s"
    for suffix in ("ms", "s", "m", "h"):
        if body.endswith(suffix):
            body, unit = body[: -len(suffix)], suffix
            break
    try:
        return float(body) * scale[unit]
    except ValueError:
        raise UsageError(f"tokrate run: {flag} {text!r}: expected seconds (30, 30s, 2m)") from None


#: Where each reserved body field comes from instead of --body.
_RESERVED_WHY: Final = {
    "model": "tokrate sets it from the target (choose models with -m NAME or [[model]] name)",
    "messages": "tokrate sets it from the prompts (--prompts or [prompts])",
    "prompt": "tokrate sets it from the prompts (--prompts or [prompts])",
    "input": "tokrate sets it from the prompts (--prompts or [prompts])",
    "stream": "tokrate always streams",
}


def _body_pairs(items: list[str]) -> dict[str, object]:
    """``--body KEY=JSON`` values as a table (a later KEY wins); a value that is not
    JSON is refused, naming it (``--body top_k=40``, ``--body stop='["\\n"]'``)."""
    from tokrate.errors import PromptError
    from tokrate.inputs.prompt_base import parse_json_text
    from tokrate.spec.request_fields import unstreamable
    from tokrate.spec.types import RESERVED_BODY_KEYS

    out: dict[str, object] = {}
    for item in items:
        key, eq, text = item.partition("=")
        key = key.strip()
        if not eq or not key:
            raise UsageError(f"tokrate run: --body {item!r}: expected KEY=JSON (e.g. top_k=40)")
        if key in RESERVED_BODY_KEYS:
            # Said before the value is read: "--body model=x" is not a quoting problem.
            raise UsageError(f"tokrate run: --body {key}: reserved key, {_RESERVED_WHY[key]}")
        try:
            # Strict JSON, as a prompt body is read: orjson would take 2**64 as a float.
            out[key] = parse_json_text(text, "")
        except PromptError as err:
            problem = str(err).removeprefix(": invalid JSON (").removesuffix(")")
            raise UsageError(
                f"tokrate run: --body {key}: the value is not JSON ({problem}): {text[:60]!r}"
                " (quote strings: --body 'user=\"me\"')"
            ) from None
        why = unstreamable(key, out[key])
        if why is not None:
            raise UsageError(f"tokrate run: --body {key}: {why}")
    return out


def _load_overrides(args: argparse.Namespace) -> dict[str, object]:
    """The load-shape flags: levels, warm-up and duration."""
    o: dict[str, object] = {}
    if args.concurrency and args.rate:
        raise UsageError("tokrate run: give --concurrency or --rate, not both")
    if args.concurrency:
        o["load.concurrency"] = _run_list(args.concurrency, int, "--concurrency")
        o["load.mode"] = "closed"
        o["load.rates"] = ()
    if args.rate:
        o["load.rates"] = _run_list(args.rate, float, "--rate")
        o["load.mode"] = "open"
    if args.warmup:
        if args.warmup.strip()[-1:].isalpha():
            o["load.warmup_s"] = _run_seconds(args.warmup, "--warmup")
        else:
            try:
                o["load.warmup_requests"] = int(args.warmup)
            except ValueError:
                raise UsageError(f"tokrate run: --warmup {args.warmup!r}: a count or 10s") from None
    if args.duration:
        o["load.duration_s"] = _run_seconds(args.duration, "--duration")
        if args.requests is None:
            o["load.requests"] = None
    return o


_SIMPLE_OVERRIDES = {
    "arrival": "load.arrival",
    "requests": "load.requests",
    "targets_mode": "load.targets",
    "client": "client.kind",
    "api": "client.api",
    "max_tokens": "prompts.max_tokens",
    "max_cost": "load.max_cost_usd",
    "seed": "load.seed",
    "output_dir": "output.dir",
    "run_id": "output.run_id",
    "hardware": "output.hardware",
    "workers": "load.workers",
    "ray": "distributed.ray",
    "baseline": "baseline",
    "time_scale": "simulator.time_scale",
    "label": "output.label",
}


def _run_overrides(args: argparse.Namespace) -> dict[str, object]:
    """The dotted load_spec overrides the flags ask for (endpoints/models aside)."""
    import os

    o = _load_overrides(args)
    for attr, key in _SIMPLE_OVERRIDES.items():
        value = getattr(args, attr)
        if value is not None:
            o[key] = value
    if args.prompts:
        # Relative to the current directory (config-file paths are relative to the
        # config's folder), so the CLI hands over absolute paths.
        o["prompts.paths"] = tuple(os.path.abspath(p) for p in args.prompts)
    if args.no_report:
        o["output.report"] = False
    if args.no_preconnect:
        o["client.preconnect"] = False
    if args.progress_interval is not None:
        o["output.progress_interval_s"] = _run_seconds(
            args.progress_interval, "--progress-interval"
        )
    if args.body:
        o["client.body_overrides"] = _body_pairs(args.body)
    if args.threshold:
        o["compare.thresholds"] = tuple(args.threshold)
    if args.thresholds_from_history is not None:
        folder = args.thresholds_from_history
        o["compare.thresholds_from_history"] = (
            folder if folder == "off" else os.path.abspath(folder)
        )
    if args.no_confirm:
        o["compare.confirm"] = False
    return o


def _run_flags(args: argparse.Namespace) -> RunFlags:
    """The target and mode flags, attached to the config by load_spec's rules."""
    from tokrate.spec.command_line import RunFlags

    return RunFlags(
        base_url=args.base_url,
        metrics_url=args.metrics_url,
        models=tuple(args.model or ()),
        api_key_env=args.api_key_env,
        model_check=args.model_check,
        capacity=args.capacity,
    )


def _spec_from_args(args: argparse.Namespace) -> RunSpec:
    """The run's spec: the config file (or the embedded default) with every flag on
    top, loaded once."""
    from tokrate.spec.config_file import load_spec

    if args.time_scale is not None and args.base_url is not None:
        raise UsageError("tokrate run: --time-scale applies to the simulator only")
    return load_spec(args.config, _run_overrides(args), _run_flags(args))


def _cmd_run(args: argparse.Namespace) -> int:
    import orjson
    from rich.console import Console

    from tokrate.load.run import run_benchmark

    spec = _spec_from_args(args)
    if args.junit and not spec.baseline:
        raise UsageError("tokrate run: --junit needs --baseline (it writes the verdicts)")
    err = Console(stderr=True)
    result = run_benchmark(spec, console=err, quiet=args.quiet or args.json)
    if args.json:
        document = None if result.summary is None else to_json(result.summary)
        sys.stdout.write(orjson.dumps(document, option=orjson.OPT_INDENT_2).decode() + "\n")
    elif not args.quiet:
        # The tables fit 80 columns; a pipe or file gets plain text at that width.
        out = Console() if sys.stdout.isatty() else Console(width=80, color_system=None)
        _print_tables(result, out)
    state = "interrupted" if result.interrupted else "complete"
    if result.stopped_by is not None:
        state += f" (stopped by {result.stopped_by} while its files were finished)"
    label = f" ({result.label})" if result.label else ""
    page = result.run_dir / "report.html"
    # The page a user opens next, named where it was built.
    where = f"; open {page}" if page.is_file() else ""
    err.print(
        f"run {state}: {result.run_dir}{label}{where}",
        markup=False,
        highlight=False,
        soft_wrap=True,
    )
    if result.baseline_result is not None:
        err.print(result.baseline_result, markup=False, highlight=False, soft_wrap=True)
    _gate_outputs(args, result, err)
    return result.exit_code


def _gate_outputs(args: argparse.Namespace, result: RunResult, err: Console) -> None:
    """What the nightly gate says to CI besides the exit code: the ``--metrics-file``;
    with ``--quiet`` one line per regressed or inconclusive metric, the detectable
    changes and the path of comparison.md; the ``--junit`` file."""
    from pathlib import Path

    from tokrate.errors import OutputError
    from tokrate.fileio import write_atomic
    from tokrate.report.terminal.comparison_text import attention_lines, detectable_lines
    from tokrate.report.terminal.junit import junit_without_comparison, junit_xml

    if args.metrics_file and result.summary is not None:
        from tokrate.report.terminal.metrics_file import metrics_text
        from tokrate.runfolder.store import load_run_info

        text = metrics_text(result.summary, load_run_info(result.run_dir))
        try:
            write_atomic(Path(args.metrics_file), text.encode("utf-8"))
        except OSError as e:
            raise OutputError(f"{args.metrics_file}: cannot write the metrics file ({e})") from None
    comparison = result.comparison
    if comparison is None:
        # The first night (no latest-good yet) still leaves the file a CI step uploads.
        if args.junit and result.baseline_result is not None:
            _write_junit(args.junit, junit_without_comparison(result.baseline_result))
        return
    if args.quiet:
        for line in [*attention_lines(comparison), *detectable_lines(comparison)]:
            err.print(line, markup=False, highlight=False, soft_wrap=True)
        err.print(
            f"comparison: {result.run_dir / 'comparison.md'}",
            markup=False,
            highlight=False,
            soft_wrap=True,
        )
    if args.junit:
        _write_junit(args.junit, junit_xml(comparison))


def _write_junit(path: str, document: bytes) -> None:
    from pathlib import Path

    from tokrate.errors import OutputError
    from tokrate.fileio import write_atomic

    try:
        write_atomic(Path(path), document)
    except OSError as e:
        raise OutputError(f"{path}: cannot write the JUnit file ({e})") from None


def _print_tables(result: RunResult, out: Console) -> None:
    """The summary table (a capacity search's table under it), the answer-quality
    table, the baseline comparison as ``tokrate compare`` draws it, and last the
    verdict: one sentence per decision of the tier pick, which holds each task to its
    pass-rate bar where answers were checked (so routing.json and the verdict agree).
    This process measured the run: these renderers import nothing heavy
    (tokrate.report.terminal.run_tables)."""
    from tokrate.analysis.tier_pick import TierRun, decide_tiers
    from tokrate.report.terminal.comparison_text import render_table
    from tokrate.report.terminal.quality_text import render_quality
    from tokrate.report.terminal.run_tables import render_capacity, render_summary
    from tokrate.report.terminal.tier_text import render_verdict
    from tokrate.runfolder.routing import read_routing
    from tokrate.runfolder.store import load_run_info

    decision = None
    if result.summary is not None:
        name = result.label or result.run_dir.name
        render_summary(result.summary, out, title=f"tokrate run {name}")
        if result.summary.capacity is not None:
            out.print()
            render_capacity(result.summary.capacity, out)
        # Answer quality, when answers were checked (the routes' evidence is in
        # routing.json; the verdict below holds each pick to the same bar).
        render_quality(result.summary, read_routing(result.run_dir), out)
        info = load_run_info(result.run_dir)
        decision = decide_tiers([TierRun(info.name, result.summary, info)])
    if result.comparison is not None:
        out.print()
        render_table(result.comparison, out)
    # The tier pick in words ends the output (analysis.tier_pick decides over the
    # summary and run.json, report.tier_text says it).
    if decision is not None and decision.cells:
        out.print()
        render_verdict(decision, out)
