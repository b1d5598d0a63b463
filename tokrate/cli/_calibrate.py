"""``tokrate calibrate``: this machine's measurement floor (tokrate.load.calibrate measures it)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from tokrate.cli._common import Subparsers
from tokrate.errors import UsageError

__all__ = ["add_calibrate"]


def add_calibrate(sub: Subparsers) -> None:
    p = sub.add_parser(
        "calibrate",
        help="measure this machine's timestamp floor against a local simulator",
    )
    p.add_argument(
        "--concurrency",
        default="1,32,256,1024",
        metavar="N,N,...",
        help="streams per level (default 1,32,256,1024)",
    )
    p.add_argument(
        "--output",
        metavar="FILE.json",
        help="where to save it (default $TOKRATE_CALIBRATION or ~/.cache/tokrate/calibration.json)",
    )
    p.add_argument(
        "--kernel-stamps",
        choices=("auto", "on", "off"),
        default="auto",
        help="stamp mode to calibrate (default auto, what tokrate run uses)",
    )
    p.add_argument("--requests-per-stream", type=int, default=2, metavar="N", help="default 2")
    p.add_argument(
        "--workers",
        default="auto",
        metavar="N|auto",
        help="worker processes per level (default auto: what tokrate run picks for it)",
    )
    p.set_defaults(func=_cmd_calibrate)


def _cmd_calibrate(args: argparse.Namespace) -> int:
    from tokrate.load.calibrate import calibrate, parse_concurrency
    from tokrate.report.calibration import render_calibration
    from tokrate.runfolder.calibration import default_calibration_path, save_calibration

    try:
        levels = parse_concurrency(args.concurrency)
    except UsageError as err:
        raise UsageError(f"tokrate calibrate: --concurrency {err}") from None
    if args.requests_per_stream < 1:
        raise UsageError("tokrate calibrate: --requests-per-stream must be >= 1")
    workers = args.workers
    if workers != "auto":
        if not workers.isdigit() or int(workers) < 1:
            raise UsageError(
                f"tokrate calibrate: --workers expects a number >= 1 or auto, got {workers!r}"
            )
        workers = int(workers)
    path = Path(args.output) if args.output else default_calibration_path()

    def progress(level: object) -> None:
        n = getattr(level, "concurrency", "?")
        print(f"calibrated {n} streams", file=sys.stderr, flush=True)

    result = calibrate(
        levels,
        kernel_stamps=args.kernel_stamps,
        requests_per_stream=args.requests_per_stream,
        on_level=progress,
        workers=workers,
    )
    save_calibration(result, path)
    print("\n".join(render_calibration(result, path)))
    return 0
