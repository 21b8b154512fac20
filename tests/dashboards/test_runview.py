"""Reading run folders for drawing: derived figures agree with summary.json; missing or
other-version optional files become notes, never exceptions."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from dashboards.figures.samples import find
from dashboards.runview import load_run_view
from results.folder.run_folder import RunFolderError
from tests.support.dashboards_fakes import make_run


@pytest.fixture(scope="module")
def full(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_run(tmp_path_factory.mktemp("full"), warmup_s=0.05)


@pytest.fixture(scope="module")
def bare(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_run(
        tmp_path_factory.mktemp("bare"),
        steps=False,
        samples=False,
        summary=False,
        gpu=False,
        errors=False,
    )


def test_per_request_figures_reproduce_the_summary_percentiles(full: Path) -> None:
    view = load_run_view(full)
    measured = view.requests[view.requests["measured"]]
    assert len(measured) == view.summary["counts"]["window"]["ok"]
    for key in ("ttft_ms", "tpot_ms", "e2el_ms"):
        values = measured[key].dropna().to_numpy()
        assert np.percentile(values, 50) == pytest.approx(view.summary[key]["p50"])
        assert np.percentile(values, 99) == pytest.approx(view.summary[key]["p99"])
    itl, fraction = view.itl_cdf(max_points=10**6)  # every value of this small run
    assert itl.size == view.summary["itl_ms"]["count"] and fraction[-1] == 1.0
    assert (np.diff(itl) >= 0).all()
    assert np.percentile(itl, 90) == view.summary["itl_ms"]["p90"]
    # Thinned, the curve keeps its ends: the exact min and max.
    thin, _ = view.itl_cdf(max_points=5)
    assert thin.size == 5 and thin[0] == itl[0] and thin[-1] == itl[-1]
    tps = measured["tps"].dropna().to_numpy()
    assert np.percentile(tps, 10) == pytest.approx(view.summary["per_user_tps"]["p10"])


def test_a_complete_run_has_no_notes_but_its_gpu_ones(full: Path) -> None:
    view = load_run_view(full, label="mine")
    assert view.label == "mine"
    assert view.steps is not None and view.samples is not None
    assert view.notes == []
    assert view.run_end_s > 0


def test_a_bare_run_says_what_it_did_not_record(bare: Path) -> None:
    view = load_run_view(bare)
    texts = " ".join(n.text for n in view.notes)
    assert "summary.json is missing" in texts
    assert "No steps.parquet" in texts
    assert "No samples.parquet" in texts
    assert "No GPU" in texts
    assert view.summary["counts"]["all"]["requests"] == len(view.requests)
    assert {n.topic for n in view.notes} == {"run", "steps", "timeline"}


def test_samples_labels_become_short_legend_text(full: Path) -> None:
    view = load_run_view(full)
    (gpu,) = find(view.samples, "gpu_util")
    assert gpu.name == "GPU util [gpu=0]"
    (kv,) = find(view.samples, "kv_cache")
    # Recorded as a 0..1 fraction with the engine's own name in the labels: shown in %.
    assert kv.name == "KV cache used" and kv.values.max() > 1.0
    assert find(view.samples, "power")[0].values.min() >= 300


def test_steps_of_another_version_are_read_leniently(tmp_path: Path) -> None:
    run = make_run(tmp_path, samples=False)
    steps = pd.read_parquet(run / "steps.parquet").drop(columns=["num_preemptions"])
    steps["new_column_from_the_future"] = 1
    steps.to_parquet(run / "steps.parquet")
    view = load_run_view(run)
    assert view.steps is not None and "new_column_from_the_future" in view.steps.columns
    # A file lacking a column the figures use is a note, and the page goes on without it.
    steps.drop(columns=["num_running"]).to_parquet(run / "steps.parquet")
    view = load_run_view(run)
    assert view.steps is None
    assert any("lacks columns num_running" in n.text for n in view.notes)


def test_unreadable_samples_are_a_note(tmp_path: Path) -> None:
    run = make_run(tmp_path, samples=False)
    (run / "samples.parquet").write_text("not parquet")
    view = load_run_view(run)
    assert view.samples is None
    assert any("samples.parquet" in n.text for n in view.notes)


def test_a_summary_of_another_version_is_recomputed_with_a_note(tmp_path: Path) -> None:
    run = make_run(tmp_path, samples=False)
    summary = json.loads((run / "summary.json").read_text())
    (run / "summary.json").write_text(json.dumps({**summary, "schema_version": 99}))
    view = load_run_view(run)
    assert view.summary["counts"] == summary["counts"]
    (note,) = [n.text for n in view.notes if n.text.startswith("summary.json")]
    assert "could not be read" in note and "schema_version 99" in note


def test_a_folder_that_is_not_a_run_is_refused(tmp_path: Path) -> None:
    with pytest.raises(RunFolderError, match="not a run folder"):
        load_run_view(tmp_path)
    (tmp_path / "run.json").write_text(json.dumps({}))
    with pytest.raises(RunFolderError, match=r"requests\.parquet"):
        load_run_view(tmp_path)
