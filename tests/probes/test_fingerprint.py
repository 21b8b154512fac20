"""The run fingerprint's readings: the CPU frequency policy (a sysfs tree laid out by the test)
and the GPUs' health (a fake NVML with the real library's call shapes and errors)."""

from __future__ import annotations

import time
from pathlib import Path

import pynvml

from probes.fingerprint import cpu_fingerprint, cuda_version_text, gpu_fingerprint
from probes.xid_watch import XidWatch
from tests.support.fake_nvml import FakeGpu, FakeNvml


def cpufreq_tree(root: Path, governors: list[str], driver: str, preference: str | None) -> Path:
    for i, governor in enumerate(governors):
        folder = root / f"cpu{i}" / "cpufreq"
        folder.mkdir(parents=True)
        (folder / "scaling_governor").write_text(governor + "\n")
        (folder / "scaling_driver").write_text(driver + "\n")
        if preference is not None:
            (folder / "energy_performance_preference").write_text(preference + "\n")
    (root / "cpufreq").mkdir()  # sysfs has such siblings: not a CPU
    return root


def test_cpu_governors_are_counted_per_cpu(tmp_path: Path) -> None:
    root = cpufreq_tree(tmp_path, ["powersave", "powersave", "performance"], "acpi-cpufreq", None)
    cpu = cpu_fingerprint(root)
    assert cpu["driver"] == "acpi-cpufreq"
    assert cpu["governors"] == {"powersave": 2, "performance": 1}
    assert cpu["energy_performance_preferences"] is None
    assert "unavailable" not in cpu and cpu["load_average_1m"] >= 0


def test_a_machine_without_cpufreq_says_why(tmp_path: Path) -> None:
    cpu = cpu_fingerprint(tmp_path)
    assert cpu["governors"] is None and cpu["driver"] is None
    assert "not visible here" in cpu["unavailable"]


def test_gpu_readings_and_versions() -> None:
    hot = FakeGpu(
        uuid="GPU-1", ecc_uncorrected=None, violation_ns={pynvml.NVML_PERF_POLICY_THERMAL: 5}
    )
    fake = FakeNvml([FakeGpu(uuid="GPU-0"), hot])
    snap = gpu_fingerprint(fake.module())
    assert snap["available"] and snap["driver_version"] == "570.86.15"
    assert snap["cuda_driver_version"] == "12.8"
    first, second = snap["gpus"]
    assert first["sm_clock_max_mhz"] == 1980 and first["power_limit_w"] == 700.0
    assert first["ecc_uncorrected_volatile"] == 0
    assert second["violation_ns"]["thermal"] == 5 and second["violation_ns"]["power"] == 0
    # A part without ECC: the reading is None, and the refusal is said.
    assert second["ecc_uncorrected_volatile"] is None
    assert any("GPU 1 ECC" in m and "Not Supported" in m for m in snap["unavailable_readings"])
    assert fake.initialised == 0  # shut down as often as started


def test_gpu_readings_of_chosen_gpus_only() -> None:
    fake = FakeNvml([FakeGpu(uuid=f"GPU-{i}") for i in range(8)])
    snap = gpu_fingerprint(fake.module(), indices=[2, 3])
    assert [g["uuid"] for g in snap["gpus"]] == ["GPU-2", "GPU-3"]


def test_without_nvml_the_gpu_snapshot_says_why() -> None:
    class NoDriver(FakeNvml):
        def nvmlInit(self) -> None:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_DRIVER_NOT_LOADED)

    snap = gpu_fingerprint(NoDriver([]).module())
    assert not snap["available"] and "NVML did not start" in snap["reason"]
    assert cuda_version_text(None) is None and cuda_version_text(11020) == "11.2"


def test_the_xid_watch_catches_an_xid_fired_during_the_run() -> None:
    fake = FakeNvml([FakeGpu(uuid="GPU-0"), FakeGpu(uuid="GPU-1", xid_supported=False)])
    ticks = iter(range(10**9, 10**10, 10**6))
    watch = XidWatch(fake.module(), clock_ns=lambda: next(ticks)).start()
    assert fake.registered == [0]
    fake.fire_xid(0, 79)  # fallen off the bus
    deadline = time.monotonic() + 10
    while fake.xids_pending() and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.05)
    result = watch.stop()
    assert result["watched"] == [0]
    assert result["events"] == [{"t_ns": 10**9, "gpu": 0, "xid": 79}]
    assert "GPU 1" in result["reason"] and "Not Supported" in result["reason"]
    assert fake.initialised == 0 and watch.stop()["events"] == result["events"]


def test_the_xid_watch_without_gpus_records_why() -> None:
    result = XidWatch(FakeNvml([]).module()).start().stop()
    assert result == {"watched": [], "events": [], "reason": None}
