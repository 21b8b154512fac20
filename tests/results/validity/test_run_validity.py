"""Run validity (results.validity.run_validity): what marks a run, from its fingerprint and
summary."""

from __future__ import annotations

from typing import Any

from results.validity.run_validity import run_validity, violation_lines
from tests.support.fingerprints import fingerprint, gpu, snapshot, throttled


def kinds(run_json: dict[str, Any], summary: dict[str, Any] | None = None) -> list[str]:
    return [v["kind"] for v in run_validity(run_json, summary or {})["violations"]]


def test_a_quiet_node_is_valid() -> None:
    validity = run_validity({"fingerprint": fingerprint()}, {})
    assert validity == {"valid": True, "violations": [], "notes": [], "checked": ["cpu", "gpu"]}


def test_thermal_throttling_beyond_one_percent_of_the_run_marks_it() -> None:
    assert kinds({"fingerprint": throttled(0.5)}) == []  # 0.8% of 60 s
    validity = run_validity({"fingerprint": throttled(6.0)}, {})
    assert not validity["valid"]
    (violation,) = validity["violations"]
    assert violation["kind"] == "gpu_throttle"
    assert "thermal limits for 6.0 s of the run's 60.0 s (10%)" in violation["message"]


def test_new_ecc_errors_and_xids_mark_the_run() -> None:
    ecc = fingerprint(end=snapshot(gpus=[gpu(ecc=2)]))
    assert kinds({"fingerprint": ecc}) == ["ecc"]
    no_ecc = fingerprint(start=snapshot(gpus=[gpu(ecc=None)]))
    assert kinds({"fingerprint": no_ecc}) == []
    xid = fingerprint(xids=[{"t_s": 3.0, "gpu": 0, "xid": 79}])
    (line,) = violation_lines({"validity": run_validity({"fingerprint": xid}, {})})
    assert line.startswith("xid: the driver reported 1 XID error(s)") and "XID 79 on GPU 0" in line


def test_powersave_marks_the_run_only_where_it_holds_the_cpu_down() -> None:
    acpi = fingerprint(start=snapshot(governor="powersave", driver="acpi-cpufreq"))
    assert kinds({"fingerprint": acpi}) == ["cpu_governor"]
    # intel_pstate's powersave scales up under load unless its preference asks for power.
    pstate = fingerprint(start=snapshot(governor="powersave", driver="intel_pstate",
                                        preference="balance_performance"))  # fmt: skip
    assert kinds({"fingerprint": pstate}) == []
    saving = fingerprint(start=snapshot(governor="powersave", driver="intel_pstate",
                                        preference="power"))  # fmt: skip
    assert kinds({"fingerprint": saving}) == ["cpu_governor"]


def test_clock_event_reasons_mark_or_note() -> None:
    summary = {"probes": {"gpu": {"clocks_event_reasons_seen": [0x4, 0x4 | 0x40]}}}
    validity = run_validity({"fingerprint": fingerprint()}, summary)
    assert [v["kind"] for v in validity["violations"]] == ["gpu_throttle"]
    assert "hardware thermal slowdown" in validity["violations"][0]["message"]
    assert validity["notes"] == ["NVML reported software power cap during the run (normal at "
                                 "full load)"]  # fmt: skip
    capped = {"probes": {"gpu": {"clocks_event_reasons_seen": [0x4]}}}
    assert run_validity({}, capped)["valid"]


def test_busy_machine_and_token_counts_join_the_violations() -> None:
    summary = {
        "machine_load": {"busy": True, "message": "other processes used 40% of the CPU"},
        "token_reconciliation": {"available": True, "messages": ["prompt tokens: far apart"]},
    }
    validity = run_validity({}, summary)
    assert [v["kind"] for v in validity["violations"]] == ["busy", "tokens"]
    assert validity["checked"] == ["machine_load", "tokens"]
    assert violation_lines({"validity": validity}, skip=("busy",)) == [
        "tokens: prompt tokens: far apart"
    ]
    assert violation_lines({}) == []


def test_only_the_engines_gpus_are_judged() -> None:
    two = fingerprint(start=snapshot(gpus=[gpu(0), gpu(1)]),
                      end=snapshot(gpus=[gpu(0), gpu(1, thermal_ns=int(30e9))]),
                      xids=[{"t_s": 1.0, "gpu": 1, "xid": 48}])  # fmt: skip
    scope = {"how": "engine processes", "reason": "r", "notes": [], "gpus": [{"index": 0}]}
    run_json = {"fingerprint": two, "probes": {"samplers": {"nvml": {"scope": scope}}}}
    assert kinds(run_json) == []  # GPU 1 is not the engine's
    scope["how"] = "all"
    assert kinds(run_json) == ["gpu_throttle", "xid"]
