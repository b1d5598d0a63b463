"""``tokrate sim``: serve the simulated endpoint."""

from __future__ import annotations

import argparse
import re
from collections.abc import Sequence

from tokrate.cli._common import Subparsers
from tokrate.errors import UsageError

__all__ = ["add_sim"]


def add_sim(sub: Subparsers) -> None:
    p = sub.add_parser("sim", help="serve the built-in simulated OpenAI endpoint")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=0, help="port (default 0: any free port)")
    p.add_argument("--tiers", metavar="FILE.toml", help="tiers file (replaces the defaults)")
    p.add_argument(
        "--hardware",
        default="a100-80g",
        metavar="PROFILE",
        help="GPU profile name, bandwidth=900GB/s[,flops=..,memory=..] or a .toml file",
    )
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
    p.add_argument(
        "--prefix-cache",
        action="store_true",
        help="each tier caches prompt prefixes: a cached prefix skips its prefill",
    )
    p.add_argument(
        "--prefix-cache-cold",
        action="store_true",
        help="prompts are looked up in a prefix cache that keeps nothing: usage reports 0"
        " cached tokens (a provider whose cache stopped working)",
    )
    p.add_argument(
        "--request-metrics",
        action="store_true",
        help="chat/completions usage chunks carry a vLLM-style per-request 'metrics' object",
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

    from tokrate.sim.server import SimConfig, serve

    api_key = None
    if args.api_key:
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", args.api_key):
            # Never echo it: what was given is most likely the key itself.
            raise UsageError(
                "tokrate sim: --api-key takes the NAME of an environment variable that holds"
                " the key (e.g. --api-key SIM_KEY), not the key itself"
            )
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
        prefix_cache=args.prefix_cache,
        prefix_cache_cold=args.prefix_cache_cold,
        request_metrics=args.request_metrics,
    )

    def ready(url: str) -> None:
        print(url, flush=True)

    serve(config, on_ready=ready)
    return 0
