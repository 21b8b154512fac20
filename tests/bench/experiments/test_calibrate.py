"""`bench calibrate`'s timings wait for the device they time, not for the current one."""

from __future__ import annotations

import pytest
import torch

from bench.experiments.calibrate import device_sync, measure_matmul


def test_a_gpu_timing_synchronizes_its_own_device(monkeypatch: pytest.MonkeyPatch) -> None:
    waited: list[object] = []
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: waited.append(device))
    device_sync("cuda:3")()
    device_sync("cuda")()
    # Never the argument-less call, which would wait on cuda:0 while cuda:3's kernels run.
    assert waited == [torch.device("cuda:3"), torch.device("cuda")]


def test_a_cpu_timing_needs_no_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    waited: list[object] = []
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: waited.append(device))
    result = measure_matmul("fp32", 64, 0.0)
    assert result["flops_per_s"] > 0 and result["calls"] >= 3
    assert waited == []
