"""The roofline's inputs read from a run folder (attribution from results.figures.attribution only),
and the one figure module drawn from them."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from dashboards.figures.roofline import roofline_figure
from dashboards.figures.roofline_inputs import RooflineInputs, phase_points, roofline_inputs
from dashboards.runview import load_run_view
from perfmodel.roofs import Roofs
from results.figures.attribution import step_attribution
from results.folder.run_folder import load_run
from results.run_summary import summarize_run
from tests.support.dashboards_fakes import A100_ROOFS, make_run


def bar_shares(fig) -> dict[str, float]:
    return {t.name: t.x[0] for t in fig.data if t.type == "bar"}


def test_the_dashboards_prefill_and_decode_figures_are_the_summarys(tmp_path: Path) -> None:
    view = load_run_view(make_run(tmp_path, samples=False, roofs=A100_ROOFS))
    recorded = view.summary["attribution"]
    assert recorded["available"]
    inputs = roofline_inputs(view)
    # Read, not recomputed: the very dict summary.json holds, named as such.
    assert inputs.attribution == recorded
    assert inputs.attribution_source.startswith("summary.json")
    assert "roofline time of each part" in inputs.attribution_source
    assert inputs.roofs == Roofs.from_dict(A100_ROOFS)
    assert inputs.roofs.label == "NVIDIA A100 80GB bf16"
    assert inputs.roofs.ridge_flop_per_byte == pytest.approx(156.0)
    # One point per part, at the part's intensity; its height over the peak is the part's MFU,
    # its share the part's share of step time.
    points = {p.phase: p for p in inputs.points}
    assert set(points) == {"prefill", "decode"}
    for phase, point in points.items():
        part = recorded[phase]
        assert point.intensity == pytest.approx(part["arithmetic_intensity"])
        assert point.flops_per_s / 312e12 == pytest.approx(part["mfu"])
        assert point.share == pytest.approx(part["time_s"] / recorded["busy_s"])
    fig = roofline_figure(inputs)
    assert fig is not None
    busy = recorded["busy_s"]
    bound = recorded["bound_time_s"]
    assert bar_shares(fig) == pytest.approx(
        {
            "prefill": recorded["prefill"]["time_s"] / busy,
            "decode": recorded["decode"]["time_s"] / busy,
            "memory-bound": bound["memory"] / busy,
            "compute-bound": bound["compute"] / busy,
        }
    )
    labels = {t.name: t.text[0] for t in fig.data if t.name.endswith("(all steps)")}
    share = round(recorded["prefill"]["time_s"] / busy * 100)
    assert labels["prefill (all steps)"] == f"prefill {share}%"
    assert f"MFU {recorded['mfu'] * 100:.3g}%" in fig.layout.annotations[1].text
    # The faint per-step dots come from the same analytic model.
    assert inputs.steps is not None and "analytic model" in inputs.costs_source
    (roof,) = [t for t in fig.data if t.name.startswith("roofs")]
    # The roof is flat at the peak past the ridge, and bandwidth-limited before it.
    assert roof.y[1] == roof.y[2] == 312e12
    assert roof.y[0] == pytest.approx(roof.x[0] * 2.0e12)


def test_without_a_recorded_attribution_results_computes_it(tmp_path: Path) -> None:
    run = make_run(tmp_path, samples=False, roofs=A100_ROOFS, attribution={})
    view = load_run_view(run)
    inputs = roofline_inputs(view)
    assert "results.figures.attribution" in inputs.attribution_source
    # The same function, the same figures a fresh summary.json would hold.
    expected = step_attribution(view.steps, view.run_json["analytic"], view.summary["window"])
    assert inputs.attribution == expected
    assert inputs.attribution == summarize_run(load_run(run))["attribution"]
    att = inputs.attribution
    assert att["prefill"]["time_s"] + att["decode"]["time_s"] == pytest.approx(att["busy_s"])
    assert {p.phase for p in inputs.points} == {"prefill", "decode"}


def test_an_older_run_gets_its_roofs_and_attribution_as_bench_run_would(tmp_path: Path) -> None:
    # Recorded before run.json had "analytic": the section is rebuilt from the engine's
    # description, and the GPU's name finds its row in the hardware table.
    view = load_run_view(make_run(tmp_path, samples=False, analytic=False, attribution={}))
    inputs = roofline_inputs(view)
    assert inputs.roofs is not None, inputs.notes
    assert "H100" in inputs.roofs.name and inputs.roofs.source.startswith("hardware table")
    # The datasheet's BF16 dense peak over HBM3 bandwidth: the H100's ridge is about 295.
    assert inputs.roofs.ridge_flop_per_byte == pytest.approx(295, rel=0.01)
    assert inputs.attribution["available"] and inputs.points
    assert Roofs.from_dict(inputs.attribution["roofs"]) == inputs.roofs


def test_recorded_attribution_bars_without_steps(tmp_path: Path) -> None:
    recorded = {
        "available": True,
        "prefill": {"time_s": 1.0, "flops": 4e15, "bytes": 2e12, "forward_s": 0.9},
        "decode": {"time_s": 3.0, "flops": 1e14, "bytes": 5e13, "forward_s": 2.8},
        "bound_time_s": {"memory": 3.5, "compute": 0.5},
        "mfu": 0.2,
        "mbu": 0.6,
        "roofs": A100_ROOFS,
    }
    view = load_run_view(make_run(tmp_path, steps=False, samples=False, attribution=recorded))
    inputs = roofline_inputs(view)
    assert inputs.steps is None and inputs.roofs is not None
    shares = {p.phase: p.share for p in inputs.points}
    assert shares == pytest.approx({"prefill": 0.25, "decode": 0.75})
    fig = roofline_figure(inputs)
    assert fig is not None
    assert bar_shares(fig) == pytest.approx(
        {"prefill": 0.25, "decode": 0.75, "memory-bound": 0.875, "compute-bound": 0.125}
    )
    assert "MFU 20%" in fig.layout.annotations[1].text


def test_nothing_to_draw_is_said_not_drawn(tmp_path: Path) -> None:
    run = make_run(tmp_path, steps=False, samples=False, gpu=False)
    inputs = roofline_inputs(load_run_view(run))
    assert inputs.roofs is None and not inputs.points
    notes = " ".join(inputs.notes)
    assert "no roofs given to the fake run" in notes and "No steps.parquet" in notes
    assert roofline_figure(inputs) is None


def test_a_broken_model_description_is_a_note(tmp_path: Path) -> None:
    view = load_run_view(make_run(tmp_path, samples=False, attribution={}))
    view.run_json["analytic"]["model_config"] = {"name": "broken"}
    inputs = roofline_inputs(view)
    assert not inputs.points and not inputs.attribution
    assert any("could not cost the steps" in n for n in inputs.notes)
    assert any("attribution could not be computed" in n for n in inputs.notes)


def test_points_sized_by_share_of_time_at_their_intensity() -> None:
    attribution = {
        "prefill": {"time_s": 0.2, "forward_s": 0.2, "flops": 5e13, "bytes": 1e11},
        "decode": {"time_s": 0.2, "forward_s": 0.2, "flops": 2e12, "bytes": 2e11},
        "bound_time_s": {"memory": 0.2, "compute": 0.2},
    }
    steps = pd.DataFrame(
        {
            "flops": [1e12, 1e12, 5e13],
            "bytes": [1e11, 1e11, 1e11],
            "time_s": [0.1, 0.1, 0.2],
            "busy_s": [0.1, 0.1, 0.2],
            "phase": ["decode", "decode", "prefill"],
        }
    )
    roofs = Roofs("t", "t", "bf16", 1e15, 1e12)
    inputs = RooflineInputs(
        roofs=roofs, steps=steps, points=phase_points(attribution), attribution=attribution
    )
    fig = roofline_figure(inputs)
    assert fig is not None
    sizes = {t.name: t.marker.size for t in fig.data if t.name.endswith("(all steps)")}
    assert sizes["decode (all steps)"] == sizes["prefill (all steps)"]
    x_prefill = next(t.x[0] for t in fig.data if t.name == "prefill (all steps)")
    assert x_prefill == pytest.approx(500.0)
    assert {t.name for t in fig.data if t.name.endswith(" steps")} == {"prefill steps",
                                                                        "decode steps"}  # fmt: skip
    assert fig.layout.xaxis.type == "log" and fig.layout.yaxis.type == "log"
