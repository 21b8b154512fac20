"""Real regressions fail the gate: real `bench run`s of the reference engine on 127.0.0.1, a
continuous-batching baseline against an engine slowed by step_delay_ms (a sleep: wall time
only), by step_spin_ms (a spin: CPU work too) and against static batching. One short run per
side (a few seconds each, tiny preset, one torch thread): 300 requests, so that even the fast
baseline spans the gate's minimum of throughput windows."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from rich.console import Console

from bench.gate.baseline import RunGroup, load_run_group
from bench.gate.rules import rules_from_dict
from bench.gate.verdict import GateReport, evaluate
from bench.run.orchestrate import RunOptions, run_benchmark
from bench.scenario.scenario import load_scenario

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

# Outputs of 4..40 tokens: static batching keeps a batch until its longest answer ends, so
# users with short answers wait, and new requests queue behind the whole batch.
SCENARIO = """
name = "gate-regression"
users = 4
num_requests = 300
ignore_eos = true
seed = 0
warmup_s = 0.3

[input_len]
kind = "uniform"
low = 16
high = 48

[output_len]
kind = "uniform"
low = 4
high = 40

[engine]
preset = "tiny"
device = "cpu"
dtype = "float32"
num_threads = 1
{options}
"""
# Far looser than the regressions below (3x and more), far tighter than "no change at all".
RULES = rules_from_dict(
    {
        "resamples": 1000,
        "min_samples": 10,
        "metrics": {
            "throughput.output_tok_s": {"max_drop_pct": 20.0},
            "tpot_ms.mean": {"max_rise_pct": 30.0},
            "ttft_ms.mean": {"max_rise_pct": 30.0},
        },
    }
)
# The engine's CPU seconds per output token, from the CPU probe (the runs' probes are on).
CPU_RULES = rules_from_dict(
    {
        "resamples": 1000,
        "metrics": {"probes.cpu_work.engine_cpu_s_per_output_token": {"max_rise_pct": 30}},
    }
)


def run_group(tmp_path: Path, name: str, options: str = "") -> RunGroup:
    path = tmp_path / f"{name}.toml"
    path.write_text(SCENARIO.format(options=options))
    opts = RunOptions(load_scenario(path), None, "reference", None, None, tmp_path / name, False)
    with open("/dev/null", "w") as sink:
        folder, summary = run_benchmark(opts, Console(file=sink))
    assert summary["counts"]["all"]["ok"] == 300, summary["errors"]
    group, _ = load_run_group([folder], name)
    return group


@pytest.fixture(scope="module")
def baseline(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunGroup]:
    yield run_group(tmp_path_factory.mktemp("continuous"), "continuous")


def verdicts(report: GateReport) -> dict[str, str]:
    return {r.metric: r.verdict for r in report.results}


def _delay_ms(baseline: RunGroup) -> float:
    """A step delay of the baseline's own mean TPOT (10 ms at least), so the slowed engine
    takes about twice as long per token on an idle box or a loaded one alike: a fixed 10 ms
    was -12% of throughput on a box at load 10, inside the rules' 20%."""
    tpot_ms = np.nanmean(np.concatenate([run.tpot_ms for run in baseline.runs]))
    return round(max(10.0, float(tpot_ms)), 1)


def test_an_engine_slowed_by_step_delay_fails(tmp_path: Path, baseline: RunGroup) -> None:
    delay_ms = _delay_ms(baseline)
    slow = run_group(tmp_path, "delayed", f"\n[engine.options]\nstep_delay_ms = {delay_ms}\n")
    assert slow.engine["config"]["step_delay_ms"] == delay_ms
    # The rules are under test, not the machine: a run marked busy, or invalid by anything else
    # a loaded box can cause, is judged all the same (allow_invalid covers both).
    report = evaluate(RULES, baseline, slow, allow_invalid=True)
    assert report.verdict == "fail" and report.exit_code == 1, report
    assert verdicts(report)["tpot_ms.mean"] == "fail"
    assert verdicts(report)["throughput.output_tok_s"] == "fail", report.results[0]
    assert any(f"step_delay_ms: 0.0 -> {delay_ms}" in note for note in report.notes)
    # A sleep does no work: the CPU seconds per token do not fail.
    work = evaluate(CPU_RULES, baseline, slow, allow_invalid=True).results[0]
    assert work.verdict != "fail" and work.change_pct is not None, work


def test_an_engine_slowed_by_a_spin_fails_on_cpu_work(tmp_path: Path, baseline: RunGroup) -> None:
    # 10 ms of CPU per step, twice the tiny model's own on 2 cores and more.
    spun = run_group(tmp_path, "spun", "\n[engine.options]\nstep_spin_ms = 10.0\n")
    assert spun.engine["config"]["step_spin_ms"] == 10.0
    work = evaluate(CPU_RULES, baseline, spun, allow_invalid=True).results[0]
    assert work.verdict == "fail" and work.sample_unit == "windows", work
    assert verdicts(evaluate(RULES, baseline, spun, allow_invalid=True))["tpot_ms.mean"] == "fail"


def test_static_batching_fails_against_continuous(tmp_path: Path, baseline: RunGroup) -> None:
    static = run_group(tmp_path, "static", '\n[engine.options]\nbatching = "static"\n')
    assert static.engine["config"]["batching"] == "static"
    report = evaluate(RULES, baseline, static, allow_invalid=True)
    assert report.verdict == "fail", report
    assert verdicts(report)["ttft_ms.mean"] == "fail"
