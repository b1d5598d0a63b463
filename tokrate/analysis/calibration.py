"""Whether a finished run stayed inside this machine's measurement floor: run.json's
``calibration`` verdict.

:func:`judge_run` compares a run with a saved calibration
(:mod:`tokrate.runfolder.calibration`): the floor holds for a run whose loop lag p99
and send delay p99 stay within the loop lag the client had at the calibrated level that
covers the run's concurrency (plus :data:`LAG_TOLERANCE_MS`): then its stamps are as
far from the server's write times as the calibration measured, no further.
:func:`run_envelope` reads those figures from the run's records (ms throughout).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Final

from tokrate.errors import UsageError
from tokrate.runfolder.calibration import Calibration, default_calibration_path, load_calibration

__all__ = ["LAG_TOLERANCE_MS", "judge_run", "run_envelope"]

#: Slack on the calibrated loop lag before a run counts as outside (scheduler jitter).
LAG_TOLERANCE_MS: Final = 1.0


def judge_run(
    calibration: Calibration | None,
    *,
    path: Path,
    concurrency: int,
    loop_lag_p99_ms: float,
    send_delay_p99_ms: float | None,
    stamp_source: str | None = None,
) -> dict[str, Any]:
    """run.json's ``calibration`` object: ``inside`` True/False (None: no calibration)
    and one ``reason`` line a reader can act on. ``stamp_source``: the run's stamps
    ("kernel", "user", "mixed"); a run with user stamps is outside a floor measured
    with kernel stamps."""
    out: dict[str, Any] = {
        "path": str(path),
        "inside": None,
        "concurrency": concurrency,
        "loop_lag_p99_ms": round(loop_lag_p99_ms, 3),
        "send_delay_p99_ms": None if send_delay_p99_ms is None else round(send_delay_p99_ms, 3),
    }
    if calibration is None:
        out["reason"] = "this machine is not calibrated (run tokrate calibrate)"
        return out
    out["created_at"] = calibration.created_at
    level = calibration.level_for(concurrency)
    if level is None:
        top = max(lv.concurrency for lv in calibration.levels)
        out["inside"] = False
        out["reason"] = f"concurrency {concurrency} is beyond the calibrated {top}"
        return out
    bound = level.loop_lag_p99_ms + LAG_TOLERANCE_MS
    out.update(
        level=level.concurrency,
        bound_ms=round(bound, 3),
        stamp_lag_mean_ms=level.lag_mean_ms,
        stamp_lag_p99_ms=level.lag_p99_ms,
        stamp_source=level.stamp_source,
    )
    worst = [("loop lag p99", loop_lag_p99_ms)]
    if send_delay_p99_ms is not None:
        worst.append(("send delay p99", send_delay_p99_ms))
    over = [(name, v) for name, v in worst if v > bound]
    user_run = stamp_source is not None and stamp_source != "kernel"
    out["inside"] = not over and not (user_run and level.stamp_source == "kernel")
    if not over and not out["inside"]:
        out["reason"] = (
            f"the run's stamps are {stamp_source}, the c={level.concurrency} floor was"
            " measured with kernel stamps: user stamps carry the loop's lag"
        )
    elif over:
        name, value = over[0]
        out["reason"] = (
            f"{name} {value:.1f} ms > {bound:.1f} ms calibrated at c={level.concurrency}:"
            " stamps may be later than the calibrated floor"
        )
    else:
        out["reason"] = (
            f"within the c={level.concurrency} floor: stamp lag {level.lag_mean_ms:.2f} ms mean"
            f" / {level.lag_p99_ms:.2f} ms p99 ({level.stamp_source} stamps)"
        )
    return out


def run_envelope(frame: Any, loop_lag_p99_ms: float, path: Path | None = None) -> dict[str, Any]:
    """:func:`judge_run` for a finished run's records (a polars frame, the measured
    ones count): its concurrency is the largest closed-loop level, else (open loop)
    the peak of requests in flight; its send delay the p99 of ``send_delay_s``. A
    calibration file that cannot be read is said in ``reason``, never raised: the
    run's measurements are already saved."""
    import polars as pl

    path = path or default_calibration_path()
    measured = frame.filter(~pl.col("warmup")) if frame.height else frame
    levels = measured["concurrency"].drop_nulls() if measured.height else None
    if levels is not None and len(levels):
        concurrency = int(levels.max())
    else:
        concurrency = _peak_in_flight(measured)
    delays = measured["send_delay_s"].drop_nulls() if measured.height else None
    send_p99 = (
        float(delays.quantile(0.99, "higher")) * 1e3 if delays is not None and len(delays) else None
    )
    sources = set(measured["stamp_source"].drop_nulls().to_list()) if measured.height else set()
    stamps = sources.pop() if len(sources) == 1 else ("mixed" if sources else None)
    try:
        calibration = load_calibration(path)
    except UsageError as err:
        out = judge_run(
            None,
            path=path,
            concurrency=concurrency,
            loop_lag_p99_ms=loop_lag_p99_ms,
            send_delay_p99_ms=send_p99,
        )
        out["reason"] = f"calibration not read: {err}"
        return out
    return judge_run(
        calibration,
        path=path,
        concurrency=concurrency,
        loop_lag_p99_ms=loop_lag_p99_ms,
        send_delay_p99_ms=send_p99,
        stamp_source=stamps,
    )


def _peak_in_flight(frame: Any) -> int:
    if not frame.height:
        return 0
    events: list[tuple[float, int]] = []
    for start, e2e in zip(frame["started_at"], frame["e2e_s"], strict=True):
        events.append((start, 1))
        events.append((start + (e2e or 0.0), -1))
    events.sort()
    peak = now = 0
    for _, step in events:
        now += step
        peak = max(peak, now)
    return peak
