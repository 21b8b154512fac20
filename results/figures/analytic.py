"""run.json's "analytic" section: what the analytic model assumes about a run's engine.

The model shape, the weight, KV and activation dtypes, the TP degree, and the roofs (peak FLOP/s
and bytes/s) MFU and MBU are measured against (perfmodel.roofs.find_roofs: the hardware table for
a known GPU, `bench calibrate`'s figures for a CPU). Every assumption is written down, so the
summary can be recomputed from the run folder alone:

    {"model_config": {...} | None, "precision": {"weight_dtype", "kv_dtype",
     "activation_dtype"}, "tp": int, "roofs": perfmodel.roofs.Roofs.to_dict() | None,
     "roofs_reason": str | None, "notes": [str, ...]}

``roofs_reason`` says why ``roofs`` is None (None when there are roofs): the one sentence every
reader shows where MFU, MBU or a roof is missing (:func:`roofs_reason` also for older folders).

`bench run` and `bench simulate` write it (:func:`analytic_section`, from the engine's
/debug/engine description);
readers of a folder written before run.json had it rebuild it the same way (:func:`run_analytic`).

With the probes' GPU scope (probes.gpu_scope, run.json's probes.samplers.nvml.scope), the
engine's ``cuda:N`` is the scope's entry N (its CUDA order), never NVML's GPU N; on a MIG
instance the roofs are scaled to the slice: FLOP/s by its share of the SMs, bytes/s by its share
of the memory (:func:`scale_to_slice`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from perfmodel.files import JSONObject, JSONView
from perfmodel.models import resolve_model, short_dtype
from perfmodel.roofs import Roofs, find_roofs

__all__ = [
    "analytic_section",
    "engine_precision",
    "roofs_reason",
    "run_analytic",
    "scale_to_slice",
    "simulated_analytic",
    "tp_from_scope",
]

# fp8 KV caches are named by their torch dtype in an engine's description.
_FP8_NAMES = {"float8_e4m3fn": "fp8", "float8_e5m2": "fp8"}


def engine_precision(description: JSONView | None, config_dtype: str) -> dict[str, str]:
    """Weight, KV and activation dtypes of an engine (the reference engine says them in
    /debug/engine's ``description``); the checkpoint's ``config_dtype`` for all three when the
    engine does not describe itself."""
    if not description:
        dtype = short_dtype(config_dtype)
        return {"weight_dtype": dtype, "kv_dtype": dtype, "activation_dtype": dtype}
    dtype = short_dtype(str(description.get("dtype") or config_dtype))
    engine_config = description.get("engine_config") or {}
    quant = engine_config.get("quantization")
    weights = quant if quant in ("int8", "int4") else dtype
    kv = short_dtype(str(description.get("kv_cache_dtype") or dtype))
    return {"weight_dtype": weights, "kv_dtype": _FP8_NAMES.get(kv, kv), "activation_dtype": dtype}


def analytic_section(
    description: JSONView | None,
    model_spec: str | None,
    local: bool,
    gpu_names: list[str],
    cpu_name: str,
    calibration_path: Path | None = None,
    notes: Sequence[str] = (),
    gpu_scope: JSONView | None = None,
) -> JSONObject:
    """The section (module docstring) for an engine that ``description`` describes (None for
    an engine that does not); ``model_spec`` names the model for engines that do not describe
    themselves (a preset or HF directory, e.g. the --tokenizer). ``local``: the engine runs on
    this host, whose GPUs (NVML names) and CPU are given, so its roofs can be looked up. An
    engine on the simulated device gets the simulated part's (:func:`simulated_analytic`).
    ``notes`` (e.g. that an automatic calibration gave the roofs, or failed) come first in its
    notes, and in ``roofs_reason`` where there are no roofs. ``gpu_scope`` (the probes' scope of
    the engine's GPUs) replaces ``gpu_names`` by the engine's GPUs in its CUDA order, and scales
    the roofs of a MIG instance to the slice."""
    simulated = simulated_analytic(description)
    if simulated is not None:
        return simulated
    scoped = [g["name"] for g in (gpu_scope or {}).get("gpus") or []]
    section = _measured_section(description, model_spec, local, scoped or gpu_names, cpu_name,
                                calibration_path)  # fmt: skip
    if gpu_scope and section["roofs"]:
        section = scale_to_slice(section, gpu_scope, str((description or {}).get("device", "")))
    if gpu_scope and section["roofs"]:
        section = tp_from_scope(section, gpu_scope)
    section["notes"] = [*notes, *section["notes"]]
    if section["roofs_reason"] and notes:
        # What the caller tried (a skipped or failed calibration) is part of why there are none.
        section["roofs_reason"] = "; ".join([*notes, section["roofs_reason"]])
    return section


def _measured_section(
    description: JSONView | None,
    model_spec: str | None,
    local: bool,
    gpu_names: list[str],
    cpu_name: str,
    calibration_path: Path | None,
) -> JSONObject:
    notes: list[str] = []
    config_dict = (description or {}).get("model_config")
    if config_dict is None and model_spec:
        try:
            config_dict = resolve_model(model_spec).to_dict()
            notes.append(f"model shape from {model_spec!r}; tensor parallelism assumed 1")
        except ValueError as exc:
            notes.append(f"model shape unknown: {exc}")
    if config_dict is None:
        notes = notes or ["model shape unknown"]
        return {"model_config": None, "roofs": None, "roofs_reason": notes[-1], "notes": notes}
    precision = engine_precision(description, str(config_dict.get("dtype", "bfloat16")))
    if not description:
        notes.append("dtypes assumed from the checkpoint's dtype (the engine does not say)")
    roofs, reason = None, "the engine runs on another host; no roofs"
    if local:
        device = str((description or {}).get("device") or ("cuda" if gpu_names else "cpu"))
        roofs, reason = find_roofs(
            device, precision["activation_dtype"], gpu_names, cpu_name, calibration_path
        )
    if reason:
        notes.append(reason)
    return {
        "model_config": config_dict,
        "precision": precision,
        "tp": 1,
        "roofs": roofs.to_dict() if roofs else None,
        "roofs_reason": None if roofs else reason,
        "notes": notes,
    }


def scale_to_slice(section: JSONObject, gpu_scope: JSONView, device: str) -> JSONObject:
    """``section`` with its roofs scaled to the MIG instance the engine's ``device`` ("cuda:N")
    is in the scope (module docstring); unchanged for a whole GPU."""
    gpus = gpu_scope.get("gpus") or []
    index = int(device.partition(":")[2] or 0) if device.startswith("cuda") else 0
    mig = gpus[index].get("mig") if index < len(gpus) else None
    if not mig:
        return section
    roofs = dict(section["roofs"])
    roofs["flops_per_s"] *= mig["compute_fraction"]
    roofs["bytes_per_s"] *= mig["memory_fraction"]
    roofs["ridge_flop_per_byte"] = roofs["flops_per_s"] / roofs["bytes_per_s"]
    how = (f"MIG instance {mig['gpu_instance_id']}: {mig['sm_count']} SMs "
           f"({mig['compute_fraction']:.3f} of the GPU's), {mig['memory_fraction']:.3f} of its "
           "memory")  # fmt: skip
    roofs["source"] = f"{roofs['source']}, scaled to {how}"
    notes = [*section["notes"], f"roofs scaled to the {how}"]
    return {**section, "roofs": roofs, "notes": notes}


def tp_from_scope(section: JSONObject, gpu_scope: JSONView) -> JSONObject:
    """``section`` with its TP degree (how many GPUs the roofs count) set to the number of GPUs
    the engine was found on, when that is more than one and the model's heads split evenly over
    them; MFU and MBU are then per GPU of the engine's. Unchanged when every GPU was sampled
    for want of knowing the engine's (scope "all")."""
    n = len(gpu_scope.get("gpus") or [])
    config = section.get("model_config") or {}
    if gpu_scope.get("how") == "all" or n <= 1:
        return section
    heads = (config.get("num_attention_heads"), config.get("num_key_value_heads"))
    if not all(isinstance(h, int) and h % n == 0 for h in heads):
        note = f"the engine is on {n} GPUs, but the model's heads do not split over {n}: TP 1"
        return {**section, "notes": [*section["notes"], note]}
    note = f"TP degree {n}: the GPUs the engine runs on ({gpu_scope.get('how')})"
    notes = [n_ for n_ in section["notes"] if "tensor parallelism assumed 1" not in n_]
    return {**section, "tp": n, "notes": [*notes, note]}


def simulated_analytic(description: JSONView | None) -> JSONObject | None:
    """The analytic section (results.figures.analytic's shape) of an engine whose
    /debug/engine ``description`` says it runs on the simulated device; None for any other.

    The model, precision and TP degree are those simulated; the roofs are the simulated part's
    datasheet peaks, so MFU and MBU read as they would on that hardware.
    """
    sim = (description or {}).get("simulated")
    if not sim:
        return None
    assert description is not None
    model = sim["time_model"]
    roofs = model["roofs"]
    return {
        "model_config": description.get("model_config"),
        "precision": model["precision"],
        "tp": model["tp"],
        "roofs": Roofs(
            name=roofs["name"],
            source=f"simulated device: {roofs['sources'].get('peaks')}",
            compute_dtype=roofs["compute_dtype"],
            flops_per_s=roofs["peak_flops_per_s"],
            bytes_per_s=roofs["peak_bytes_per_s"],
        ).to_dict(),
        "notes": ["simulated device", *(sim.get("notes") or [])],
    }


def run_analytic(run_json: JSONView) -> JSONObject:
    """run.json's "analytic" section, or for a folder written before run.json had one, the same
    section rebuilt from the engine's description and the run's hardware, as `bench run` would
    have built it on this machine (a CPU's roofs are this machine's calibration, used only when
    it names the run's CPU); a note says it was rebuilt."""
    analytic = run_json.get("analytic")
    if isinstance(analytic, Mapping):
        return dict(analytic)
    engine = run_json.get("engine")
    description = engine.get("description") if isinstance(engine, Mapping) else None
    hardware = run_json.get("hardware")
    hardware = hardware if isinstance(hardware, Mapping) else {}
    rebuilt = analytic_section(
        description if isinstance(description, Mapping) else None,
        None,
        True,
        [str(g) for g in hardware.get("gpus") or []],
        str(hardware.get("cpu") or ""),
    )
    rebuilt["notes"] = [
        "run.json has no analytic section (an older run folder): rebuilt from the engine's "
        "description and the run's hardware",
        *rebuilt["notes"],
    ]
    return rebuilt


def roofs_reason(analytic: JSONView | None) -> str | None:
    """Why run.json's ``analytic`` section has no roofs, None when it has some: its
    ``roofs_reason``, or for a folder written before it was recorded, its notes."""
    if not isinstance(analytic, Mapping):
        return "run.json has no analytic section"
    if Roofs.from_dict(analytic.get("roofs")) is not None:
        return None
    recorded = analytic.get("roofs_reason")
    if isinstance(recorded, str) and recorded:
        return recorded
    return "; ".join(map(str, analytic.get("notes") or [])) or "run.json records no roofs"
