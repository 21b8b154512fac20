"""The Pareto frontier of runs: tokens/s per GPU or CPU core against tokens/s per user."""

from __future__ import annotations

import json
from pathlib import Path

from results.history.frontier import frontier_points, frontier_series, pareto
from tests.support.gate_fakes import HARDWARE, write_fake_run


def test_a_point_is_on_the_frontier_when_none_beats_it_on_both_axes() -> None:
    points = [(10.0, 1.0), (5.0, 5.0), (1.0, 8.0), (4.0, 4.0), (5.0, 5.0), (0.5, 8.0)]
    # (4, 4) is beaten by (5, 5); (0.5, 8) by (1, 8); equal points beat neither.
    assert pareto(points) == [True, True, True, False, True, False]


def test_runs_become_points_per_cpu_core_or_per_gpu(tmp_path: Path) -> None:
    cpu = [write_fake_run(tmp_path / "cpu", seed=s, users=u) for s, u in ((1, 1), (2, 8))]
    gpu = write_fake_run(tmp_path / "gpu", seed=3, hardware={**HARDWARE, "gpus": ["H100"] * 4})
    points = frontier_points([*cpu, gpu])
    assert [p.per for p in points] == ["CPU core", "CPU core", "GPU"]
    one_user = points[0]
    assert one_user.per_user_tok_s > points[1].per_user_tok_s  # eight users share the engine
    # Two logical CPUs in the fake hardware: half the run's tokens/s per core.
    summary = json.loads((cpu[0] / "summary.json").read_text())
    assert one_user.tok_s_per_unit == summary["throughput"]["output_tok_s"] / 2
    assert all(p.on_frontier for p in points[:2])


def test_runs_of_several_length_pairs_are_a_series_each(tmp_path: Path) -> None:
    runs = []
    for seed, (prompt, output) in enumerate(((128, 16), (128, 16), (512, 4))):
        folder = write_fake_run(tmp_path, seed=seed, users=1 + 3 * seed)
        path = folder / "run.json"
        run_json = json.loads(path.read_text())
        run_json["scenario"]["input_len"] = {"kind": "fixed", "value": prompt}
        run_json["scenario"]["output_len"] = {"kind": "fixed", "value": output}
        path.write_text(json.dumps(run_json))
        runs.append(folder)
    runs.append(write_fake_run(tmp_path, seed=9))  # lengths of its own: a series apart
    series = frontier_series(runs)
    assert list(series) == ["128:16", "512:4", None]
    assert [len(points) for points in series.values()] == [2, 1, 1]
    # Each series has its own frontier: the lone 512:4 run is on its own.
    assert series["512:4"][0].on_frontier and series[None][0].on_frontier
    assert sum(p.on_frontier for p in series["128:16"]) >= 1
