"""Whether a run measured the hardware at its best: summary.json's "validity".

A run can finish with every request ok and still not be comparable: the GPU throttled, the
CPU ran its powersave policy, the driver reported an XID, other processes took the CPU, or the
token counts disagree. Each such *violation* marks the run: the terminal and report.html say it
first, and `bench gate` will not judge it (inconclusive) unless told to (``--allow-invalid``;
``--allow-busy`` for a busy machine alone).

Read from run.json's "fingerprint" (bench.run.endpoint.run_fingerprint: probes.fingerprint snapshots
before and after the load, the XID watch, the engine's identity) and the summary's own
sections. The GPU checks judge the engine's GPUs (run.json's GPU scope, probes.gpu_scope) where
the run found them, every GPU otherwise:

- ``busy``: results.figures.machine_load marked the machine busy;
- ``cpu_governor``: a CPU ran the ``powersave`` governor with a driver for which that pins the
  lowest frequency (acpi-cpufreq and the like), or with intel_pstate/amd-pstate's
  energy-performance preference set to ``power``;
- ``gpu_throttle``: NVML's thermal or reliability violation time grew during the run by more
  than :data:`THROTTLE_SHARE` of it, or the sampled clock event reasons include a thermal
  slowdown, a hardware slowdown or a power brake (a software power cap alone is a note: a
  GPU at full load commonly runs at its power limit);
- ``xid``: the driver reported an XID during the run;
- ``ecc``: uncorrected ECC errors grew during the run;
- ``tokens``: results.validity.token_reconciliation found the counts apart.
"""

from __future__ import annotations

from collections.abc import Mapping

from perfmodel.files import JSONObject, JSONView
from results.figures.samples_summary import gpu_scope

# The share of a run's time a GPU may spend thermally throttled before the run is marked.
THROTTLE_SHARE = 0.01
# NVML clock event reason bits (nvmlClocksEventReason*) that mark a run, and the one noted.
_MARKING_REASONS = {
    0x8: "hardware slowdown",
    0x20: "software thermal slowdown",
    0x40: "hardware thermal slowdown",
    0x80: "hardware power brake",
}
_NOTED_REASONS = {0x4: "software power cap"}
_PSTATE_DRIVERS = ("intel_pstate", "amd-pstate", "amd-pstate-epp")


def _violation(kind: str, message: str) -> dict[str, str]:
    return {"kind": kind, "message": message}


def _cpu(fingerprint: JSONView) -> list[dict[str, str]]:
    out = []
    for when in ("start", "end"):
        cpu = ((fingerprint.get(when) or {}).get("cpu")) or {}
        governors = cpu.get("governors") or {}
        if "powersave" not in governors:
            continue
        driver = cpu.get("driver")
        preferences = cpu.get("energy_performance_preferences") or {}
        if driver in _PSTATE_DRIVERS and not {"power", "balance_power"} & set(preferences):
            continue  # intel_pstate's "powersave" still scales up under load
        out.append(_violation(
            "cpu_governor",
            f"{governors['powersave']} CPU(s) ran the powersave governor (driver {driver}, "
            f"preference {sorted(preferences) or 'none'}) at the run's {when}: the CPU was held "
            "below its speed; set the performance governor (cpupower frequency-set -g "
            "performance) and run again",
        ))  # fmt: skip
        break
    return out


def _engine_gpus(run_json: JSONView) -> set[int] | None:
    """The NVML indices of the engine's GPUs (run.json's GPU scope), or None when the run
    measured every GPU or recorded no scope: then every GPU is judged."""
    scope = gpu_scope(run_json)
    if not scope or scope.get("how") == "all":
        return None
    return {int(g["index"]) for g in scope.get("gpus") or []}


def _gpus(
    fingerprint: JSONView, engine_gpus: set[int] | None
) -> tuple[list[dict[str, str]], list[str]]:
    start = (fingerprint.get("start") or {}).get("gpu") or {}
    end = (fingerprint.get("end") or {}).get("gpu") or {}
    span = fingerprint.get("span_s")
    violations: list[dict[str, str]] = []
    notes: list[str] = []
    before = {g.get("index"): g for g in start.get("gpus") or []}
    for gpu in end.get("gpus") or []:
        first = before.get(gpu.get("index"))
        if first is None or (engine_gpus is not None and gpu.get("index") not in engine_gpus):
            continue
        label = f"GPU {gpu.get('index')} ({gpu.get('name')})"
        for policy in ("thermal", "reliability"):
            a = (first.get("violation_ns") or {}).get(policy)
            b = (gpu.get("violation_ns") or {}).get(policy)
            if a is None or b is None or not span:
                continue
            share = (b - a) / 1e9 / span
            if share > THROTTLE_SHARE:
                violations.append(_violation(
                    "gpu_throttle",
                    f"{label} was held below its clocks by {policy} limits for "
                    f"{(b - a) / 1e9:.1f} s of the run's {span:.1f} s ({100 * share:.0f}%): "
                    "check its cooling and run again",
                ))  # fmt: skip
        a_ecc, b_ecc = first.get("ecc_uncorrected_volatile"), gpu.get("ecc_uncorrected_volatile")
        if a_ecc is not None and b_ecc is not None and b_ecc > a_ecc:
            violations.append(_violation(
                "ecc",
                f"{label}: {b_ecc - a_ecc} new uncorrected ECC error(s) during the run: the GPU's "
                "memory is failing; drain the node",
            ))  # fmt: skip
    return violations, notes


def _reasons(summary: JSONView) -> tuple[list[dict[str, str]], list[str]]:
    seen = ((summary.get("probes") or {}).get("gpu") or {}).get("clocks_event_reasons_seen") or []
    marking = sorted({name for bit, name in _MARKING_REASONS.items() for v in seen if v & bit})
    noted = sorted({name for bit, name in _NOTED_REASONS.items() for v in seen if v & bit})
    violations = []
    if marking:
        message = f"NVML reported clock slowdowns during the run: {', '.join(marking)}"
        violations.append(_violation("gpu_throttle", message))
    notes = [f"NVML reported {name} during the run (normal at full load)" for name in noted]
    return violations, notes


def _xid(fingerprint: JSONView, engine_gpus: set[int] | None) -> list[dict[str, str]]:
    events = [
        e
        for e in ((fingerprint.get("xid") or {}).get("events")) or []
        if engine_gpus is None or e.get("gpu") in engine_gpus
    ]
    if not events:
        return []
    listed = ", ".join(f"XID {e.get('xid')} on GPU {e.get('gpu')}" for e in events[:5])
    message = (
        f"the driver reported {len(events)} XID error(s) during the run ({listed}): the GPU "
        "faulted; check dmesg and the node"
    )
    return [_violation("xid", message)]


def run_validity(run_json: JSONView, summary: JSONView) -> JSONObject:
    """summary.json's "validity" (module docstring)."""
    fingerprint = run_json.get("fingerprint") or {}
    violations: list[dict[str, str]] = []
    load = summary.get("machine_load") or {}
    if load.get("busy"):
        violations.append(_violation("busy", str(load.get("message"))))
    violations += _cpu(fingerprint)
    engine_gpus = _engine_gpus(run_json)
    gpu_violations, notes = _gpus(fingerprint, engine_gpus)
    reason_violations, reason_notes = _reasons(summary)
    violations += gpu_violations + reason_violations + _xid(fingerprint, engine_gpus)
    notes += reason_notes
    tokens = summary.get("token_reconciliation") or {}
    violations += [_violation("tokens", line) for line in tokens.get("messages") or []]
    checked = ["machine_load" if load else None, "cpu" if fingerprint else None,
               "gpu" if (fingerprint.get("start") or {}).get("gpu", {}).get("available") else None,
               "tokens" if tokens.get("available") else None]  # fmt: skip
    return {
        "valid": not violations,
        "violations": violations,
        "notes": notes,
        "checked": [c for c in checked if c],
    }


def violation_lines(summary: JSONView, skip: tuple[str, ...] = ()) -> list[str]:
    """One line per violation of a run (none for a valid run, or a summary before validity),
    leaving out the kinds in ``skip``."""
    validity = summary.get("validity")
    if not isinstance(validity, Mapping):
        return []
    return [
        f"{v['kind']}: {v['message']}"
        for v in validity.get("violations") or []
        if v.get("kind") not in skip
    ]
