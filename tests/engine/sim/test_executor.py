"""The simulated executor: seeded tokens, the scheduler's stops, its clocks and its speculation."""

from __future__ import annotations

import time

import numpy as np
import pytest

from engine.config import EngineConfig
from engine.core.request import SamplingParams
from engine.llm_engine import LLMEngine
from engine.sim import executor as executor_module
from engine.sim.executor import RealTimePacer, SimExecutor
from tests.support.engine_fixtures import ragged_workload, run
from tests.support.sim_fixtures import a100_engine, sim_engine

# Every test here times its steps from the fixed CPU calibration (tests/conftest.py).
pytestmark = pytest.mark.usefixtures("fake_calibration")


def test_deterministic_for_a_seed_and_different_across_seeds() -> None:
    work = ragged_workload(12, seed=3)
    first, again = run(sim_engine(seed=4), work), run(sim_engine(seed=4), work)
    assert first == again
    assert run(sim_engine(seed=5), work) != first
    one, same = sim_engine(seed=4), sim_engine(seed=4)
    run(one, work)
    run(same, work)
    assert one.steps.since(0) == same.steps.since(0)  # virtual times too


def test_a_requests_own_seed_makes_its_tokens_independent_of_the_batch() -> None:
    params = SamplingParams(max_tokens=12, temperature=1.0, seed=42, ignore_eos=True)
    alone = sim_engine().generate([[5, 6, 7]], params)[0]
    crowd = [SamplingParams(max_tokens=12, ignore_eos=True)] * 5 + [params]
    together = sim_engine().generate([[9, 9]] * 5 + [[5, 6, 7]], crowd)[-1]
    assert together == alone


def test_max_tokens_and_stop_token_ids_are_the_schedulers() -> None:
    engine = sim_engine()
    (out,) = engine.generate([[3, 4, 5]], SamplingParams(max_tokens=7, ignore_eos=True))
    assert len(out) == 7
    every_id = tuple(range(engine.model_config.vocab_size))
    (stopped,) = engine.generate([[3, 4]], SamplingParams(max_tokens=9, stop_token_ids=every_id))
    assert len(stopped) == 1


def test_eos_ends_a_request_unless_ignore_eos() -> None:
    """A two-token vocabulary (0, and EOS = 1) makes EOS come soon."""
    engine = sim_engine()
    executor = SimExecutor(engine.executor.time_model, 64, vocab_size=2, seed=0, speedup=0.0)
    engine = LLMEngine(engine.config, executor)
    prompts = [[0, 0, 0]] * 8
    stopped = engine.generate(prompts, SamplingParams(max_tokens=40))
    assert all(out[-1] == 1 and 1 not in out[:-1] for out in stopped)
    assert max(len(out) for out in stopped) < 40
    full = engine.generate(prompts, SamplingParams(max_tokens=40, ignore_eos=True))
    assert all(len(out) == 40 for out in full)


def test_virtual_clock_moves_by_the_predicted_step_times() -> None:
    engine = a100_engine()
    engine.generate([[7] * 100], SamplingParams(max_tokens=5, ignore_eos=True))
    steps = engine.steps.since(0)
    durations = np.subtract(steps["end_ns"], steps["start_ns"])
    assert np.array_equal(steps["forward_ns"], durations)  # schedule and update take no time
    assert np.all(np.diff(steps["start_ns"]) == durations[:-1])  # steps back to back
    assert engine.clock_ns() == steps["end_ns"][-1]
    decode_s = durations[-1] / 1e9
    assert 0.015 < decode_s < 0.03  # 35 GB of weights per GPU at ~1.8 TB/s, plus all-reduces


def test_real_time_sleeps_until_each_steps_predicted_end() -> None:
    engine = a100_engine(sim_speedup=2.0)  # twice as fast as predicted
    start = time.perf_counter()
    engine.generate([[7] * 16], SamplingParams(max_tokens=8, ignore_eos=True))
    wall_s = time.perf_counter() - start
    predicted_s = engine.executor.predicted_s_total
    assert predicted_s / 2 * 0.9 < wall_s < predicted_s / 2 + 0.25


@pytest.mark.parametrize(("rate", "tokens_per_step"), [(0.0, 1.0), (1.0, 4.0)])
def test_speculation_accepts_at_the_stated_rate(rate: float, tokens_per_step: float) -> None:
    engine = sim_engine(speculative="ngram", num_speculative_tokens=3, sim_acceptance_rate=rate)
    engine.generate([[3, 4, 5]], SamplingParams(max_tokens=41, ignore_eos=True))
    steps = engine.steps.since(0)
    decode_steps = sum(1 for n in steps["num_prefill_tokens"] if n == 0)
    assert 40 / decode_steps == pytest.approx(tokens_per_step, rel=0.1)
    stats = engine.stats()
    assert stats["spec_num_drafts"] > 0
    assert stats["spec_num_accepted_tokens"] == round(rate * stats["spec_num_draft_tokens"])


def test_speculation_mean_acceptance_matches_the_rate() -> None:
    engine = sim_engine(speculative="ngram", num_speculative_tokens=4, sim_acceptance_rate=0.6)
    engine.generate([[3, 4, 5]] * 8, SamplingParams(max_tokens=200, ignore_eos=True))
    stats = engine.stats()
    per_position = np.asarray(stats["spec_accepted_per_position"]) / stats["spec_num_drafts"]
    # Position j is accepted when all before it are: 0.6, 0.36, 0.216, ... (the last position
    # is drafted less often, when max_tokens leaves no room).
    assert per_position[:3] == pytest.approx([0.6, 0.36, 0.216], abs=0.06)


def test_settings_that_cannot_be_simulated_are_refused() -> None:
    with pytest.raises(ValueError, match="gpu is needed by device='sim'"):
        EngineConfig.from_flat(dict(device="sim"))
    with pytest.raises(ValueError, match="sim_acceptance_rate"):
        EngineConfig.from_flat(dict(device="sim", gpu="a100-80gb", speculative="ngram"))
    with pytest.raises(ValueError, match="only on the simulated device"):
        EngineConfig.from_flat(dict(tp=2))
    with pytest.raises(ValueError, match="unknown GPU"):
        a100_engine(gpu="b9000")
    with pytest.raises(ValueError, match="do not fit"):
        a100_engine(tp=1)
    with pytest.raises(ValueError, match="no fp32 peak"):
        a100_engine(gpu="a10g", dtype="float32")  # no FP32 figure is published for the A10G


class DrivenClock:
    """time.perf_counter_ns and time.sleep for the pacer, on a clock the test moves: sleeping
    moves it by the time slept, ``stall`` by a delay the machine imposed."""

    def __init__(self) -> None:
        self.now_ns = 1_000_000_000
        self.slept_s: list[float] = []

    def perf_counter_ns(self) -> int:
        return self.now_ns

    def sleep(self, seconds: float) -> None:
        self.slept_s.append(seconds)
        self.now_ns += round(seconds * 1e9)

    def stall(self, seconds: float) -> None:
        self.now_ns += round(seconds * 1e9)


def test_the_pacer_chains_steps_and_absorbs_scheduling_time_up_to_the_overhead(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = DrivenClock()
    monkeypatch.setattr(executor_module, "time", clock)
    pacer = RealTimePacer(speedup=10.0)  # 20 ms steps with 5 ms overhead: 2 ms and 0.5 ms
    t0 = clock.now_ns
    pacer.wait(t0, 0.020, 0.005)  # from idle: the step began its overhead before entry
    assert clock.now_ns - t0 == 1_500_000
    for _ in range(3):  # 0.4 ms of scheduling between steps, within the overhead: absorbed
        clock.stall(0.0004)
        pacer.wait(clock.now_ns, 0.020, 0.005)
    assert clock.now_ns - t0 == 1_500_000 + 3 * 2_000_000  # back to back at the predicted pace
    assert clock.slept_s[1:] == pytest.approx([0.0016] * 3)
    # A step the machine held 3 ms past its end (a loaded box) is not slept, and the next one
    # paces from its own entry: lateness is never made up by running faster than predicted.
    entered = clock.now_ns
    clock.stall(0.003)
    pacer.wait(entered, 0.020, 0.005)
    assert len(clock.slept_s) == 4 and clock.now_ns - entered == 3_000_000
    entered = clock.now_ns
    pacer.wait(entered, 0.020, 0.005)
    assert clock.now_ns - entered == 1_500_000
