"""The gate on CPU seconds per output token: run folders written by the real writers, with the
CPU probe's readings (a fixed CPU rate, so a run made slower does more CPU work per token, as an
engine with extra work per step does), judged from the folders and from a baseline file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.gate.baseline import load_baseline, load_run_group, save_baseline
from bench.gate.report import to_markdown
from bench.gate.rules import rules_from_dict
from bench.gate.verdict import GateInputError, evaluate
from results.folder.run_folder import RunFolder
from tests.support.cpu_load import cpu_readings
from tests.support.gate_fakes import write_fake_run

METRIC = "probes.cpu_work.engine_cpu_s_per_output_token"
RULES = rules_from_dict({"resamples": 500, "metrics": {METRIC: {"max_rise_pct": 10}}})
TICK_S = 0.5


def run_with_readings(root: Path, seed: int, slowdown: float = 1.0) -> Path:
    """A fake run and CPU readings every TICK_S over its measured window."""
    folder = write_fake_run(root, seed=seed, requests=160, slowdown=slowdown)
    end_s = json.loads((folder / "summary.json").read_text())["window"]["end_s"]
    RunFolder(folder).write_samples(cpu_readings(0.0, int(end_s / TICK_S) + 1, TICK_S))
    return folder


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    root = tmp_path_factory.mktemp("base")
    return [run_with_readings(root, seed) for seed in range(2)]


def test_more_work_per_token_fails_and_the_same_work_passes(
    tmp_path: Path, base: list[Path]
) -> None:
    baseline, _ = load_run_group(base, "baseline")
    assert set(baseline.runs[0].cpu_windows) == {"engine", "client"}
    same, _ = load_run_group([run_with_readings(tmp_path, 7)], "same")
    report = evaluate(RULES, baseline, same)
    assert report.verdict == "pass", report.results[0].reason
    slower, _ = load_run_group([run_with_readings(tmp_path, 8, slowdown=1.5)], "slower")
    report = evaluate(RULES, baseline, slower)
    result = report.results[0]
    assert report.verdict == "fail" and result.change_pct == pytest.approx(50, abs=8)
    assert result.sample_unit == "windows" and result.unit == "s/tok"
    # CPU seconds per token read as figures, not as 0.00.
    assert f"{result.baseline:.3g}" in to_markdown(report)


def test_a_baseline_file_keeps_the_windows_and_the_verdict(
    tmp_path: Path, base: list[Path]
) -> None:
    target = tmp_path / "base.json"
    save_baseline(base, "cpu", target)
    from_file = load_baseline(target)
    from_folders, _ = load_run_group(base, "baseline")
    for a, b in zip(from_file.runs, from_folders.runs, strict=True):
        assert a.cpu_windows.keys() == b.cpu_windows.keys()
        for group, (cpu_s, tokens) in a.cpu_windows.items():
            assert cpu_s == pytest.approx(b.cpu_windows[group][0], abs=1e-6)
            assert list(tokens) == list(b.cpu_windows[group][1])
    slower, _ = load_run_group([run_with_readings(tmp_path, 9, slowdown=1.5)], "slower")
    by_file, by_folders = evaluate(RULES, from_file, slower), evaluate(RULES, from_folders, slower)
    assert by_file.verdict == by_folders.verdict == "fail"
    assert by_file.results[0].change_pct == pytest.approx(by_folders.results[0].change_pct)


def test_runs_without_cpu_readings_are_a_clear_error(tmp_path: Path, base: list[Path]) -> None:
    baseline, _ = load_run_group(base, "baseline")
    bare, _ = load_run_group([write_fake_run(tmp_path, seed=3, requests=160)], "candidate")
    assert bare.runs[0].cpu_windows == {}
    with pytest.raises(GateInputError, match="no CPU readings of its engine processes"):
        evaluate(RULES, baseline, bare)
