"""The roofline's fallbacks through probes/, imported lazily: roofs from the hardware table (or
this machine's calibration) and per-step FLOPs and bytes from the analytic model.

Used only when a run folder does not record them itself (see :mod:`dashboards.roofline_inputs`).
Every function returns ``(result, None)`` or ``(None, reason)``: a missing probes package, an
unknown GPU or a changed probes API becomes a sentence in the page, never an exception.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

__all__ = ["costs_from_probes", "roofs_from_probes"]


def _description(run_json: Mapping[str, Any]) -> Mapping[str, Any]:
    engine = run_json.get("engine") or {}
    description = engine.get("description") if isinstance(engine, Mapping) else None
    return description if isinstance(description, Mapping) else {}


def roofs_from_probes(run_json: Mapping[str, Any]) -> tuple[dict[str, Any] | None, str | None]:
    """Peaks for the run's first GPU (perfmodel.hardware), else for its CPU as calibrated by
    `bench calibrate` on this machine when the CPU names agree. The dict has the keys of
    summary.json's ``roofline`` (peak_flops_per_s, peak_bytes_per_s, hardware, dtype, source)."""
    try:
        from perfmodel import calibration as calibrate
        from perfmodel import hardware
    except ImportError as exc:
        return None, f"perfmodel.hardware is not available ({exc})"
    dtype = str(_description(run_json).get("dtype") or "bf16")
    host = run_json.get("hardware") or {}
    gpus = [str(g) for g in host.get("gpus") or []]
    try:
        if gpus:
            spec = hardware.find_by_nvml_name(gpus[0])
            if spec is None:
                return None, f"the hardware table has no entry for the GPU {gpus[0]!r}"
        else:
            saved = calibrate.load()
            if saved is None:
                return None, "no GPU, and this machine has no calibration (run `bench calibrate`)"
            measured_on = str((saved.get("host") or {}).get("cpu") or "")
            if measured_on and measured_on != str(host.get("cpu") or ""):
                return None, (
                    f"the saved calibration is of another CPU ({measured_on!r}, not "
                    f"{host.get('cpu')!r}); run `bench calibrate` on the run's machine"
                )
            spec = hardware.spec_from_calibration(saved, "cpu")
        peak = spec.peak_for(dtype)
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        return None, f"perfmodel.hardware gave no peaks: {exc}"
    roofs = {
        "peak_flops_per_s": float(peak),
        "peak_bytes_per_s": float(spec.memory_bytes_per_s),
        "hardware": spec.name,
        "dtype": dtype,
        "source": spec.source,
    }
    return roofs, None


def _cost_model(run_json: Mapping[str, Any]) -> tuple[Any, str | None]:
    """perfmodel.roofline.CostModel from run.json's "analytic" (what the summary used), else from
    the engine's description (runs recorded before the probes wrote "analytic")."""
    from perfmodel.model_config import ModelConfig
    from perfmodel.models import short_dtype
    from perfmodel.roofline import CostModel, Precision

    analytic = run_json.get("analytic")
    if isinstance(analytic, Mapping) and isinstance(analytic.get("model_config"), Mapping):
        config = ModelConfig.from_dict(analytic["model_config"])
        precision = Precision(**analytic["precision"]) if analytic.get("precision") else None
        return CostModel(config, precision, int(analytic.get("tp") or 1)), None
    description = _description(run_json)
    model_config = description.get("model_config")
    if not isinstance(model_config, Mapping):
        return None, "run.json describes no model shape (neither analytic nor engine.description)"
    config = ModelConfig.from_dict(model_config)
    dtype = short_dtype(str(description.get("dtype") or config.dtype))
    kv_dtype = short_dtype(str(description.get("kv_cache_dtype") or dtype))
    return CostModel(config, Precision.for_model(config, dtype, kv_dtype, None)), None


def costs_from_probes(
    steps: pd.DataFrame, run_json: Mapping[str, Any]
) -> tuple[pd.DataFrame | None, str | None]:
    """Per-step ``flops`` and ``bytes`` of the whole step from perfmodel.roofline's CostModel.

    Every scheduled sequence is counted as producing logits (an upper bound: a prefill chunk
    that does not end its prompt samples nothing), as results.attribution does.
    """
    try:
        from perfmodel.roofline import Batch
    except ImportError as exc:
        return None, f"perfmodel.roofline is not available ({exc})"
    try:
        model, why = _cost_model(run_json)
        if model is None:
            return None, why
        tokens = (steps["num_prefill_tokens"] + steps["num_decode_tokens"]).to_numpy(np.float64)
        seqs = steps["num_seqs"].to_numpy(np.float64)
        context = steps["context_tokens"].to_numpy(np.float64)
        cost = model.step(
            Batch(
                num_tokens=tokens,
                num_seqs=seqs,
                num_logits=seqs,
                cached_tokens=np.maximum(context - tokens, 0.0),
                attn_pairs=steps["attn_pairs"].to_numpy(np.float64),
            )
        )
        flops = np.broadcast_to(np.asarray(cost.flops, dtype=np.float64), tokens.shape)
        moved = np.broadcast_to(np.asarray(cost.bytes, dtype=np.float64), tokens.shape)
    except (ImportError, ValueError, KeyError, TypeError, AttributeError) as exc:
        return None, f"perfmodel.roofline could not cost the steps: {exc}"
    return pd.DataFrame({"flops": flops, "bytes": moved}), None
