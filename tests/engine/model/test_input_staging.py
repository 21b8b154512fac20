"""A step's inputs cross to the device in one copy from one reused host buffer."""

from __future__ import annotations

import numpy as np
import torch

from engine.model.input_staging import InputStaging
from engine.model.model_runner import ModelRunner
from tests.support.cuda import gpu
from tests.support.engine_fixtures import make_engine, ragged_workload, run


def _arrays(seed: int, n: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [
        rng.integers(0, 1000, n),
        rng.integers(0, 1000, (3, n)),
        np.arange(n, dtype=np.int32),  # not int64: staged as int64
        np.empty(0, dtype=np.int64),
    ]


def test_the_cpu_path_makes_tensors_in_place_without_a_copy() -> None:
    staging = InputStaging(torch.device("cpu"))
    arrays = _arrays(0, 5)
    out = staging.to_device(arrays[:2])
    assert not staging.staged and staging.copies == 0
    assert out[0].data_ptr() == arrays[0].__array_interface__["data"][0]


def test_staged_arrays_arrive_intact_in_one_copy_through_one_reused_buffer() -> None:
    staging = InputStaging(torch.device("cpu"), staged=True)
    first = _arrays(1, 40)
    out = staging.to_device(first)
    assert staging.copies == 1
    capacity = staging.capacity
    for got, want in zip(out, first, strict=True):
        assert got.dtype == torch.int64 and tuple(got.shape) == want.shape
        assert got.tolist() == want.tolist()
    # A smaller step reuses the buffer; the first step's tensors are their own copy.
    second = staging.to_device(_arrays(2, 10))
    assert staging.copies == 2 and staging.capacity == capacity
    assert out[1].tolist() == first[1].tolist() and second[0].numel() == 10
    staging.to_device(_arrays(3, capacity))  # larger than the buffer: it grows
    assert staging.capacity >= 5 * capacity


def test_staged_inputs_give_the_same_tokens_as_the_cpu_path() -> None:
    workload = ragged_workload(6, seed=3)
    expected = run(make_engine(max_num_batched_tokens=64), workload)
    engine = make_engine(max_num_batched_tokens=64)
    runner = engine.executor
    assert isinstance(runner, ModelRunner)
    runner.staging = InputStaging(runner.device, staged=True)
    assert run(engine, workload) == expected
    assert runner.staging.copies == engine.steps.num_steps  # one copy per step


@gpu
def test_cuda_staging_uses_pinned_memory_and_one_copy_per_step() -> None:
    engine = make_engine(device="cuda", max_num_batched_tokens=64)
    runner = engine.executor
    assert isinstance(runner, ModelRunner) and runner.staging.staged
    run(engine, ragged_workload(4, seed=5))
    assert runner.staging._host.is_pinned()
    assert runner.staging.copies == engine.steps.num_steps
