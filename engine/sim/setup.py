"""Building the simulated executor from an EngineConfig (``device="sim"``).

- Precision: weights at the quantization's dtype (int8/int4) or the model's, KV at fp8 when
  ``kv_cache_dtype`` says so, activations (the matmuls' compute dtype) at the engine's dtype.
- Roofs: the GPU's datasheet peaks times its published efficiencies (perfmodel.efficiency), or for
  ``gpu="cpu"`` this machine's `bench calibrate` peaks times the efficiencies, and the overheads,
  that `bench sim-calibrate` fitted for this model here.
- KV capacity: ``kv_cache_memory_bytes`` per GPU when given; else for a GPU exactly what
  `bench capacity` computes (perfmodel.capacity's one KV budget: GPU memory x
  gpu_memory_utilization - weights, per GPU), in blocks as the torch executor counts them
  (perfmodel.capacity.num_kv_blocks), and for the CPU the torch executor's default budget.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import torch

from engine.config import EngineConfig
from engine.model.kv_dtype import is_fp8, resolve_kv_cache_dtype
from engine.model.model_runner import CPU_KV_DEFAULT_BYTES
from engine.sim.calibration import SimCalibration
from engine.sim.calibration import load as load_calibration
from engine.sim.cost import CPU, DeviceRoofs, StepTimeModel, device_roofs
from engine.sim.executor import SimExecutor
from perfmodel import calibration as calibrate
from perfmodel.capacity import capacity, num_kv_blocks
from perfmodel.hardware import get_gpu
from perfmodel.model_config import ModelConfig
from perfmodel.models import dtype_bytes, resolve_model, short_dtype
from perfmodel.roofline import Precision


def sim_precision(config: EngineConfig, dtype: torch.dtype) -> Precision:
    """Weight, KV and activation dtypes of the simulated engine (module docstring)."""
    activations = short_dtype(str(dtype).removeprefix("torch."))
    quantization = config.model.quantization
    weights = quantization if quantization != "none" else activations
    kv_dtype = resolve_kv_cache_dtype(config.cache.kv_cache_dtype, dtype)
    kv = "fp8" if is_fp8(kv_dtype) else activations
    return Precision(weights, kv, activations)


def _calibration(config: EngineConfig, model: ModelConfig) -> SimCalibration | None:
    if config.sim.gpu != CPU:
        return None
    saved = calibrate.load()
    host = (saved or {}).get("host", {}).get("cpu")
    return load_calibration(model.name, host)


def _num_blocks(
    config: EngineConfig, model: ModelConfig, precision: Precision, time_model: StepTimeModel
) -> tuple[int, dict[str, Any] | None]:
    block_size, budget, gpu = (
        config.cache.block_size,
        config.cache.kv_cache_memory_bytes,
        config.sim.gpu,
    )
    tp = config.parallel.tp
    per_block = block_size * time_model.cost.kv_bytes_per_token
    if budget is not None or gpu == CPU:
        # The torch executor's CPU budget, so that a simulated CPU preempts when the real one does.
        return num_kv_blocks(budget or CPU_KV_DEFAULT_BYTES, per_block), None
    cap = capacity(
        model, get_gpu(str(gpu)), min(config.model.max_model_len or 10**9,
        model.max_position_embeddings), precision, tp, config.sim.gpu_memory_utilization,
    )  # fmt: skip
    blocks = num_kv_blocks(cap.kv_bytes_left_per_gpu, per_block)
    if blocks < 1:
        raise ValueError(f"{model.name} on {tp}x {cap.gpu}: {cap.reason}")
    return blocks, cap.to_dict()


def _draft_model(config: EngineConfig, model: ModelConfig) -> ModelConfig | None:
    spec = config.speculative
    if spec.method != "draft":
        return None
    if spec.draft_num_layers is not None:
        if not 1 <= spec.draft_num_layers < model.num_hidden_layers:
            raise ValueError(
                f"draft_num_layers must be in 1..{model.num_hidden_layers - 1}, "
                f"got {spec.draft_num_layers}"
            )
        return replace(model, num_hidden_layers=spec.draft_num_layers)
    assert spec.draft_model is not None
    return resolve_model(spec.draft_model)


def build_sim_executor(config: EngineConfig, model: ModelConfig, dtype: torch.dtype) -> SimExecutor:
    """The simulated executor for ``config`` (``device="sim"``) running ``model`` in ``dtype``.

    Raises ValueError naming the setting to change when the device or the model cannot be
    simulated (unknown GPU, no peak for the dtype, weights that do not fit, no calibration).
    """
    sim, tp, block_size = config.sim, config.parallel.tp, config.cache.block_size
    assert sim.gpu is not None, "EngineConfig checks that device='sim' names a gpu"
    precision = sim_precision(config, dtype)
    cal = _calibration(config, model)
    roofs: DeviceRoofs = device_roofs(sim.gpu, precision.activation_dtype)
    if cal is not None:
        # The fitted rates are absolute: a later `bench calibrate` moves the peaks, not them.
        roofs = device_roofs(
            sim.gpu,
            precision.activation_dtype,
            cal.flops_per_s / roofs.peak_flops_per_s,
            cal.bytes_per_s / roofs.peak_bytes_per_s,
        )
    if sim.sim_step_overhead_ms is not None:
        step_overhead_s, seq_overhead_s = sim.sim_step_overhead_ms / 1e3, 0.0
    elif cal is not None:
        step_overhead_s, seq_overhead_s = cal.step_overhead_s, cal.seq_overhead_s
    else:
        step_overhead_s, seq_overhead_s = 0.0, 0.0
    draft_config = _draft_model(config, model)
    draft = None
    if draft_config is not None:
        draft = StepTimeModel(draft_config, precision, tp, roofs)
    time_model = StepTimeModel(model, precision, tp, roofs, step_overhead_s, seq_overhead_s, draft)
    num_blocks, cap = _num_blocks(config, model, precision, time_model)
    notes = []
    if sim.gpu == CPU and cal is None:
        notes.append(
            f"no `bench sim-calibrate` of {model.name} on this machine: the calibrated peaks "
            "are used with no overhead, an optimistic bound"
        )
    if sim.sim_step_overhead_ms is None and sim.gpu != CPU:
        notes.append(
            "no per-step overhead (sim_step_overhead_ms): the host's scheduling and launch "
            "time is not modelled, so the prediction is a lower bound on step time"
        )
    for what in ("compute_efficiency", "memory_efficiency"):
        source = roofs.sources.get(what, "")
        if source.startswith("no published"):
            notes.append(f"{roofs.name} {what.replace('_', ' ')}: {source}")
    kv_dtype = resolve_kv_cache_dtype(config.cache.kv_cache_dtype, dtype)
    info = {
        "gpu": roofs.name,
        "gpu_key": roofs.key,
        "tp": tp,
        "weight_bytes": model.num_params() * dtype_bytes(precision.weight_dtype),
        "kv_capacity_tokens": num_blocks * block_size,
        "capacity": cap,
        "calibration": cal.to_dict() if cal else None,
        "notes": notes,
    }
    return SimExecutor(
        time_model, num_blocks, model.vocab_size, config.model.seed, sim.sim_speedup,
        sim.sim_acceptance_rate, kv_dtype, info,
    )  # fmt: skip
