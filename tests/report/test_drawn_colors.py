"""What a drawn chart shows per model, read back from the figure (issue 44): the page
carries it on each chart so a test can hold every chart to the report's colour per
model. The reader must see a wrong colour, and every chart of a report drawn from
the simulator's tiers keeps to the report model's colours in its SVG file too."""

from __future__ import annotations

from pathlib import Path

from helpers.synthetic import synthetic_run
from matplotlib.figure import Figure

from tokrate.report.contents import build_model, load_inputs
from tokrate.report.drawing import draw_charts
from tokrate.report.drawn_colors import read_drawn
from tokrate.report.figures import house_style, new_figure


@house_style
def _figure() -> Figure:
    fig, (ax,) = new_figure(4, 3)
    ax.plot([1, 2], [1, 2], color="#1f77b4", label="sim-1b (n=30)")
    ax.plot([1, 2], [2, 3], color="#1f77b4", label="sim-7b · night-a")  # the wrong colour
    ax.scatter([1], [3], color="#2ca02c", label="sim-1b-instruct")
    ax.fill_between([1, 2], [0, 0], [1, 1], color="#d62728", alpha=0.2, label="sim-7b band")
    ax.annotate("sim-7b", (1, 1), color="0.2")  # neutral text: names, does not colour
    ax.annotate("sim-13b c=8", (2, 2), color="#9467bd")
    ax.legend()
    return fig


def test_the_colours_each_model_is_drawn_in_are_read_back() -> None:
    drawn = read_drawn(_figure(), ["sim-1b", "sim-7b", "sim-13b", "sim-1b-instruct"])
    assert drawn.colors == {
        "sim-1b": ("#1f77b4",),
        "sim-7b": ("#1f77b4", "#d62728"),
        "sim-13b": ("#9467bd",),
        "sim-1b-instruct": ("#2ca02c",),
    }
    assert drawn.legend == ("sim-1b (n=30)", "sim-7b · night-a", "sim-1b-instruct", "sim-7b band")


def test_every_chart_keeps_to_the_report_models_colours(tmp_path: Path) -> None:
    """Two runs of the simulator's six tiers: each chart shows each model in the
    report's colour only, its SVG file holds that colour, and every model shows."""
    a = synthetic_run(tmp_path / "a", run_id="a", concurrency=(1, 4), requests_per_level=8)
    b = synthetic_run(tmp_path / "b", run_id="b", concurrency=(1, 4), requests_per_level=8)
    model = build_model(load_inputs([a, b]))
    files: dict[str, bytes] = {}
    drawn = draw_charts(model.charts, ("svg",), lambda n, f, data: files.update({n: data}))
    assert drawn.failures == ()
    shown: set[str] = set()
    for image in drawn.images:
        for name, used in image.colors.items():
            assert tuple(used) == (model.colors[name],), (image.name, name, used)
            assert model.colors[name].encode() in files[image.name], (image.name, name)
        shown |= set(image.colors)
    assert shown == set(model.colors) and len(model.colors) == 6
