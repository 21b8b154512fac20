"""The NVML/GPM sampler against a recorded sequence of readings, through a fake pynvml module.

The fake implements the part of pynvml's interface the sampler uses and replays the readings
below, one set per tick, for two GPUs: an H100 SXM (GPM supported) and an A100 (no GPM, no
temperature sensor reading). Its GPM calls use pynvml's real ctypes structures, so the request
the sampler builds is the one the real library would receive. The readings are shaped like an
H100 going from idle to a decode load; they were not measured on this machine (it has no GPU).
"""

from __future__ import annotations

import ctypes
import time
import types
from typing import Any

import pynvml
import pytest

from perfmodel.hardware import get_gpu
from probes.nvml import GPM_MIN_INTERVAL_NS, NvmlSampler
from probes.sampler import SamplerThread

MS = 1_000_000
# One entry per tick: NVML readings of GPU 0 (H100) and GPM rates (percent) for the interval
# that ends at this tick. Power in mW and energy in mJ, as NVML reports them.
H100_TICKS: list[dict[str, Any]] = [
    {"util": (0, 0), "used": 1.1e9, "power_mw": 71_000, "energy_mj": 5_000_000, "sm_mhz": 345,
     "reasons": 0x1, "gpm": None},
    {"util": (97, 61), "used": 70.2e9, "power_mw": 612_000, "energy_mj": 5_120_000,
     "sm_mhz": 1980, "reasons": 0x0,
     "gpm": {"dram": 78.5, "sm": 96.0, "occ": 31.0, "tensor": 22.0}},
    {"util": (99, 64), "used": 70.3e9, "power_mw": 655_000, "energy_mj": 5_153_000,
     "sm_mhz": 1965, "reasons": 0x4,
     "gpm": {"dram": 81.0, "sm": 97.5, "occ": 33.0, "tensor": 24.5}},
    {"util": (98, 63), "used": 70.3e9, "power_mw": 649_000, "energy_mj": 5_251_000,
     "sm_mhz": 1970, "reasons": 0x0,
     "gpm": {"dram": 80.0, "sm": 97.0, "occ": 32.0, "tensor": 23.0}},
]  # fmt: skip
GPM_IDS = {
    pynvml.NVML_GPM_METRIC_DRAM_BW_UTIL: "dram",
    pynvml.NVML_GPM_METRIC_SM_UTIL: "sm",
    pynvml.NVML_GPM_METRIC_SM_OCCUPANCY: "occ",
    pynvml.NVML_GPM_METRIC_ANY_TENSOR_UTIL: "tensor",
}


class FakeNVMLError(Exception):
    def __init__(self, value: int, text: str) -> None:
        super().__init__(text)
        self.value = value


class FakeNotSupported(FakeNVMLError):
    def __init__(self) -> None:
        super().__init__(pynvml.NVML_ERROR_NOT_SUPPORTED, "Not Supported")


def fake_pynvml(ticks: list[dict[str, Any]], fail_at_tick: int | None = None) -> Any:
    """A module with pynvml's interface replaying ``ticks`` (set ``.tick`` and ``.now_ns``)."""
    nvml = types.ModuleType("fake_pynvml")
    for name in dir(pynvml):  # constants and ctypes structures, not functions
        if name.startswith(("NVML_", "c_nvml", "struct_c_nvml")):
            setattr(nvml, name, getattr(pynvml, name))
    state = {"tick": 0, "now_ns": 0, "init": 0, "freed": 0, "samples": {}, "metric_calls": []}
    nvml.state = state
    nvml.NVMLError = FakeNVMLError
    nvml.NVMLError_NotSupported = FakeNotSupported
    names = {0: "NVIDIA H100 80GB HBM3", 1: "NVIDIA A100-SXM4-80GB"}

    def reading(handle: int) -> dict[str, Any]:
        r = ticks[state["tick"]]
        if handle == 0:
            return r
        # GPU 1 idles: fixed readings, energy growing at 60 W.
        return {**ticks[0], "energy_mj": 3_000_000 + 12_000 * state["tick"], "gpm": None}

    def util(handle: int) -> Any:
        if handle == 0 and state["tick"] == fail_at_tick:
            raise FakeNVMLError(pynvml.NVML_ERROR_UNKNOWN, "Unknown Error")
        gpu, mem = reading(handle)["util"]
        return types.SimpleNamespace(gpu=gpu, memory=mem)

    def temperature(handle: int, sensor: int) -> int:
        if handle == 1:
            raise FakeNotSupported()
        assert sensor == pynvml.NVML_TEMPERATURE_GPU
        return 41

    def gpm_support(handle: int) -> Any:
        return types.SimpleNamespace(isSupportedDevice=1 if handle == 0 else 0)

    def sample_alloc() -> Any:
        return ctypes.pointer(pynvml.struct_c_nvmlGpmSample_t())

    def sample_get(handle: int, sample: Any) -> Any:
        assert handle == 0, "GPM is only asked of the GPU that supports it"
        state["samples"][ctypes.addressof(sample.contents)] = (state["tick"], state["now_ns"])
        return sample

    def metrics_get(request: Any) -> Any:
        assert request.version == pynvml.NVML_GPM_METRICS_GET_VERSION
        tick1, t1 = state["samples"][ctypes.addressof(request.sample1.contents)]
        tick2, t2 = state["samples"][ctypes.addressof(request.sample2.contents)]
        state["metric_calls"].append((tick1, tick2, t2 - t1))
        rates = ticks[tick2]["gpm"]
        for i in range(request.numMetrics):
            metric = request.metrics[i]
            metric.value = rates[GPM_IDS[metric.metricId]]
            metric.nvmlReturn = pynvml.NVML_SUCCESS
        return request

    nvml.nvmlInit = lambda: state.__setitem__("init", state["init"] + 1)
    nvml.nvmlShutdown = lambda: state.__setitem__("init", state["init"] - 1)
    nvml.nvmlDeviceGetCount = lambda: 2
    nvml.nvmlDeviceGetHandleByIndex = lambda i: i
    nvml.nvmlDeviceGetName = lambda h: names[h]
    nvml.nvmlDeviceGetUtilizationRates = util
    nvml.nvmlDeviceGetMemoryInfo = lambda h: types.SimpleNamespace(
        used=reading(h)["used"], total=85.0e9
    )
    nvml.nvmlDeviceGetPowerUsage = lambda h: reading(h)["power_mw"]
    nvml.nvmlDeviceGetTotalEnergyConsumption = lambda h: reading(h)["energy_mj"]
    nvml.nvmlDeviceGetClockInfo = lambda h, clock: (
        reading(h)["sm_mhz"] if clock == pynvml.NVML_CLOCK_SM else 2619
    )
    nvml.nvmlDeviceGetTemperature = temperature
    nvml.nvmlDeviceGetCurrentClocksEventReasons = lambda h: reading(h)["reasons"]
    nvml.nvmlGpmQueryDeviceSupport = gpm_support
    nvml.nvmlGpmSampleAlloc = sample_alloc
    nvml.nvmlGpmSampleFree = lambda s: state.__setitem__("freed", state["freed"] + 1)
    nvml.nvmlGpmSampleGet = sample_get
    nvml.nvmlGpmMetricsGet = metrics_get
    # What the GPU scope and the power source ask: no processes listed (so every GPU is
    # sampled), no MIG, and no instant power field (the 1 s average is read).
    nvml.nvmlDeviceGetUUID = lambda h: f"GPU-{h:08d}"
    nvml.nvmlDeviceGetComputeRunningProcesses = lambda h: []

    def not_supported(*args: Any) -> Any:
        raise FakeNotSupported()

    nvml.nvmlDeviceGetMigMode = not_supported
    nvml.nvmlDeviceGetArchitecture = lambda h: (
        pynvml.NVML_DEVICE_ARCH_HOPPER if h == 0 else pynvml.NVML_DEVICE_ARCH_AMPERE
    )
    nvml.nvmlDeviceGetFieldValues = not_supported
    return nvml


class Recorder:
    """Collects what a sampler emits: (t_ns, source, name, value, labels)."""

    def __init__(self) -> None:
        self.rows: list[tuple[int, str, str, float, dict[str, str]]] = []
        self.t_ns = 0

    def __call__(self, name, value, labels=None, *, t_ns=None, source=None) -> None:
        self.rows.append((t_ns or self.t_ns, source or "nvml", name, value, dict(labels or {})))

    def values(self, name: str, gpu: str = "0") -> list[float]:
        return [r[3] for r in self.rows if r[2] == name and r[4].get("gpu") == gpu]


def replay(sampler: NvmlSampler, nvml: Any, times_ms: list[int]) -> Recorder:
    rec = Recorder()
    for tick, t_ms in enumerate(times_ms):
        nvml.state.update(tick=tick, now_ns=t_ms * MS)
        rec.t_ns = t_ms * MS
        sampler.sample(t_ms * MS, rec)
    return rec


def test_readings_are_converted_to_our_units_per_gpu() -> None:
    nvml = fake_pynvml(H100_TICKS)
    sampler = NvmlSampler(nvml=nvml)
    assert sampler.open() is None
    rec = replay(sampler, nvml, [0, 200, 400, 600])
    assert rec.values("power_w") == [71.0, 612.0, 655.0, 649.0]
    assert rec.values("energy_j") == [5000.0, 5120.0, 5153.0, 5251.0]
    assert rec.values("gpu_util_pct") == [0, 97, 99, 98]
    assert rec.values("memory_used_bytes")[1] == 70.2e9
    assert rec.values("sm_clock_mhz")[2] == 1965 and rec.values("mem_clock_mhz")[0] == 2619
    assert rec.values("clocks_event_reasons") == [1, 0, 4, 0]
    assert rec.values("temperature_c") == [41] * 4
    # GPU 1 (A100): its temperature is unsupported, dropped after the first try, and said so.
    assert rec.values("power_w", gpu="1") == [71.0] * 4 and not rec.values("temperature_c", "1")
    described = {g["index"]: g for g in sampler.describe()["gpus"]}
    assert described[1]["unsupported"] == {"temperature": "Not Supported"}
    assert described[0]["hardware_table"] == "h100-sxm" and described[0]["gpm"]
    assert not described[1]["gpm"] and "not supported" in described[1]["gpm_reason"]
    sampler.close()
    assert nvml.state["init"] == 0 and nvml.state["freed"] == 2


def test_gpm_needs_two_samples_at_least_100_ms_apart() -> None:
    nvml = fake_pynvml(H100_TICKS)
    sampler = NvmlSampler(nvml=nvml)
    sampler.open()
    # Ticks at 0, 200, 250 (too close to 200: skipped) and 350 ms.
    rec = replay(sampler, nvml, [0, 200, 250, 350])
    gpm = [r for r in rec.rows if r[1] == "gpm"]
    assert {r[0] for r in gpm} == {200 * MS, 350 * MS}
    # The rates at 350 ms span 200..350 ms: sample 1 is the one taken at 200, not at 250.
    assert nvml.state["metric_calls"] == [(0, 1, 200 * MS), (1, 3, 150 * MS)]
    assert all(dt >= GPM_MIN_INTERVAL_NS for *_, dt in nvml.state["metric_calls"])
    assert rec.values("dram_bw_util_pct") == [78.5, 80.0]
    assert rec.values("sm_occupancy_pct") == [31.0, 32.0]
    assert rec.values("tensor_util_pct") == [22.0, 23.0]
    # Achieved bandwidth = utilization x the H100 SXM's 3.35 TB/s.
    peak = get_gpu("h100-sxm").memory_bytes_per_s
    assert rec.values("dram_bytes_per_s") == pytest.approx([0.785 * peak, 0.80 * peak])
    sampler.close()


def test_a_failing_reading_is_counted_and_the_others_still_recorded() -> None:
    nvml = fake_pynvml(H100_TICKS, fail_at_tick=1)
    thread = SamplerThread(NvmlSampler(interval_s=0.01, nvml=nvml))
    sampler = thread.sampler
    sampler.open()
    rec = Recorder()
    nvml.state.update(tick=1, now_ns=0)
    with pytest.raises(RuntimeError, match="gpu 0 utilization: Unknown Error"):
        sampler.sample(0, rec)
    assert rec.values("power_w") == [612.0]  # the rest of the tick was recorded
    assert "utilization" not in sampler.devices[0].unsupported  # transient: tried again
    sampler.close()


def test_sampler_thread_runs_the_fake_and_reports_its_cost() -> None:
    nvml = fake_pynvml([H100_TICKS[1]] * 1000)
    thread = SamplerThread(NvmlSampler(interval_s=0.02, nvml=nvml))
    assert thread.start() is None
    time.sleep(0.25)
    thread.stop()
    report = thread.report()
    assert report["status"] == "ok" and report["errors"] == 0
    assert report["ticks"] >= 5  # one at start, one at stop, and the timed ones
    assert report["tick_cpu_ms"]["mean"] is not None and report["cpu_s"] > 0
    assert len(report["gpus"]) == 2
    assert nvml.state["init"] == 0  # closed: nvmlShutdown was called


def test_without_a_driver_the_sampler_says_why_once() -> None:
    # This machine has no NVIDIA driver: the real pynvml raises NVMLError_LibraryNotFound.
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        pass
    else:
        pynvml.nvmlShutdown()
        pytest.skip("this machine has NVML; the no-driver path cannot be shown here")
    thread = SamplerThread(NvmlSampler())
    reason = thread.start()
    assert reason is not None and "NVML is unavailable" in reason
    thread.stop()
    report = thread.report()
    assert report["status"] == "unavailable" and report["ticks"] == 0 and report["reason"] == reason
