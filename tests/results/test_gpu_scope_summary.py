"""The GPU scope in the figures: the summary over the engine's GPUs only, other processes on them
named, the scope said, and roofs from the engine's GPUs (in its CUDA order, scaled to a MIG
slice), from readings the NVML sampler took of the fake NVML (tests/support/fake_nvml.py)."""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import pandas as pd
import pytest
from rich.console import Console

from bench.run.end.report import render_summary
from perfmodel.hardware import get_gpu
from perfmodel.presets import TINY
from probes.nvml import NvmlSampler
from probes.sampler import SampleBuffer
from results.figures.analytic import analytic_section
from results.figures.samples_summary import gpu_scope, gpu_warnings, samples_summary
from tests.support.fake_nvml import FakeGpu, FakeMig, FakeNvml, FakeProcess, eight_gpus

ME = os.getpid()


def sampled(fake: FakeNvml, sampler: NvmlSampler, ticks: int) -> pd.DataFrame:
    """samples.parquet's frame of ``ticks`` readings one second apart."""
    assert sampler.open() is None
    buffer = SampleBuffer()
    for tick in range(ticks):
        fake.tick = tick

        def emit(name, value, labels=None, *, t_ns=None, source=None, t=tick) -> None:
            buffer.append(t * 10**9, source or "nvml", name, value, labels)

        sampler.sample(tick * 10**9, emit)
    sampler.close()
    cols = buffer.columns()
    return pd.DataFrame({"t_s": np.asarray(cols["t_ns"]) / 1e9, "source": cols["source"],
                         "name": cols["name"], "value": cols["value"],
                         "labels": cols["labels"]})  # fmt: skip


def test_energy_and_power_are_the_engines_two_gpus_and_others_are_named() -> None:
    gpus = eight_gpus(engine_on=(2, 5), engine_pids=(ME,))
    # Every GPU burns 14 J a second (70 W); an idle node's six others would add 6 x 14 J.
    gpus[5].processes.append(FakeProcess(999_999, "trainer.py", 10 << 30))
    fake = FakeNvml(gpus)
    samples = sampled(fake, NvmlSampler(nvml=fake.module(), engine_pid=ME), 5)
    tokens = pd.DataFrame({"t_s": [1.5, 2.5, 3.5], "n_tokens": [10, 10, 8]})
    probes = samples_summary(samples, tokens, {"start_s": 0.0, "end_s": 4.0})
    energy = probes["energy"]
    assert energy["gpus"] == 2 and energy["joules"] == pytest.approx(2 * 4 * 14.0)
    assert energy["joules_per_output_token"] == pytest.approx(2 * 4 * 14.0 / 28)
    gpu = probes["gpu"]
    assert gpu["gpus"] == ["2", "5"]
    assert gpu["other_processes"] == [{"gpu": "5", "pid": 999_999, "process": "trainer.py",
                                       "memory_bytes_max": float(10 << 30)}]  # fmt: skip
    (line,) = gpu_warnings({"probes": probes})
    assert "pid 999999 (trainer.py" in line and "GPU 5" in line


def test_the_scope_reaches_the_summary_and_the_terminal() -> None:
    fake = FakeNvml(eight_gpus(engine_on=()))
    sampler = NvmlSampler(nvml=fake.module())
    samples = sampled(fake, sampler, 2)
    run_json: dict[str, Any] = {"probes": {"samplers": {"nvml": sampler.describe()}}}
    scope = gpu_scope(run_json)
    assert scope is not None and scope["how"] == "all" and len(scope["gpus"]) == 8
    probes = samples_summary(samples, pd.DataFrame({"t_s": [], "n_tokens": []}),
                             {"start_s": 0.0, "end_s": 1.0})  # fmt: skip
    probes["gpu"]["scope"] = scope
    console = Console(record=True, width=200)
    render_summary({"probes": probes}, console)
    text = console.export_text()
    assert "GPUs measured (all): every GPU of this host is sampled (8)" in text


def test_roofs_are_the_engines_gpu_in_its_cuda_order() -> None:
    gpus = eight_gpus(engine_on=())
    gpus[6].name = "NVIDIA H200"
    fake = FakeNvml(gpus)
    sampler = NvmlSampler(nvml=fake.module(), cuda_visible_devices=f"{gpus[0].uuid},{gpus[6].uuid}")
    sampled(fake, sampler, 1)
    scope = sampler.describe()["scope"]
    description = {"model_config": TINY.to_dict(), "dtype": "bfloat16", "device": "cuda:1"}
    # NVML's GPU 1 is an H100, but the engine's cuda:1 is NVML's GPU 6, an H200.
    host = ["NVIDIA H100 80GB HBM3"] * 6 + ["NVIDIA H200", "NVIDIA H100 80GB HBM3"]
    section = analytic_section(description, None, True, host, "cpu", gpu_scope=scope)
    assert section["roofs"]["name"] == get_gpu("h200").name


def test_roofs_of_a_mig_slice_are_scaled_to_it() -> None:
    gpu = FakeGpu(uuid="GPU-aaaa", migs=[FakeMig("MIG-1111", 1, 66, 40192)])
    gpu.processes = [FakeProcess(ME, "python3", gpu_instance_id=1)]
    fake = FakeNvml([gpu])
    sampler = NvmlSampler(nvml=fake.module(), engine_pid=ME)
    sampled(fake, sampler, 1)
    description = {"model_config": TINY.to_dict(), "dtype": "bfloat16", "device": "cuda:0"}
    whole = analytic_section(description, None, True, [gpu.name], "cpu")
    mig = analytic_section(description, None, True, [gpu.name], "cpu",
                           gpu_scope=sampler.describe()["scope"])  # fmt: skip
    assert mig["roofs"]["flops_per_s"] == pytest.approx(whole["roofs"]["flops_per_s"] / 2)
    assert mig["roofs"]["bytes_per_s"] == pytest.approx(
        whole["roofs"]["bytes_per_s"] * 40192 / 81559
    )
    assert "MIG instance 1: 66 SMs" in mig["roofs"]["source"]
    assert any("roofs scaled to the MIG instance" in n for n in mig["notes"])


def test_the_roofs_count_the_gpus_the_engine_runs_on() -> None:
    fake = FakeNvml(eight_gpus(engine_on=(2, 5), engine_pids=(ME,)))
    sampler = NvmlSampler(nvml=fake.module(), engine_pid=ME)
    sampled(fake, sampler, 1)
    scope = sampler.describe()["scope"]
    # An engine that does not describe itself (vLLM at TP 2): its shape from a preset.
    section = analytic_section(None, "llama-3-8b", True, [], "cpu", gpu_scope=scope)
    assert section["tp"] == 2 and any("TP degree 2" in n for n in section["notes"])
    assert not any("assumed 1" in n for n in section["notes"])
    idle = FakeNvml(eight_gpus(engine_on=()))
    everything = NvmlSampler(nvml=idle.module())
    sampled(idle, everything, 1)
    unknown = analytic_section(None, "llama-3-8b", True, [], "cpu",
                               gpu_scope=everything.describe()["scope"])  # fmt: skip
    assert unknown["tp"] == 1
