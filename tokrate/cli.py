"""Command line: argv -> spec -> one library call -> render -> exit code.

Each subcommand has an ``_add_<name>`` (its argparse section) and a ``_cmd_<name>``
(translate args, make one library call, render). Nothing below this module sees argv.
Deliberate errors (:class:`~tokrate.errors.TokrateError`) print as one line on stderr
and exit with their ``exit_code``; Ctrl-C exits 130.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from tokrate import __version__
from tokrate.errors import TokrateError, UsageError

__all__ = ["main"]


class _Parser(argparse.ArgumentParser):
    """argparse that raises UsageError (one line, exit 2) instead of printing usage."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(f"{self.prog}: {message}")


# --- tokrate sim -------------------------------------------------------------------


def _add_sim(sub: argparse._SubParsersAction[_Parser]) -> None:
    p = sub.add_parser("sim", help="serve the built-in simulated OpenAI endpoint")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=0, help="port (default 0: any free port)")
    p.add_argument("--tiers", metavar="FILE.toml", help="tiers file (replaces the defaults)")
    p.add_argument("--hardware", default="a100-80g", metavar="NAME", help="GPU profile")
    p.add_argument(
        "--efficiency",
        action="append",
        default=[],
        metavar="X|TIER=X",
        help="fraction of bandwidth/FLOPs reached (default 0.8); TIER=X sets one tier; repeatable",
    )
    p.add_argument(
        "--time-scale", type=float, default=1.0, metavar="X", help="divide all delays by X"
    )
    p.add_argument("--seed", type=int, default=0, help="seed of output lengths and faults")
    p.add_argument(
        "--api-key",
        metavar="ENV_VAR",
        help="require the key held in this environment variable (never the key itself)",
    )
    p.add_argument(
        "--faults", metavar="SPEC", help='e.g. "http_500=0.1,sim-70b:stall=0.05:seconds=2"'
    )
    p.add_argument(
        "--truth-log", metavar="FILE.jsonl", help="write server-side write times per request"
    )
    p.set_defaults(func=_cmd_sim)


def _sim_efficiency(values: Sequence[str]) -> tuple[float, dict[str, float]]:
    """``["0.7", "sim-70b=0.64"]`` -> (0.7, {"sim-70b": 0.64}); UsageError on bad input."""
    default = 0.8
    per_tier: dict[str, float] = {}
    for item in values:
        name, eq, number = item.rpartition("=")
        try:
            value = float(number)
        except ValueError:
            raise UsageError(f"tokrate sim: --efficiency {item!r}: not a number") from None
        if not 0 < value <= 1:
            raise UsageError(f"tokrate sim: --efficiency {item!r}: must be in (0, 1]")
        if eq:
            per_tier[name] = value
        else:
            default = value
    return default, per_tier


def _cmd_sim(args: argparse.Namespace) -> int:
    import os

    from tokrate.sim import SimConfig, serve

    api_key = None
    if args.api_key:
        api_key = os.environ.get(args.api_key)
        if not api_key:
            raise UsageError(
                f"tokrate sim: --api-key: environment variable {args.api_key} is not set"
            )
    efficiency, tier_efficiency = _sim_efficiency(args.efficiency)
    config = SimConfig(
        host=args.host,
        port=args.port,
        tiers_file=args.tiers,
        hardware=args.hardware,
        efficiency=efficiency,
        tier_efficiency=tier_efficiency,
        time_scale=args.time_scale,
        seed=args.seed,
        api_key=api_key,
        faults=args.faults,
        truth_log=args.truth_log,
    )

    def ready(url: str) -> None:
        print(url, flush=True)

    serve(config, on_ready=ready)
    return 0


# --- tokrate run -------------------------------------------------------------------


def _add_run(sub: argparse._SubParsersAction[_Parser]) -> None:
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
    a("-m", "--model", action="append", metavar="NAME", help="model name (repeatable)")
    a("--prompts", action="append", metavar="PATH", help="prompt file or folder (repeatable)")
    a("--concurrency", metavar="N[,N...]", help="closed-loop sweep, e.g. 1,4,16")
    a("--rate", metavar="RPS[,RPS...]", help="open-loop sweep in requests/s, e.g. 1,2,5")
    a("--arrival", choices=("constant", "poisson", "gamma"), help="open-loop arrivals")
    a("--requests", type=int, metavar="N", help="requests per scenario")
    a("--duration", metavar="SECONDS", help="time limit per scenario (e.g. 30, 30s, 2m)")
    a("--warmup", metavar="N|Ns", help="warm-up: a request count (5) or seconds (10s)")
    a("--targets-mode", choices=("interleaved", "sequential", "parallel"))
    a("--client", choices=("fast", "httpx", "openai"))
    a("--api", choices=("chat", "completions"))
    a("--max-tokens", type=int, metavar="N", help="max output tokens per request")
    a("--seed", type=int)
    a("--output-dir", metavar="DIR", help="parent folder of run folders (default reports)")
    a("--run-id", help="run folder name (default YYYYMMDD-HHMMSS-xxxx)")
    a("--hardware", metavar="PROFILE", help="hardware profile for the bound line")
    a("--workers", type=int, metavar="N", help="local worker processes")
    a("--ray", metavar="ADDR", help="run workers on a Ray cluster (auto or ray://host:port)")
    a("--baseline", metavar="REF", help="compare against a run folder or latest-good")
    a(
        "--threshold",
        action="append",
        default=None,
        metavar="METRIC=+N%",
        help="with --baseline: adjust a regression threshold (repeatable; as for compare)",
    )
    a("--label", metavar="TEXT", help="a name for the run, shown instead of its id")
    a(
        "--no-preconnect",
        action="store_true",
        help="measure cold starts: open no connection before the window (TTFT then"
        " includes TCP/TLS set-up)",
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
    a("--quiet", action="store_true", help="no live progress and no summary table")
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


def _run_overrides(args: argparse.Namespace) -> dict[str, object]:
    """The dotted load_spec overrides the flags ask for (endpoints/models aside)."""
    import os

    o: dict[str, object] = {}
    if args.concurrency:
        o["load.concurrency"] = _run_list(args.concurrency, int, "--concurrency")
        o["load.mode"] = "closed"
        o["load.rates"] = ()
    if args.rate:
        if args.concurrency:
            raise UsageError("tokrate run: give --concurrency or --rate, not both")
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
    simple = {
        "arrival": "load.arrival",
        "requests": "load.requests",
        "targets_mode": "load.targets",
        "client": "client.kind",
        "api": "client.api",
        "max_tokens": "prompts.max_tokens",
        "seed": "load.seed",
        "output_dir": "output.dir",
        "run_id": "output.run_id",
        "hardware": "output.hardware",
        "workers": "load.workers",
        "ray": "distributed.ray",
        "baseline": "baseline",
        "time_scale": "simulator.time_scale",
    }
    for attr, key in simple.items():
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
    if args.label is not None:
        o["output.label"] = args.label
    if args.progress_interval is not None:
        o["output.progress_interval_s"] = _run_seconds(
            args.progress_interval, "--progress-interval"
        )
    if args.threshold:
        o["compare.thresholds"] = tuple(args.threshold)
    return o


def _cmd_run(args: argparse.Namespace) -> int:
    import dataclasses

    import orjson
    from rich.console import Console

    from tokrate.progress import print_summary
    from tokrate.run import EMBEDDED_DEFAULTS, SIM_ENDPOINT, run_benchmark
    from tokrate.spec import EndpointSpec, ModelSpec, load_spec

    overrides = _run_overrides(args)
    embedded = args.config is None and args.base_url is None
    if embedded:
        defaults = dict(EMBEDDED_DEFAULTS)
        if args.rate:  # an open-loop run has no concurrency sweep
            defaults.pop("load.concurrency", None)
        overrides = {**defaults, **overrides}
    elif args.time_scale is not None and args.base_url is not None:
        raise UsageError("tokrate run: --time-scale applies to the simulator only")
    if args.base_url:
        endpoint = EndpointSpec(
            name="endpoint",
            base_url=args.base_url,
            api_key_env=args.api_key_env,
            model_check=args.model_check or "auto",
        )
        overrides["endpoints"] = [endpoint]
        if not args.model:
            raise UsageError("tokrate run: --base-url needs at least one -m/--model")
        overrides["models"] = [ModelSpec(endpoint="endpoint", name=m) for m in args.model]
    spec = load_spec(args.config, overrides)
    if not args.base_url and (args.model or args.api_key_env or args.model_check):
        # -m / --api-key-env / --model-check on top of a config file (or the
        # simulator): attach to the configured endpoints, which only the loaded spec
        # knows.
        again = dict(overrides)
        if args.api_key_env or args.model_check:
            again["endpoints"] = [
                dataclasses.replace(
                    e,
                    api_key_env=args.api_key_env or e.api_key_env,
                    model_check=args.model_check or e.model_check,
                )
                for e in spec.endpoints
            ]
        if args.model:
            owner = spec.endpoints[0].name if spec.endpoints else SIM_ENDPOINT
            again["models"] = [ModelSpec(endpoint=owner, name=m) for m in args.model]
        spec = load_spec(args.config, again)
    err = Console(stderr=True)
    result = run_benchmark(spec, console=err, quiet=args.quiet or args.json)
    if args.json:
        sys.stdout.write(orjson.dumps(result.summary, option=orjson.OPT_INDENT_2).decode() + "\n")
    elif not args.quiet:
        # The tables fit 80 columns; a pipe or file gets plain text at that width.
        out = Console() if sys.stdout.isatty() else Console(width=80, color_system=None)
        name = result.label or result.run_dir.name
        print_summary(result.summary, out, title=f"tokrate run {name}")
        if result.comparison is not None:
            from tokrate.compare import render_table

            # Exactly what `tokrate compare` prints, on the console it would use.
            tty = sys.stdout.isatty()
            compare_out = Console() if tty else Console(width=160, color_system=None)
            compare_out.print()
            render_table(result.comparison, compare_out)
    state = "interrupted" if result.interrupted else "complete"
    label = f" ({result.label})" if result.label else ""
    err.print(
        f"run {state}: {result.run_dir}{label}", markup=False, highlight=False, soft_wrap=True
    )
    if result.baseline_result is not None:
        err.print(result.baseline_result, markup=False, highlight=False, soft_wrap=True)
    return result.exit_code


# --- tokrate init ------------------------------------------------------------------


def _add_init(sub: argparse._SubParsersAction[_Parser]) -> None:
    p = sub.add_parser("init", help="write a commented example bench.toml")
    p.add_argument(
        "path", nargs="?", default="bench.toml", metavar="PATH", help="file to write (bench.toml)"
    )
    p.add_argument("--force", action="store_true", help="overwrite an existing file")
    p.set_defaults(func=_cmd_init)


def _cmd_init(args: argparse.Namespace) -> int:
    from tokrate.init_config import write_example

    path = write_example(args.path, force=args.force)
    print(f"wrote {path}; edit it, then run: tokrate run -c {path}")
    return 0


# --- tokrate report ----------------------------------------------------------------


def _add_report(sub: argparse._SubParsersAction[_Parser]) -> None:
    p = sub.add_parser("report", help="(re)build the report of one or more stored runs")
    p.add_argument("runs", nargs="+", metavar="RUN", help="run folder(s), e.g. reports/<run-id>")
    p.add_argument(
        "-o", "--out", metavar="DIR", default=None,
        help="output folder (default: the run folder; for several runs reports/compare-<ids>)",
    )  # fmt: skip
    p.add_argument(
        "--hardware", metavar="NAME", default=None,
        help="hardware profile of the bound line (default: run.json 'hardware')",
    )  # fmt: skip
    p.add_argument(
        "--format", dest="formats", metavar="png,svg", default="png,svg",
        help="chart file formats under charts/ (comma-separated; default png,svg)",
    )  # fmt: skip
    p.add_argument("--open", action="store_true", help="open report.html in a browser")
    p.set_defaults(func=_cmd_report)


def _cmd_report(args: argparse.Namespace) -> int:
    from pathlib import Path

    from tokrate.report import build_report

    formats = tuple(f.strip() for f in str(args.formats).split(",") if f.strip())
    if not formats:
        raise UsageError("tokrate report: --format needs at least one of png, svg")
    out = build_report(
        [Path(r) for r in args.runs],
        Path(args.out) if args.out else None,
        hardware=args.hardware,
        formats=formats,
    )
    html_path = out / "report.html"
    print(html_path)
    if args.open:
        import webbrowser

        webbrowser.open(html_path.resolve().as_uri())
    return 0


# --- tokrate compare ---------------------------------------------------------------


def _add_compare(sub: argparse._SubParsersAction[_Parser]) -> None:
    p = sub.add_parser("compare", help="compare a run against a baseline; exit 1 on regression")
    p.add_argument("baseline", metavar="BASELINE", help="baseline run folder")
    p.add_argument("current", metavar="CURRENT", help="run folder to judge")
    p.add_argument(
        "--threshold",
        action="append",
        default=[],
        metavar="METRIC=+N%",
        help="override a default threshold (ttft_p95=+10%%, decode_tps_p50=-5%%, "
        "error_rate=+1pp, METRIC=off); repeatable",
    )
    p.add_argument(
        "--format", choices=("md", "json", "table"), default="table", help="default: table"
    )
    p.add_argument("-o", "--output", metavar="FILE", help="write there instead of stdout")
    p.set_defaults(func=_cmd_compare)


def _cmd_compare(args: argparse.Namespace) -> int:
    from pathlib import Path

    from tokrate.compare import (
        compare_runs,
        merge_thresholds,
        parse_threshold,
        render_json,
        render_markdown,
        render_table,
    )
    from tokrate.errors import OutputError

    thresholds = merge_thresholds(parse_threshold(t) for t in args.threshold)
    comparison = compare_runs(Path(args.baseline), Path(args.current), thresholds)
    if args.format == "md":
        text = render_markdown(comparison)
    elif args.format == "json":
        text = render_json(comparison)
    else:
        import io

        from rich.console import Console

        if not args.output:
            # A pipe or CI log gets plain text at a fixed width, a terminal its own.
            tty = sys.stdout.isatty()
            render_table(comparison, Console() if tty else Console(width=160, color_system=None))
            return comparison.exit_code
        # A file gets plain text at a fixed width.
        buf = io.StringIO()
        render_table(comparison, Console(file=buf, width=160, color_system=None))
        text = buf.getvalue()
    if args.output:
        try:
            Path(args.output).write_text(text, encoding="utf-8")
        except OSError as err:
            raise OutputError(f"{args.output}: cannot write ({err.strerror})") from None
    else:
        sys.stdout.write(text)
    return comparison.exit_code


# --- tokrate history ---------------------------------------------------------------


def _add_history(sub: argparse._SubParsersAction[_Parser]) -> None:
    p = sub.add_parser("history", help="trend charts over every run folder under a directory")
    p.add_argument("root", metavar="DIR", help="folder holding run folders (any depth)")
    p.add_argument("--model", action="append", default=[], metavar="M", help="repeatable")
    p.add_argument(
        "--metric", action="append", default=[], metavar="METRIC", help="e.g. ttft_p95; repeatable"
    )
    p.add_argument("--window", type=int, default=10, help="runs in the rolling baseline")
    p.add_argument(
        "--threshold", action="append", default=[], metavar="METRIC=+N%", help="as for compare"
    )
    p.add_argument("-o", "--output", metavar="DIR", help="output folder (default DIR/history)")
    p.set_defaults(func=_cmd_history)


def _cmd_history(args: argparse.Namespace) -> int:
    from pathlib import Path

    from tokrate.compare import merge_thresholds, parse_threshold
    from tokrate.history import build_history

    thresholds = merge_thresholds(parse_threshold(t) for t in args.threshold)
    out, history = build_history(
        Path(args.root),
        Path(args.output) if args.output else None,
        models=args.model,
        metrics=args.metric,
        window=args.window,
        thresholds=thresholds,
    )
    for warning in history.warnings:
        print(f"tokrate: warning: {warning}", file=sys.stderr)
    print(
        f"history: {history.runs} runs, {history.changes.height} change(s) detected "
        f"-> {out / 'history.html'}"
    )
    return 0


# --- main --------------------------------------------------------------------------


def build_parser() -> _Parser:
    parser = _Parser(prog="tokrate", description="Client-side LLM speed benchmarks.")
    parser.add_argument("--version", action="version", version=f"tokrate {__version__}")
    sub = parser.add_subparsers(dest="command", parser_class=_Parser, metavar="COMMAND")
    for add in (_add_run, _add_sim, _add_report, _add_compare, _add_history, _add_init):
        add(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``tokrate`` console script; returns the exit code."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
        if getattr(args, "func", None) is None:
            parser.print_help(sys.stderr)
            return 2
        return int(args.func(args))
    except TokrateError as err:
        print(f"tokrate: error: {err}", file=sys.stderr)
        return err.exit_code
    except KeyboardInterrupt:
        print("tokrate: interrupted", file=sys.stderr)
        return 130
