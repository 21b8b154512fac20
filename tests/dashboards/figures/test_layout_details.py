"""What a reader sees around the data: menus clear of the toolbar, named roofs, decade-only log
labels, percent ticks, and panel titles that name only what the run recorded."""

from __future__ import annotations

import math
from pathlib import Path

import plotly.graph_objects as go
import pytest

from dashboards.figures.latency import latency_cdf_figure
from dashboards.figures.roofline import (
    RooflinePoint,
    analytic_roofline_figure,
    roof_labels,
    roofline_figure,
    si_rate,
)
from dashboards.figures.roofline_inputs import roofline_inputs
from dashboards.figures.samples_figure import samples_figure
from dashboards.figures.timeline import timeline_figure
from dashboards.runview import RunView, load_run_view
from dashboards.style import MENU_ROW_PX, MODEBAR_BAND_PX, menu_top_px
from perfmodel.roofs import Roofs
from tests.support.dashboards_fakes import A100_ROOFS, make_run


@pytest.fixture(scope="module")
def gpu_run(tmp_path_factory: pytest.TempPathFactory) -> RunView:
    return load_run_view(make_run(tmp_path_factory.mktemp("gpu"), roofs=A100_ROOFS))


@pytest.fixture(scope="module")
def cpu_run(tmp_path_factory: pytest.TempPathFactory) -> RunView:
    return load_run_view(make_run(tmp_path_factory.mktemp("cpu"), gpu=False, seed=2))


def _legend_top_px(fig: go.Figure) -> float:
    return (1 - fig.layout.legend.y) * fig.layout.height


def _assert_menu_clear(fig: go.Figure) -> None:
    """The menu's row starts under the modebar's band and ends above the plot area (and above
    a legend laid out under the title)."""
    (menu,) = fig.layout.updatemenus
    assert menu.xanchor == "right" and menu.x == 1.0 and menu.yanchor == "top"
    top = menu_top_px(fig)
    assert top >= MODEBAR_BAND_PX
    assert top + MENU_ROW_PX <= fig.layout.margin.t
    if fig.layout.showlegend and fig.layout.legend.orientation == "h":
        assert _legend_top_px(fig) >= top + MENU_ROW_PX


def test_latency_buttons_sit_under_the_toolbar(gpu_run: RunView, cpu_run: RunView) -> None:
    single = latency_cdf_figure([gpu_run])
    _assert_menu_clear(single)
    assert [b.label for b in single.layout.updatemenus[0].buttons] == ["linear x", "log x"]
    # Several runs: a legend row under the title, moved under the buttons.
    several = latency_cdf_figure([gpu_run, cpu_run])
    assert several.layout.showlegend and several.layout.legend.orientation == "h"
    _assert_menu_clear(several)


def test_samples_dropdown_sits_under_the_toolbar(cpu_run: RunView) -> None:
    fig = samples_figure(cpu_run)
    assert fig is not None
    _assert_menu_clear(fig)


def test_si_rates_read_in_their_own_prefix() -> None:
    assert si_rate(425e9, "FLOP/s") == "425 GFLOP/s"
    assert si_rate(312e12, "FLOP/s") == "312 TFLOP/s"
    assert si_rate(30.3e9, "B/s") == "30.3 GB/s"
    assert si_rate(2.0e12, "B/s") == "2 TB/s"
    assert si_rate(512.0, "B/s") == "512 B/s"


def _annotation(fig: go.Figure, startswith: str) -> go.layout.Annotation:
    (found,) = [a for a in fig.layout.annotations if (a.text or "").startswith(startswith)]
    return found


def test_the_run_roofline_names_both_roofs_where_they_are_drawn(gpu_run: RunView) -> None:
    inputs = roofline_inputs(gpu_run)
    assert inputs.roofs is not None
    fig = roofline_figure(inputs)
    assert fig is not None
    compute_text, memory_text = roof_labels(inputs.roofs)
    assert compute_text == "compute roof 312 TFLOP/s" and memory_text == "memory roof 2 TB/s"
    compute, memory = _annotation(fig, compute_text), _annotation(fig, memory_text)
    # On the roofs (log10 coordinates): the flat part at the peak, the slope at intensity x bw.
    assert compute.y == pytest.approx(math.log10(312e12))
    assert memory.y == pytest.approx(memory.x + math.log10(2.0e12))
    assert 10**memory.x < inputs.roofs.ridge_flop_per_byte < 10**compute.x
    # Both labels inside the axes' ranges, so they are drawn.
    for note in (compute, memory):
        assert fig.layout.xaxis.range[0] < note.x <= fig.layout.xaxis.range[1]
        assert fig.layout.yaxis.range[0] < note.y < fig.layout.yaxis.range[1]


@pytest.mark.parametrize("axis", ["xaxis", "yaxis"])
def test_log_axes_label_decades_only(gpu_run: RunView, axis: str) -> None:
    fig = roofline_figure(roofline_inputs(gpu_run))
    assert fig is not None
    layout = fig.layout[axis]
    assert layout.type == "log" and layout.dtick == 1 and layout.exponentformat == "SI"
    assert layout.minor.dtick == "D1" and layout.minor.showgrid  # unlabelled minor grid
    low, high = layout.range
    assert high - low >= 1.5  # at least one decade label shows


def test_a_second_roof_says_which_it_is() -> None:
    roofs = [Roofs("A", "test", "bf16", 1e15, 2e12), Roofs("A", "test", "fp8", 2e15, 2e12)]
    points = [RooflinePoint("decode", "decode b=1", 1.0, 2e12, ("decode",))]
    fig = analytic_roofline_figure(roofs, points, "two roofs")
    texts = [a.text for a in fig.layout.annotations]
    assert "compute roof 1 PFLOP/s" in texts
    assert any(t.startswith("compute roof 2 PFLOP/s (A fp8") for t in texts)
    assert fig.layout.xaxis.dtick == 1 and fig.layout.yaxis.dtick == 1


def _subplot_titles(fig: go.Figure) -> list[str]:
    return [a.text for a in fig.layout.annotations if a.yref == "paper" and a.xref == "paper"]


def test_utilization_title_names_what_was_recorded(gpu_run: RunView, cpu_run: RunView) -> None:
    cpu_fig, _ = timeline_figure([cpu_run])
    assert "Utilization: CPU" in _subplot_titles(cpu_fig)
    assert not any("GPU" in t for t in _subplot_titles(cpu_fig) if t.startswith("Utilization"))
    gpu_fig, _ = timeline_figure([gpu_run])
    assert "Utilization: GPU, SM, tensor, CPU" in _subplot_titles(gpu_fig)


def test_percent_panels_say_percent_on_every_tick(cpu_run: RunView) -> None:
    fig, _ = timeline_figure([cpu_run])
    titles = _subplot_titles(fig)
    row = titles.index("KV cache occupancy") + 1
    kv_axis = fig.layout[f"yaxis{row if row > 1 else ''}"]
    assert kv_axis.title.text == "% of KV blocks used" and kv_axis.ticksuffix == "%"
    (kv,) = [t for t in fig.data if t.name.startswith("KV blocks used")]
    assert kv.name == "KV blocks used (of 512)"  # the pool the share is of
    assert 0 < max(v for v in kv.y if v == v) <= 100  # in percent, not a 0..1 fraction
    tokens_row = titles.index("Output tokens/s") + 1
    assert fig.layout[f"yaxis{tokens_row if tokens_row > 1 else ''}"].ticksuffix == ""


def test_a_bare_run_keeps_the_fixed_titles(tmp_path: Path) -> None:
    view = load_run_view(make_run(tmp_path, steps=False, samples=False, gpu=False, errors=False))
    fig, missing = timeline_figure([view])
    assert "Utilization: GPU, SM, tensor, CPU" in missing  # named as the panel is documented
    assert not any(t.startswith("Utilization") for t in _subplot_titles(fig))
