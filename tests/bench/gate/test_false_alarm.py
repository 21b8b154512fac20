"""False alarms and detection over simulated sessions drawn from recorded run distributions.

tests/fixtures/gate_smoke_runs.json holds 8 real runs of benchmarks/perf-gate/smoke.toml, made
one after the other on this project's 2-core machine while other jobs shared it (its noise is
described in benchmarks/perf-gate/smoke-rules.toml). A simulated session draws runs without
replacement (5 for the baseline, 3 for the candidate, as the smoke gate does) and replaces each
by a bootstrap copy of its requests, so every pair has fresh within-run noise on top of the real
run-to-run differences. A slower engine is simulated by scaling every time by a factor.
"""

from __future__ import annotations

import dataclasses
from collections import Counter

import numpy as np
import pytest

from bench.gate.baseline import RunGroup, load_baseline
from bench.gate.rules import DEFAULT_RULES, GateRules, load_rules
from bench.gate.samples import RunSamples
from bench.gate.verdict import evaluate
from tests.support.paths import REPO_ROOT

ROOT = REPO_ROOT
FIXTURE = ROOT / "tests" / "fixtures" / "gate_smoke_runs.json"
SMOKE_RULES = ROOT / "benchmarks" / "perf-gate" / "smoke-rules.toml"
BASELINE_RUNS, CANDIDATE_RUNS = 5, 3


def simulated_run(run: RunSamples, rng: np.random.Generator, slowdown: float) -> RunSamples:
    """A new run like ``run``: its requests drawn with replacement, times scaled by slowdown."""
    pick = np.sort(rng.integers(0, run.num_requests, run.num_requests))
    start = run.window_start_s
    return dataclasses.replace(
        run,
        window_end_s=start + run.duration_s * slowdown,
        ttft_ms=run.ttft_ms[pick] * slowdown,
        tpot_ms=run.tpot_ms[pick] * slowdown,
        e2el_ms=run.e2el_ms[pick] * slowdown,
        e2el_from_scheduled_ms=run.e2el_from_scheduled_ms[pick] * slowdown,
        queueing_delay_ms=run.queueing_delay_ms[pick],
        done_s=start + (run.done_s[pick] - start) * slowdown,
        prompt_tokens=run.prompt_tokens[pick],
        output_tokens=run.output_tokens[pick],
        good=None if run.good is None else run.good[pick],
        itl_ms=tuple(run.itl_ms[i] * slowdown for i in pick),
    )


def simulate(rules: GateRules, pairs: int, slowdown: float = 1.0, seed: int = 0) -> Counter[str]:
    """Verdicts of ``pairs`` simulated baseline/candidate sessions."""
    recorded = load_baseline(FIXTURE)
    # 1000 resamples instead of 2000 keep the test fast; the CI endpoints move by ~1%.
    rules = dataclasses.replace(rules, resamples=1000)
    rng = np.random.default_rng(seed)
    verdicts: Counter[str] = Counter()

    def session(indices: np.ndarray, label: str, factor: float) -> RunGroup:
        runs = tuple(simulated_run(recorded.runs[i], rng, factor) for i in indices)
        return dataclasses.replace(recorded, label=label, runs=runs)

    for pair in range(pairs):
        order = rng.permutation(len(recorded.runs))
        base = session(order[:BASELINE_RUNS], "baseline", 1.0)
        cand = session(order[BASELINE_RUNS : BASELINE_RUNS + CANDIDATE_RUNS], "candidate", slowdown)
        verdicts[evaluate(dataclasses.replace(rules, seed=pair), base, cand).verdict] += 1
    return verdicts


def test_the_fixture_is_small_real_and_complete() -> None:
    assert FIXTURE.stat().st_size < 1_000_000
    recorded = load_baseline(FIXTURE)
    assert len(recorded.runs) >= BASELINE_RUNS + CANDIDATE_RUNS
    assert all(run.num_requests >= 50 for run in recorded.runs)
    assert recorded.scenario["name"] == "gate-smoke"


def test_identical_configurations_pass_the_smoke_rules() -> None:
    pairs = 200
    verdicts = simulate(load_rules(SMOKE_RULES), pairs)
    assert verdicts["fail"] / pairs < 0.01, verdicts
    # The smoke gate must pass reliably, not merely avoid failing.
    assert verdicts["pass"] / pairs >= 0.97, verdicts


def test_strict_rules_on_noisy_runs_say_inconclusive_not_fail() -> None:
    # 5-10% limits against 11-21% run-to-run noise: the gate cannot tell, and must say so.
    pairs = 100
    verdicts = simulate(DEFAULT_RULES, pairs, seed=1)
    assert verdicts["fail"] / pairs < 0.01, verdicts


@pytest.mark.parametrize(("slowdown", "min_fail_rate"), [(3.0, 0.95), (5.0, 1.0)])
def test_a_much_slower_engine_fails_the_smoke_rules(slowdown: float, min_fail_rate: float) -> None:
    pairs = 100
    verdicts = simulate(load_rules(SMOKE_RULES), pairs, slowdown=slowdown, seed=2)
    assert verdicts["fail"] / pairs >= min_fail_rate, verdicts
    assert verdicts["pass"] == 0, verdicts
