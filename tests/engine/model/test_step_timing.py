"""The model runner's step timer: every step, sampling or not, ends with its device work done."""

from __future__ import annotations

import pytest
import torch

from engine.core.request import SamplingParams
from engine.model.model_runner import ModelRunner
from engine.model.step_timer import StepTimer
from tests.support.cuda import gpu
from tests.support.engine_fixtures import make_engine


class CountingTimer(StepTimer):
    """A StepTimer that counts its brackets (and checks that they pair)."""

    def __init__(self, device: torch.device) -> None:
        super().__init__(device)
        self.starts = self.stops = 0

    def start(self) -> None:
        assert self.starts == self.stops, "a step started before the last one stopped"
        self.starts += 1
        super().start()

    def stop(self) -> None:
        self.stops += 1
        super().stop()


def test_the_cpu_timer_waits_for_nothing_and_reports_no_device_time() -> None:
    timer = StepTimer(torch.device("cpu"))
    timer.start()
    timer.stop()
    assert not timer.syncs and timer.last_device_s is None


def test_every_step_is_bracketed_including_chunked_prefill_steps_that_sample_nothing() -> None:
    # A 200-token prompt under a 64-token budget: three steps sample nothing, the fourth does.
    engine = make_engine(max_num_batched_tokens=64, enable_chunked_prefill=True)
    runner = engine.executor
    assert isinstance(runner, ModelRunner)
    timer = runner.step_timer = CountingTimer(runner.device)
    params = SamplingParams(max_tokens=3, temperature=0.0, ignore_eos=True)
    engine.add_request("long", list(range(3, 203)), params)
    sampled_steps = silent_steps = 0
    while engine.has_unfinished_requests():
        outputs = engine.step()
        if any(o.new_token_ids for o in outputs):
            sampled_steps += 1
        else:
            silent_steps += 1
    assert silent_steps >= 3 and sampled_steps == 3
    assert timer.starts == timer.stops == engine.steps.num_steps


def test_a_failing_step_still_stops_its_timer() -> None:
    engine = make_engine()
    runner = engine.executor
    assert isinstance(runner, ModelRunner)
    timer = runner.step_timer = CountingTimer(runner.device)
    engine.add_request("r", [5, 6, 7], SamplingParams(max_tokens=2, temperature=0.0))
    sched = engine.scheduler.schedule()
    with pytest.raises(KeyError):
        runner.execute_model(sched, {})  # no block table: _prepare fails
    assert timer.starts == timer.stops == 1


@gpu
def test_forward_time_covers_the_device_time_of_every_step_on_cuda() -> None:
    engine = make_engine(device="cuda", max_num_batched_tokens=64, enable_chunked_prefill=True)
    runner = engine.executor
    assert isinstance(runner, ModelRunner) and runner.step_timer.syncs
    params = SamplingParams(max_tokens=4, temperature=0.0, ignore_eos=True)
    engine.add_request("long", list(range(3, 203)), params)
    while engine.has_unfinished_requests():
        engine.step()
        device_s = runner.step_timer.last_device_s
        forward_ns = engine.steps.since(engine.steps.num_steps - 1)["forward_ns"][-1]
        # The host span includes the device's, because stop() waited for the end event.
        assert device_s is not None and forward_ns / 1e9 >= device_s
