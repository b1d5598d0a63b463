"""``requests = "auto"`` (``--requests auto``): each level keeps sending until every
statistic the run will judge has enough samples, or its budget ends.

**What "enough" means** is the rule the verdicts use
(:func:`tokrate.analysis.early_stopping.samples_needed`): a percentile needs MLPerf
LoadGen's early-stopping minimum at 99% confidence (11 for a p50, 64 for a p90, 130 for
a p95, 662 for a p99), a mean or a rate compare's least sample count (10). The statistics
judged are the thresholds' (``[compare] thresholds`` over the defaults: ttft_p95,
tpot_p50, e2e_p95, decode_tps_p50, error_rate; a ``ttft_p99`` threshold asks for 662). The
largest of their needs is the level's target, counted in *ok* requests (the
latency percentiles are judged on the ok requests alone, so a failed request does not
count toward it), per target: a level stops when every one of its targets has that many
ok measured requests (:class:`AutoSample` sets the level's own stop; requests in flight
then finish in their grace period and are kept).

**The budget**: ``load.max_requests`` measured requests per target and level (default
1000; the plan sends no more), and ``duration_s`` when set. A level that ends on its
budget says so: run.json ``sampling`` records per target and level why it stopped
(``"judged"``: every statistic has its samples; ``"max_requests"``, ``"duration"`` or
``"stopped"`` otherwise), with its ok requests and the number it needed.

Not covered yet: the tier pick's SLO-met share and the pass rates against their bars
(their own intervals decide how many they need): the level stops on the thresholds'
statistics alone.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

from tokrate.analysis.early_stopping import samples_needed
from tokrate.load.worker.events import Event, LoopLag, RequestFinished
from tokrate.load.worker.stopping import Stop
from tokrate.runfolder.run_info import SamplingStop
from tokrate.spec.thresholds import merge_thresholds, parse_threshold

__all__ = ["AUTO_LEAST", "AutoSample", "judged_need"]

#: The fewest values compare judges a mean or a rate on (CompareSettings.min_samples).
AUTO_LEAST: Final = 10


def judged_need(thresholds: Iterable[str]) -> tuple[int, str]:
    """The ok requests per target and level every judged statistic needs (module doc),
    and the statistic that needs the most."""
    metrics = [t.metric for t in merge_thresholds(parse_threshold(t) for t in thresholds)]
    needs = [(samples_needed(m, AUTO_LEAST), m) for m in metrics if m != "capacity"]
    return max(needs, default=(AUTO_LEAST, "error_rate"))


class AutoSample:
    """Watches one level's records and sets its ``stop`` once each of its ``targets``
    (how many targets the level holds) has ``need`` ok measured requests; follows the
    run's stop (``run_stop``) both ways: a stop of the run stops the level."""

    def __init__(self, scenario: str, targets: int, need: int, stop: Stop, run_stop: Stop) -> None:
        self.scenario = scenario
        self.targets = targets
        self.need = need
        self.stop = stop
        self.run_stop = run_stop
        self.ok: dict[tuple[str, str], int] = {}
        self.sent: dict[tuple[str, str], int] = {}
        self.judged = False

    def on_event(self, event: Event) -> None:
        if self.run_stop.is_set() and not self.stop.is_set():
            self.stop.set()
        if self.run_stop.aborted and not self.stop.aborted:
            self.stop.abort()
        if isinstance(event, LoopLag) or not isinstance(event, RequestFinished):
            return
        record = event.record
        if record.scenario != self.scenario or record.warmup:
            return
        key = (record.endpoint, record.model)
        self.sent[key] = self.sent.get(key, 0) + 1
        if record.status != "ok":
            return
        self.ok[key] = self.ok.get(key, 0) + 1
        if self.judged:
            return
        done = sum(1 for n in self.ok.values() if n >= self.need)
        if done >= self.targets:
            self.judged = True
            self.stop.set()

    def outcome(self, max_requests: int, duration_bound: bool) -> list[SamplingStop]:
        """Why the level stopped, per target it measured (module doc)."""
        out = []
        for (endpoint, model), sent in sorted(self.sent.items()):
            ok = self.ok.get((endpoint, model), 0)
            if ok >= self.need:
                reason = "judged"
            elif self.run_stop.is_set():
                reason = "stopped"
            elif sent >= max_requests or not duration_bound:
                reason = "max_requests"
            else:
                reason = "duration"
            out.append(SamplingStop(self.scenario, endpoint, model, sent, ok, self.need, reason))
        return out
