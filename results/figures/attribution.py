"""Where the engine's time went: prefill vs decode, memory- vs compute-bound, MFU and MBU.

Computed from the run folder alone: steps.parquet (the engine's steps), run.json's "analytic"
(model shape, dtypes, TP degree, roofs) and requests.parquet. Steps that start inside the
summary's measured window count. For each step the analytic model (perfmodel.roofline) gives FLOPs
and bytes of the whole step and of its prefill and decode parts:

- A step's time (end - start) goes to prefill and decode in proportion to the roofline time of
  each part alone, max(FLOPs / peak, bytes / bandwidth) (by FLOPs when the run has no roofs).
  Weight bytes of a mixed step are shared in the same proportion.
- A step is memory-bound when its arithmetic intensity is below the ridge point, else
  compute-bound; its whole time counts as such.
- MFU = analytic FLOPs / forward time / peak FLOP/s; MBU = analytic bytes / forward time / peak
  bytes/s (forward time: inside the executor, steps.parquet's forward_s), per GPU. Where they
  are None, ``mfu_reason`` says why (no roofs, and why: results.figures.analytic.roofs_reason; or no
  forward time).
- The decode part's context (sum of c over decoding sequences) is steps.parquet's
  decode_context_tokens when the engine records it; otherwise prefill chunks are taken to start
  at position 0 (exact without chunked prefill continuations) and the rest is decode context.
- Per-user TPS by phase, per measured ok request: prefill = prompt tokens / TTFT, decode = 1 /
  TPOT (tokens/s).

This module is the one place these figures are computed: summary.json stores them
(results.run_summary) and the dashboards read them from there, or, for a folder whose
summary.json lacks them, call :func:`step_attribution` on the folder. :func:`step_costs` gives
the whole-step FLOPs and bytes the dashboards' per-step dots are drawn from.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from perfmodel.files import JSONObject, JSONView
from perfmodel.model_config import ModelConfig
from perfmodel.roofline import Batch, CostModel, Precision, StepCost
from perfmodel.roofs import Roofs
from results.figures.analytic import roofs_reason
from results.figures.summary import TPS_PERCENTILES, distribution


def measured_requests(requests: pd.DataFrame, window: JSONView) -> np.ndarray:
    """Mask of the requests in the summary's window (results.figures.summary.WINDOW_RULE)."""
    start, stop = window.get("start_s"), window.get("end_s")
    if start is None or stop is None or requests.empty:
        return np.zeros(len(requests), dtype=bool)
    sent = requests["sent_s"].to_numpy(dtype=np.float64)
    first = requests["first_token_s"].to_numpy(dtype=np.float64, na_value=np.nan)
    done = requests["done_s"].to_numpy(dtype=np.float64, na_value=np.nan)
    end = np.fmax(np.fmax(done, first), sent)
    return (sent >= start) & (end <= stop)


def per_user_tps_by_phase(requests: pd.DataFrame, window: JSONView) -> JSONObject:
    """Distributions of prefill tokens/s (prompt / TTFT) and decode tokens/s (1 / TPOT)."""
    ok = measured_requests(requests, window) & (requests["status"] == "ok").to_numpy()
    req = requests[ok]
    ttft_s = (req["first_token_s"] - req["sent_s"]).to_numpy(dtype=np.float64, na_value=np.nan)
    prompt = req["prompt_tokens"].to_numpy(dtype=np.float64)
    out = req["output_tokens"].to_numpy(dtype=np.float64)
    decode_s = (req["done_s"] - req["first_token_s"]).to_numpy(dtype=np.float64, na_value=np.nan)
    with np.errstate(divide="ignore", invalid="ignore"):
        prefill_tps = np.where(ttft_s > 0, prompt / ttft_s, np.nan)
        decode_tps = np.where((out > 1) & (decode_s > 0), (out - 1) / decode_s, np.nan)
    return {
        "prefill_tok_s": distribution(prefill_tps, TPS_PERCENTILES),
        "decode_tok_s": distribution(decode_tps, TPS_PERCENTILES),
    }


def _parts(steps: pd.DataFrame) -> tuple[Batch, Batch, Batch, str]:
    """Whole-step, prefill-part and decode-part batches (arrays) of ``steps``."""
    col = {name: steps[name].to_numpy(dtype=np.float64) for name in steps.columns}
    tp, td = col["num_prefill_tokens"], col["num_decode_tokens"]
    sp, sd = col["num_prefill_seqs"], col["num_decode_seqs"]
    ctx, pairs = col["context_tokens"], col["attn_pairs"]
    if "decode_context_tokens" in col:
        ctx_d, how = col["decode_context_tokens"], "recorded"
    else:
        ctx_d = np.clip(ctx - tp, td, ctx)
        how = "estimated: prefill chunks taken to start at position 0"
    ctx_p = ctx - ctx_d
    whole = Batch(tp + td, sp + sd, sp + sd, ctx - tp - td, pairs)
    prefill = Batch(tp, sp, sp, np.maximum(ctx_p - tp, 0.0), np.maximum(pairs - ctx_d, 0.0))
    decode = Batch(td, sd, sd, np.maximum(ctx_d - td, 0.0), ctx_d)
    return whole, prefill, decode, how


def cost_model(analytic: JSONView) -> CostModel:
    """The analytic model run.json's "analytic" section describes (results.figures.analytic).

    Raises ValueError naming what is missing or malformed.
    """
    if not analytic.get("model_config"):
        raise ValueError("run.json's analytic section has no model shape (model_config)")
    try:
        config = ModelConfig.from_dict(analytic["model_config"])
        precision = Precision(**analytic["precision"])
        return CostModel(config, precision, int(analytic.get("tp") or 1))
    except (KeyError, TypeError) as exc:
        raise ValueError(f"run.json's analytic section is malformed: {exc}") from exc


def step_costs(steps: pd.DataFrame, analytic: JSONView) -> pd.DataFrame:
    """Analytic ``flops`` and ``bytes`` of each whole step of ``steps`` (all of them, in order,
    same index), as :func:`step_attribution` counts them. Raises ValueError as
    :func:`cost_model` does."""
    whole = cost_model(analytic).step(_parts(steps)[0])
    shape = (len(steps),)
    return pd.DataFrame(
        {
            "flops": np.broadcast_to(np.asarray(whole.flops, dtype=np.float64), shape),
            "bytes": np.broadcast_to(np.asarray(whole.bytes, dtype=np.float64), shape),
        },
        index=steps.index,
    )


def _phase(
    cost: StepCost, whole: StepCost, share: np.ndarray, time_s: np.ndarray, forward_s: np.ndarray,
    tokens: np.ndarray, roofs: Roofs | None,
) -> JSONObject:  # fmt: skip
    flops = float(np.sum(cost.flops))
    # The part's own traffic, plus its share of the weights the step read once for both parts.
    num_bytes = float(np.sum(cost.bytes - cost.weight_bytes + whole.weight_bytes * share))
    fwd = float(np.sum(forward_s * share))
    out: JSONObject = {
        "tokens": int(np.sum(tokens)),
        "time_s": float(np.sum(time_s * share)),
        "forward_s": fwd,
        "flops": flops,
        "bytes": num_bytes,
        "arithmetic_intensity": flops / num_bytes if num_bytes else None,
        "mfu": None,
        "mbu": None,
    }
    if roofs and fwd > 0:
        out["mfu"] = flops / fwd / roofs.flops_per_s
        out["mbu"] = num_bytes / fwd / roofs.bytes_per_s
    return out


@dataclass(frozen=True)
class StepSplit:
    """Steps' analytic costs and the share of each step's time that goes to prefill.

    batches: whole-step, prefill and decode batches and how the decode context was found
    (:func:`_parts`); whole, prefill, decode: their costs; prefill_share: per step, 0..1 (the
    rest is decode); apportioned_by: the rule that made the shares (module docstring)."""

    batches: tuple[Batch, Batch, Batch, str]
    whole: StepCost
    prefill: StepCost
    decode: StepCost
    prefill_share: np.ndarray
    apportioned_by: str


def split_steps(steps: pd.DataFrame, analytic: JSONView) -> StepSplit:
    """Each step of ``steps`` split into its prefill and decode parts (module docstring): the
    one rule that both the time attribution and results.figures.energy_phase use. Raises ValueError
    as
    :func:`cost_model` does."""
    model = cost_model(analytic)
    roofs = Roofs.from_dict(analytic.get("roofs"))
    batches = _parts(steps)
    whole_b, prefill_b, decode_b, _ = batches
    whole, prefill, decode = model.step(whole_b), model.step(prefill_b), model.step(decode_b)
    if roofs:
        peak_f, peak_b = roofs.flops_per_s, roofs.bytes_per_s
        cost_p = np.where(prefill_b.num_tokens > 0, prefill.roofline_time_s(peak_f, peak_b), 0.0)
        cost_d = np.where(decode_b.num_tokens > 0, decode.roofline_time_s(peak_f, peak_b), 0.0)
        how = "roofline time of each part"
    else:
        cost_p, cost_d = np.asarray(prefill.flops), np.asarray(decode.flops)
        how = "FLOPs of each part (no roofs for this run)"
    total = cost_p + cost_d
    with np.errstate(divide="ignore", invalid="ignore"):
        share_p = np.where(total > 0, cost_p / total, 0.0)
    share_p = np.broadcast_to(np.asarray(share_p, dtype=np.float64), (len(steps),))
    return StepSplit(batches, whole, prefill, decode, share_p, how)


def step_attribution(
    steps: pd.DataFrame | None, analytic: JSONView | None, window: JSONView
) -> JSONObject:
    """The time attribution of the steps in ``window`` (module docstring); ``{"available":
    False, "reason": ...}`` when the run lacks what it needs. Raises ValueError for a malformed
    analytic section (:func:`cost_model`)."""
    if steps is None:
        return {"available": False, "reason": "no steps.parquet: the engine records no steps"}
    if not analytic or not analytic.get("model_config"):
        return {"available": False, "reason": "run.json has no model shape for the analytic model"}
    start, stop = window.get("start_s"), window.get("end_s")
    if start is None or stop is None:
        return {"available": False, "reason": "the run has no measured window"}
    sel = steps[(steps["start_s"] >= start) & (steps["start_s"] < stop)]
    roofs = Roofs.from_dict(analytic.get("roofs"))
    split = split_steps(sel, analytic)
    _, prefill_b, decode_b, context_how = split.batches
    whole, prefill, decode = split.whole, split.prefill, split.decode
    share_p, how = split.prefill_share, split.apportioned_by
    time_s = (sel["end_s"] - sel["start_s"]).to_numpy(dtype=np.float64)
    forward_s = sel["forward_s"].to_numpy(dtype=np.float64)
    compute_bound = (
        np.asarray(whole.compute_bound(roofs.flops_per_s, roofs.bytes_per_s), dtype=bool)
        if roofs
        else None
    )
    flops, num_bytes, fwd = float(np.sum(whole.flops)), float(np.sum(whole.bytes)), forward_s.sum()
    out: JSONObject = {
        "available": True,
        "steps": len(sel),
        "steps_by_kind": {
            "prefill_only": int((sel["num_decode_tokens"] == 0).sum()),
            "decode_only": int((sel["num_prefill_tokens"] == 0).sum()),
            "mixed": int(((sel["num_prefill_tokens"] > 0) & (sel["num_decode_tokens"] > 0)).sum()),
        },
        "apportioned_by": how,
        "decode_context": context_how,
        "busy_s": float(time_s.sum()),
        "forward_s": float(fwd),
        "window_s": window.get("duration_s"),
        "flops": flops,
        "bytes": num_bytes,
        "arithmetic_intensity": flops / num_bytes if num_bytes else None,
        "achieved_flops_per_s": flops / fwd if fwd > 0 else None,
        "achieved_bytes_per_s": num_bytes / fwd if fwd > 0 else None,
        "mfu": None,
        "mbu": None,
        "mfu_reason": None,
        "roofs": analytic.get("roofs") if roofs else None,
        "prefill": _phase(prefill, whole, share_p, time_s, forward_s, prefill_b.num_tokens, roofs),
        "decode": _phase(
            decode, whole, 1.0 - share_p, time_s, forward_s, decode_b.num_tokens, roofs
        ),
        "bound_time_s": None,
    }
    if roofs and fwd > 0:
        out["mfu"] = flops / fwd / roofs.flops_per_s
        out["mbu"] = num_bytes / fwd / roofs.bytes_per_s
    elif roofs:
        out["mfu_reason"] = "no forward time in the window (steps.parquet's forward_s)"
    else:
        out["mfu_reason"] = f"no roofs: {roofs_reason(analytic)}"
    if compute_bound is not None:
        out["bound_time_s"] = {
            "memory": float(time_s[~compute_bound].sum()),
            "compute": float(time_s[compute_bound].sum()),
        }
    return out


def engine_estimate_check(
    run_requests: pd.DataFrame, analytic: JSONView | None, engine_flops: float | None
) -> JSONObject | None:
    """The engine's own FLOP count over the run (vllm:estimated_flops_per_gpu_total's increase)
    beside ours for the same ok requests (perfmodel.roofline.CostModel.request_flops)."""
    if engine_flops is None or not analytic or not analytic.get("model_config"):
        return None
    ok = run_requests[(run_requests["status"] == "ok") & (run_requests["output_tokens"] >= 1)]
    model = cost_model(analytic)
    ours = float(
        np.sum(
            model.request_flops(
                ok["prompt_tokens"].to_numpy(dtype=np.float64),
                ok["output_tokens"].to_numpy(dtype=np.float64),
            )
        )
    )
    return {
        "engine_flops": engine_flops,
        "analytic_flops": ours,
        "engine_over_analytic": engine_flops / ours if ours else None,
        "note": "counters span the whole run (cancelled and failed requests' work included); "
        "the analytic figure counts the ok requests",
    }
