"""The NVML sampler measures the engine's GPUs: found by its processes, its CUDA_VISIBLE_DEVICES
or --gpus, matched by UUID; MIG, GPM without permission, NaN readings and other processes on
them, all against the fake NVML of tests/support/fake_nvml.py (8 H100s, the engine on 2)."""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

import pynvml
import pytest

from probes.gpu_scope import GpuScopeError, resolve_scope
from probes.nvml import AVERAGE_POWER, INSTANT_POWER, NvmlSampler
from probes.probe_process import ProbeProcess
from probes.probe_spec import ProbeSpec
from probes.sampler_kinds import build_samplers
from tests.support.fake_nvml import FakeGpu, FakeMig, FakeNvml, FakeProcess, eight_gpus

MS = 1_000_000
ME = os.getpid()  # the engine's root process in these tests: its tree is this process


class Recorder:
    """What a sampler emits: (name, value, labels, source)."""

    def __init__(self) -> None:
        self.rows: list[tuple[str, float, dict[str, str], str]] = []

    def __call__(self, name, value, labels=None, *, t_ns=None, source=None) -> None:
        self.rows.append((name, value, dict(labels or {}), source or "nvml"))

    def gpus(self, name: str) -> set[str]:
        return {r[2]["gpu"] for r in self.rows if r[0] == name}

    def values(self, name: str, **labels: str) -> list[float]:
        return [r[1] for r in self.rows if r[0] == name and labels.items() <= r[2].items()]


def run(sampler: NvmlSampler, fake: FakeNvml, ticks: int = 3) -> Recorder:
    rec = Recorder()
    for tick in range(ticks):
        fake.tick = tick
        sampler.sample(tick * 200 * MS, rec)
    return rec


def test_the_engines_gpus_are_found_by_its_processes_and_only_they_are_sampled() -> None:
    fake = FakeNvml(eight_gpus(engine_on=(2, 5), engine_pids=(ME,)))
    sampler = NvmlSampler(nvml=fake.module(), engine_pid=ME)
    assert sampler.open() is None
    rec = run(sampler, fake)
    assert rec.gpus("power_w") == rec.gpus("energy_j") == {"2", "5"}
    scope = sampler.describe()["scope"]
    assert scope["how"] == "engine processes"
    assert [g["uuid"] for g in scope["gpus"]] == [fake.gpus[2].uuid, fake.gpus[5].uuid]
    assert fake.gpus[2].uuid in scope["reason"]
    # With the engine's CUDA_VISIBLE_DEVICES naming the same GPUs, its CUDA order is kept.
    visible = f"{fake.gpus[5].uuid},{fake.gpus[2].uuid}"
    ordered = resolve_scope(fake.module(), {ME}, visible)
    assert ordered.how == "engine processes" and [g.index for g in ordered.gpus] == [5, 2]
    # No other process is on them: nothing to warn about.
    assert not rec.values("process_gpu_memory_bytes")
    sampler.close()
    assert fake.initialised == 0


def test_cuda_visible_devices_uuids_are_matched_to_nvml_in_the_engines_order() -> None:
    fake = FakeNvml(eight_gpus(engine_on=()))
    # CUDA's device 0 is NVML's GPU 5 here: the order of the variable, never index = index.
    visible = f"{fake.gpus[5].uuid},{fake.gpus[2].uuid[:12]}"  # a unique prefix, as CUDA takes
    scope = resolve_scope(fake.module(), {ME}, visible)
    assert scope.how == "CUDA_VISIBLE_DEVICES"
    assert [g.index for g in scope.gpus] == [5, 2]
    sampler = NvmlSampler(nvml=fake.module(), engine_pid=ME, cuda_visible_devices=visible)
    assert sampler.open() is None
    assert run(sampler, fake, 1).gpus("power_w") == {"2", "5"}


def test_cuda_indices_are_refused_where_cudas_order_may_differ_from_nvmls() -> None:
    gpus = eight_gpus(engine_on=())
    gpus[0].name = "NVIDIA A100-SXM4-80GB"  # mixed parts: CUDA puts the fastest first
    nvml = FakeNvml(gpus).module()
    scope = resolve_scope(nvml, set(), "1,2")
    assert scope.how == "all" and "CUDA_DEVICE_ORDER=PCI_BUS_ID" in scope.notes[0]
    ordered = resolve_scope(nvml, set(), "1,2", cuda_device_order="PCI_BUS_ID")
    assert ordered.how == "CUDA_VISIBLE_DEVICES" and [g.index for g in ordered.gpus] == [1, 2]
    same = resolve_scope(FakeNvml(eight_gpus(engine_on=())).module(), set(), "3")
    assert [g.index for g in same.gpus] == [3] and "PCI order" in same.notes[0]


def test_gpus_option_and_else_every_gpu_said_plainly() -> None:
    fake = FakeNvml(eight_gpus(engine_on=()))
    nvml = fake.module()
    chosen = resolve_scope(nvml, set(), None, f"3,{fake.gpus[6].uuid}")
    assert chosen.how == "--gpus" and [g.index for g in chosen.gpus] == [3, 6]
    everything = resolve_scope(nvml, set())
    assert everything.how == "all" and len(everything.gpus) == 8
    assert "every GPU of this host is sampled (8)" in everything.reason
    assert "give --gpus" in everything.reason
    with pytest.raises(GpuScopeError, match="'GPU-nope' names no GPU"):
        resolve_scope(nvml, set(), None, "GPU-nope")
    sampler = NvmlSampler(nvml=nvml, gpus="9")
    assert "--gpus: GPU 9: this host has 8 GPUs" in str(sampler.open())
    # The engine's processes come first; a --gpus that disagrees is noted, not used.
    engine = FakeNvml(eight_gpus(engine_on=(4,), engine_pids=(ME,))).module()
    found = resolve_scope(engine, {ME}, None, "0")
    assert [g.index for g in found.gpus] == [4] and "--gpus 0 not used" in found.notes[0]


def test_another_process_on_an_engine_gpu_is_named() -> None:
    gpus = eight_gpus(engine_on=(2, 5), engine_pids=(ME,))
    gpus[5].processes.append(FakeProcess(999_999, "trainer.py", 10 << 30))
    gpus[6].processes.append(FakeProcess(999_998, "not-on-ours", 1 << 30))
    fake = FakeNvml(gpus)
    sampler = NvmlSampler(nvml=fake.module(), engine_pid=ME)
    assert sampler.open() is None
    rec = run(sampler, fake, 2)
    others = [r for r in rec.rows if r[0] == "process_gpu_memory_bytes"]
    assert {(r[2]["gpu"], r[2]["pid"], r[2]["process"]) for r in others} == {
        ("5", "999999", "trainer.py")
    }
    assert others[0][1] == 10 << 30


def test_mig_instance_of_the_engine_is_measured_per_instance_and_scaled() -> None:
    gpu = FakeGpu(uuid="GPU-aaaa", migs=[FakeMig("MIG-1111", 1, 60, 40192),
                                         FakeMig("MIG-2222", 2, 60, 40192)])  # fmt: skip
    gpu.processes = [FakeProcess(ME, "python3", gpu_instance_id=2)]
    fake = FakeNvml([gpu, FakeGpu(uuid="GPU-bbbb")])
    sampler = NvmlSampler(nvml=fake.module(), engine_pid=ME)
    assert sampler.open() is None
    described = sampler.describe()
    (entry,) = described["scope"]["gpus"]
    assert entry["mig"]["uuid"] == "MIG-2222" and entry["mig"]["gpu_instance_id"] == 2
    assert entry["mig"]["compute_fraction"] == pytest.approx(60 / 132)
    assert entry["mig"]["memory_fraction"] == pytest.approx(40192 / 81559)
    assert described["gpus"][0]["gpm_per_instance"]
    assert "whole-GPU" in described["scope"]["notes"][0]
    rec = run(sampler, fake)
    gpm = [r for r in rec.rows if r[3] == "gpm"]
    assert gpm and {r[2].get("gpu_instance") for r in gpm} == {"2"}
    # NVML has no utilization rates in MIG mode: dropped as unsupported, said in run.json.
    assert not rec.values("gpu_util_pct") and "utilization" in sampler.devices[0].unsupported
    # The same instance is found from CUDA_VISIBLE_DEVICES's MIG UUID.
    scope = resolve_scope(fake.module(), set(), "MIG-2222")
    assert scope.gpus[0].mig is not None and scope.gpus[0].mig.gpu_instance_id == 2


def test_mig_instances_that_cannot_be_sized_leave_the_gpu_measured_whole() -> None:
    gpu = FakeGpu(uuid="GPU-aaaa", migs=[FakeMig("MIG-1111", 1, 60, 40192)])
    gpu.processes = [FakeProcess(ME, "python3", gpu_instance_id=1)]
    gpu.fail["nvmlDeviceGetGpuInstanceProfileInfo"] = pynvml.NVML_ERROR_NOT_SUPPORTED
    scope = resolve_scope(FakeNvml([gpu]).module(), {ME})
    assert scope.how == "engine processes" and scope.gpus[0].mig is None


def test_mig_without_gpm_says_the_readings_are_whole_gpu() -> None:
    gpu = FakeGpu(uuid="GPU-aaaa", migs=[FakeMig("MIG-1111", 1, 60, 40192)],
                  gpm="no_permission")  # fmt: skip
    fake = FakeNvml([gpu])
    sampler = NvmlSampler(nvml=fake.module(), cuda_visible_devices="MIG-1111")
    assert sampler.open() is None
    note = sampler.describe()["scope"]["notes"][0]
    assert "whole-GPU" in note and "no per-instance reading" in note


def test_gpm_without_permission_is_off_with_the_reason_and_ticks_do_not_fail() -> None:
    gpus = eight_gpus(engine_on=(0,), engine_pids=(ME,))
    gpus[0].gpm = "no_permission"
    fake = FakeNvml(gpus)
    sampler = NvmlSampler(nvml=fake.module(), engine_pid=ME)
    assert sampler.open() is None
    (device,) = sampler.describe()["gpus"]
    assert not device["gpm"] and "GPM is off" in device["gpm_reason"]
    # pynvml's text for NVML_ERROR_NO_PERMISSION, and what to do about it.
    assert "Insufficient Permissions" in device["gpm_reason"]
    assert "CAP_SYS_ADMIN" in device["gpm_reason"]
    rec = run(sampler, fake)  # would raise RuntimeError if GPM were tried at each tick
    assert not [r for r in rec.rows if r[3] == "gpm"] and rec.values("power_w")
    assert fake.calls.count("nvmlGpmSampleGet") == 1  # the test sample, once


def test_nan_readings_are_dropped_and_counted() -> None:
    def readings(tick: int) -> dict[str, float]:
        nan = float("nan")
        return {"gpu_util": nan if tick == 1 else 50.0, "sm": nan, "dram": 40.0 + tick}

    gpus = eight_gpus(engine_on=(1,), engine_pids=(ME,))
    gpus[1].readings = readings
    fake = FakeNvml(gpus)
    sampler = NvmlSampler(nvml=fake.module(), engine_pid=ME)
    assert sampler.open() is None
    rec = run(sampler, fake, 3)
    assert rec.values("gpu_util_pct") == [50.0, 50.0]
    assert not rec.values("sm_util_pct") and rec.values("dram_bw_util_pct") == [41.0, 42.0]
    assert all(math.isfinite(r[1]) for r in rec.rows)
    assert sampler.describe()["dropped_non_finite"] == {"gpu_util_pct": 1, "gpm": 2}


def test_hopper_power_is_the_instant_field_where_it_answers() -> None:
    gpus = eight_gpus(engine_on=(0, 1), engine_pids=(ME,))
    gpus[1].instant_power = False
    fake = FakeNvml(gpus)
    sampler = NvmlSampler(nvml=fake.module(), engine_pid=ME)
    assert sampler.open() is None
    sources = {d["index"]: d["power_source"] for d in sampler.describe()["gpus"]}
    assert sources == {0: INSTANT_POWER, 1: AVERAGE_POWER}
    rec = run(sampler, fake, 1)
    assert rec.values("power_w", gpu="0") == [75.0]  # the instant field, not the 70 W average
    assert rec.values("power_w", gpu="1") == [70.0]


def test_errors_are_pynvmls_own_classes() -> None:
    gpus = eight_gpus(engine_on=())
    gpus[3].fail["nvmlDeviceGetTemperature"] = pynvml.NVML_ERROR_GPU_IS_LOST
    nvml = FakeNvml(gpus).module()
    with pytest.raises(pynvml.NVMLError_GpuIsLost):
        nvml.nvmlDeviceGetTemperature(nvml.nvmlDeviceGetHandleByIndex(3), 0)


def test_the_scope_settings_reach_the_probe_process() -> None:
    spec = ProbeSpec(processes={"engine": ME}, gpus="1,2", cuda_visible_devices="GPU-x",
                     cuda_device_order="PCI_BUS_ID")  # fmt: skip
    # The probe process reads its spec from JSON (probes.probe_process).
    again = ProbeSpec.from_json(spec.to_json())
    assert again == spec
    (nvml,) = [s for s in build_samplers(again) if isinstance(s, NvmlSampler)]
    settings: dict[str, Any] = {"engine_pid": nvml._engine_pid, "gpus": nvml._gpus,
                                "visible": nvml._visible, "order": nvml._order}  # fmt: skip
    assert settings == {"engine_pid": ME, "gpus": "1,2", "visible": "GPU-x",
                        "order": "PCI_BUS_ID"}  # fmt: skip


# Put first on the probe process's path, this module stands in for pynvml there: the fake's 8
# GPUs, built once the real pynvml (whose constants the fake copies) is loaded.
PYNVML_SHIM = """
import os, sys
here = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]
del sys.modules["pynvml"]
import pynvml
from tests.support.fake_nvml import FakeNvml, eight_gpus
sys.modules["pynvml"] = FakeNvml(eight_gpus(engine_on=())).module()
"""


def test_gpus_reach_the_probe_process_and_its_readings_are_of_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "pynvml.py").write_text(PYNVML_SHIM)
    monkeypatch.setenv(
        "PYTHONPATH", os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])
    )
    spec = ProbeSpec(cpu=False, gpus="3,6", nvml_interval_s=0.05)
    probes = ProbeProcess(spec)
    assert probes.start() == []
    result = probes.stop()
    (report,) = result.reports
    assert report["status"] == "ok" and report["scope"]["how"] == "--gpus"
    assert [g["index"] for g in report["scope"]["gpus"]] == [3, 6]
    power = [lab for name, lab in zip(result.columns["name"], result.columns["labels"], strict=True)
             if name == "power_w"]  # fmt: skip
    assert power and set(power) == {'{"gpu":"3"}', '{"gpu":"6"}'}
