"""The roofline's inputs from wherever a run recorded them, and the figure drawn from them."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from dashboards.roofline import roofline_figure
from dashboards.roofline_inputs import RooflineInputs, Roofs, phase_points, roofline_inputs
from dashboards.runview import load_run_view
from tests.support.dashboards_fakes import A100_ROOFS, make_run


def test_the_summarys_attribution_and_roofs_are_drawn(tmp_path: Path) -> None:
    view = load_run_view(make_run(tmp_path, samples=False, roofs=A100_ROOFS))
    recorded = view.summary.get("attribution") or {}
    if not recorded.get("available"):
        pytest.skip("results.run_summary does not write an attribution yet")
    inputs = roofline_inputs(view)
    assert inputs.roofs is not None
    assert inputs.roofs.ridge_flops_per_byte == pytest.approx(156.0)
    assert inputs.roofs.name == "NVIDIA A100 80GB bf16"
    assert inputs.attribution["mfu"] == recorded["mfu"]
    assert inputs.attribution["prefill_s"] == recorded["prefill"]["time_s"]
    # One point per part, at the part's intensity; achieved FLOP/s over executor time: the
    # point's height over the peak is the part's MFU.
    points = {p.phase: p for p in inputs.points}
    assert set(points) == {"prefill", "decode"}
    for phase, point in points.items():
        part = recorded[phase]
        assert point.intensity == pytest.approx(part["arithmetic_intensity"])
        assert point.flops_per_s / 312e12 == pytest.approx(part["mfu"])
    assert sum(p.share for p in inputs.points) == pytest.approx(1.0)
    assert "summary.json" in inputs.attribution_source
    # The faint per-step dots come from the same analytic model.
    assert inputs.steps is not None and "analytic model" in inputs.costs_source
    fig = roofline_figure(inputs)
    assert fig is not None
    (roof,) = [t for t in fig.data if t.name.startswith("roofs")]
    # The roof is flat at the peak past the ridge, and bandwidth-limited before it.
    assert roof.y[1] == roof.y[2] == 312e12
    assert roof.y[0] == pytest.approx(roof.x[0] * 2.0e12)


def test_attribution_is_computed_here_when_the_summary_has_none(tmp_path: Path) -> None:
    run = make_run(tmp_path, samples=False, roofs=A100_ROOFS, attribution={})
    inputs = roofline_inputs(load_run_view(run))
    assert inputs.roofs is not None and "computed here" in inputs.attribution_source
    att = inputs.attribution
    assert att["prefill_s"] + att["decode_s"] == pytest.approx(inputs.steps["time_s"].sum())
    assert att["memory_bound_s"] + att["compute_bound_s"] == pytest.approx(
        inputs.steps["time_s"].sum()
    )
    assert att["mfu"] == pytest.approx(
        inputs.steps["flops"].sum() / inputs.steps["busy_s"].sum() / 312e12
    )
    assert {p.phase for p in inputs.points} <= {"prefill", "decode", "mixed"}


def test_roofs_from_the_hardware_table_for_an_older_run(tmp_path: Path) -> None:
    # Recorded before run.json had "analytic": the GPU's name finds its row in the table.
    view = load_run_view(make_run(tmp_path, samples=False, analytic=False, attribution={}))
    inputs = roofline_inputs(view)
    assert inputs.roofs is not None, inputs.notes
    assert "H100" in inputs.roofs.name
    # The datasheet's BF16 dense peak over HBM3 bandwidth: the H100's ridge is about 295.
    assert inputs.roofs.ridge_flops_per_byte == pytest.approx(295, rel=0.01)
    assert inputs.points


def test_probes_attribution_bars(tmp_path: Path) -> None:
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
    bars = {t.name: t.x[0] for t in fig.data if t.type == "bar"}
    assert bars == pytest.approx(
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
    assert not inputs.points
    assert any("could not cost the steps" in n for n in inputs.notes)


def test_points_sized_by_share_of_time_at_their_intensity() -> None:
    steps = pd.DataFrame(
        {
            "flops": [1e12, 1e12, 5e13],
            "bytes": [1e11, 1e11, 1e11],
            "time_s": [0.1, 0.1, 0.2],
            "busy_s": [0.1, 0.1, 0.2],
            "phase": ["decode", "decode", "prefill"],
            "prefill_tokens": [0, 0, 500],
            "decode_tokens": [8, 8, 0],
        }
    )
    inputs = RooflineInputs(
        roofs=Roofs("t", 1e15, 1e12, "t"), steps=steps, points=phase_points(steps)
    )
    fig = roofline_figure(inputs)
    assert fig is not None
    sizes = {t.name: t.marker.size for t in fig.data if t.name.endswith("(all steps)")}
    assert sizes["decode (all steps)"] == sizes["prefill (all steps)"]
    x_prefill = next(t.x[0] for t in fig.data if t.name == "prefill (all steps)")
    assert x_prefill == pytest.approx(500.0)
    assert fig.layout.xaxis.type == "log" and fig.layout.yaxis.type == "log"
