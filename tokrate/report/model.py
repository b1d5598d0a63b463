"""The report model: what one report shows, built once and rendered many times.

Three steps, each a pure function of the one before:

1. :class:`ReportInputs` — the loaded runs and everything derived from them that more
   than one part of the report reads (recomputed summaries, combined records, target
   sizes, the size-vs-speed points and fits, comparisons), computed
   once by :func:`tokrate.report.contents.gather_inputs`.
2. :class:`ReportModel` — the report itself: title, metadata, warnings, tables, the
   declared charts (each a :class:`Chart`: its data, how to draw it, its caption) and
   what was left out, built by :func:`tokrate.report.contents.build_model` from the
   declarations listed in :mod:`tokrate.report.contents`.
3. Renderers turn the model into bytes: :func:`tokrate.report.drawing.draw_charts`
   (chart files and the PNGs the page embeds), then
   :mod:`tokrate.report.document` (report.html, summary.md). Rendering never changes
   the model, so any renderer may run any number of times, in any order.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import polars as pl

from tokrate.analysis.stats import PowerLawFit
from tokrate.analysis.tier_pick import TierDecision
from tokrate.hardware import HardwareProfile
from tokrate.report.styles import colors_in_use
from tokrate.report.tables import Table
from tokrate.runfolder.comparison import Comparison
from tokrate.runfolder.loaded_run import LoadedRun
from tokrate.runfolder.summary import Summary

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = [
    "Chart",
    "ChartDeclaration",
    "LeftOut",
    "MetaDeclaration",
    "ReportInputs",
    "ReportModel",
    "SizeSpeed",
    "TableDeclaration",
    "not_drawn",
]

D = TypeVar("D")


def not_drawn(title: str) -> str:
    """The "Left out" note of a chart that failed while it was declared or drawn.

    Every declaration checks its data and leaves a chart without data out with its
    own reason, so a failure is tokrate's fault, never the run's: the note says so in
    words, and what still holds, never with an exception's text (which tells a reader
    nothing; the model and the drawing keep it apart for debugging)."""
    return (
        f"{title}: left out: tokrate failed to draw it from these numbers, a fault in "
        "tokrate, not in the run (the tables hold the same numbers); please report it "
        "with the run folder"
    )


@dataclass(frozen=True, slots=True)
class Chart(Generic[D]):
    """One chart of the report: ``name`` is its file stem (charts/<name>.png),
    ``title`` its heading, ``caption`` what it shows, ``data`` what it is drawn from
    and ``draw`` how (a pure function of ``data`` returning a new figure). ``colors``
    is the report's colour per model (:attr:`ReportModel.colors`, set when the model is
    built), so a model looks the same in every chart."""

    name: str
    title: str
    caption: str
    data: D
    draw: Callable[[D], Figure]
    colors: Mapping[str, str] = field(default_factory=dict)

    def figure(self) -> Figure:
        """A new figure of this chart (each call draws it again), in the report's
        model colours."""
        with colors_in_use(self.colors):
            return self.draw(self.data)


@dataclass(frozen=True, slots=True)
class LeftOut:
    """Why something is not in the report: one line under "Left out" in both documents
    (e.g. "cost vs speed: no prices (set price_out_per_m ...)")."""

    note: str


@dataclass(frozen=True, slots=True)
class SizeSpeed:
    """The size-vs-speed chart's points (tokrate.report.data.size_speed_points), the
    notes on targets left out of it, and the power law fitted per series (family)."""

    points: pl.DataFrame
    notes: tuple[str, ...]
    fits: Mapping[str, PowerLawFit]

    @property
    def per_gpu(self) -> bool:
        """True when some target has several GPUs: the fits are then on speeds
        divided by each target's bandwidth scale (the one-GPU curve)."""
        return bool(self.points.height and (self.points["gpu_scale"] > 1).any())


@dataclass(frozen=True, slots=True)
class ReportInputs:
    """The runs of one report and what is derived from them once, for every part.

    ``runs`` and ``summaries`` are keyed by the run's unique name (label, else id);
    summaries are recomputed from the records (groups ordered by model size, name,
    endpoint, level: tokrate.analysis.ordering). ``records`` is the combined, derived records of every run
    (tokrate.report.data.combine_runs), ``sizes`` the target table, ``groups`` the flat
    summary-group table; ``comparisons`` maps each later run's key to its comparison
    against the first (empty for one run).
    """

    runs: tuple[tuple[str, LoadedRun], ...]
    summaries: tuple[tuple[str, Summary], ...]
    hardware: HardwareProfile
    records: pl.LazyFrame
    sizes: pl.DataFrame
    groups: pl.DataFrame
    size_speed: SizeSpeed
    comparisons: Mapping[str, Comparison]
    #: One colour per model of every run, assigned once, models by size
    #: (tokrate.report.styles.model_colors); every chart draws with it.
    colors: Mapping[str, str] = field(default_factory=dict)
    #: Whether someone named the bound's hardware (--hardware, or the run's [output]
    #: hardware); False: tokrate's default profile, an assumption the charts state.
    hardware_named: bool = True

    @property
    def multi(self) -> bool:
        """True when the report shows several runs side by side."""
        return len(self.runs) > 1

    def prefix(self, key: str) -> str:
        """What a run's lines start with: "key: " in a multi-run report, else nothing."""
        return f"{key}: " if self.multi else ""


#: A chart declaration: from the inputs, the charts it contributes (usually one) and
#: the notes on what it left out. Listed, in report order, in tokrate.report.contents.
ChartDeclaration = Callable[[ReportInputs], Iterable["Chart[Any] | LeftOut"]]
#: A table declaration: the tables (and left-out notes) of one report section.
TableDeclaration = Callable[[ReportInputs], Iterable["Table | LeftOut"]]
#: A metadata declaration: (key, value) lines under the title.
MetaDeclaration = Callable[[ReportInputs], Iterable[tuple[str, str]]]


@dataclass(frozen=True, slots=True)
class ReportModel:
    """Everything one report shows, in the order it shows it; renderers only turn
    it into bytes."""

    title: str
    #: Interrupted runs: one banner line each.
    banners: tuple[str, ...]
    meta: tuple[tuple[str, str], ...]
    warnings: tuple[str, ...]
    #: What the report answers first: in a multi-run report, whether each later run
    #: changed from the first (the sentences open ``verdict``; the tables come first).
    lead: tuple[Table, ...]
    #: The tier pick: the decision, its verdict sentences and its tables.
    decision: TierDecision
    verdict: tuple[str, ...]
    tier: tuple[Table, ...]
    tables: tuple[Table, ...]
    charts: tuple[Chart[Any], ...]
    left_out: tuple[str, ...]
    errors: Table
    #: (run key, run.json config) per run; renderers redact secrets.
    configs: tuple[tuple[str, Any], ...]
    #: One colour per model, the same in every chart (ReportInputs.colors).
    colors: Mapping[str, str] = field(default_factory=dict)
    #: (declaration, error) of every chart declaration that raised (never shown: its
    #: note in ``left_out`` says it in words); for tests and debugging.
    faults: tuple[tuple[str, str], ...] = ()

    def chart(self, name: str) -> Chart[Any] | None:
        """The declared chart named ``name``, or None when it was left out."""
        return next((c for c in self.charts if c.name == name), None)
