"""Why a row's measurement, prediction and claim disagree, in one line computed from its figures.

``verdict`` places the measured ratio and each prediction against the claimed range; where any
falls outside (or, for a claim with no range, where measurement and prediction differ by more
than ``DISAGREE_FACTOR``) the row gets a reason: which figures are off, then the cause its own
figures point at (this CPU's compute-bound share, the acceptance rate, the attention share of
the FLOPs, the batch sizes reached, the prefix hit rate, ...). Rows that agree get none.
"""

from __future__ import annotations

from statistics import median

from bench.techniques.claims import Claim
from perfmodel.files import JSONObject

# Measurement and prediction of a claim without a range disagree beyond this ratio.
DISAGREE_FACTOR = 1.5
# The lectures' figures are approximate ("~2x", "1/group"): a ratio within 1% of a bound is in.
TOLERANCE = 0.01


def place(value: float | None, low: float | None, high: float | None) -> str:
    """ "below", "within" or "above" the claimed range; "unknown" without a value or range."""
    if value is None or low is None or high is None:
        return "unknown"
    if value < low * (1 - TOLERANCE):
        return "below"
    return "above" if value > high * (1 + TOLERANCE) else "within"


def _x(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.0%}"


def _cause(claim: Claim, where: str, m: JSONObject, predictions: list[JSONObject]) -> str:
    """The cause the row's own figures point at."""
    gpu_memory = [p["memory_bound_share"] for p in predictions if p.get("memory_bound_share")]
    gpu_mem = (
        f"; the simulated GPUs spend {_pct(median(gpu_memory))} memory-bound" if gpu_memory else ""
    )
    cpu = f"this CPU spends {_pct(m.get('compute_bound_share'))} of its step time compute-bound"
    t = claim.technique
    if t == "kv_cache":
        cheaper = _x(m.get("decode_over_prefill_cost"))
        length = m.get("sequence_length") or 0
        return (
            f"a decoded token costs {cheaper} a recomputed one here (recomputing is batched "
            f"prefill), so {length:,.0f}-token sequences cost less than their length in "
            f"decodes{gpu_mem and gpu_mem + ', where recomputing rides on the weight reads'}"
        )
    if t == "gqa":
        return (
            f"the model has {_x(m.get('group'))} as many KV heads as query heads; the KV used "
            "also counts the partly filled last block of each request"
        )
    if t in ("int8", "int4"):
        also = m.get("also", {}).get("weight_bytes") or [None, None]
        weights = also[1] / also[0] if also[0] and also[1] else None
        rtn = (
            "; measured with the engine's round-to-nearest int4 (a GPTQ or AWQ checkpoint loads "
            "into the same int4 layers), the speed the same either way"
            if t == "int4"
            else ""
        )
        return (
            f"weights shrink to {_x(weights)} but {cpu} and dequantizes in software{gpu_mem}{rtn}"
        )
    if t == "speculative":
        return _speculative_cause(m)
    if t in ("continuous_batching", "paged_attention"):
        return _batching_cause(m, predictions, cpu, gpu_mem)
    if t == "flash_attention":
        return _flash_attention_cause(m, where)
    if t == "prefix_caching":
        return (
            f"{_pct(m.get('prefix_hit_rate'))} of the prompt tokens came from the cache; TTFT "
            "also holds the queueing and the decode steps a new request waits behind"
        )
    return "no cause recorded for this technique"


def _speculative_cause(m: JSONObject) -> str:
    """Speculative decoding's cause: the acceptance and the step costs in the speedup formula."""
    est = m.get("speculation") or {}
    if not est:
        return f"acceptance {_pct(m.get('acceptance_rate'))}; no step costs to estimate from"
    return (
        f"acceptance {_pct(est['acceptance_rate'])} of {est['draft_tokens_per_step']:.2f} "
        f"tokens drafted per step (K={est['k']}; the simulated proposer always drafts K): "
        f"E[accepted+1] = {est['expected_tokens_per_step']:.2f}, T_verify "
        f"{est['t_verify_s'] * 1e3:.2f} ms vs T_target {est['t_target_s'] * 1e3:.2f} ms, "
        f"so the formula gives {_x(est['speedup'])}"
    )


def _batching_cause(m: JSONObject, predictions: list[JSONObject], cpu: str, gpu_mem: str) -> str:
    """Continuous batching's and paged attention's cause: how many requests ran at once here
    and on the simulated GPUs, against what a bigger batch costs on this CPU (``cpu``)."""
    running = m.get("also", {}).get("max_running") or [None, None]
    waste = m.get("also", {}).get("kv_waste")
    waste_text = (
        f", KV waste {_pct(waste[0])} -> {_pct(waste[1])}" if waste and None not in waste else ""
    )
    gpu_running = next(
        (p["also"]["max_running"] for p in predictions if p.get("also", {}).get("max_running")),
        None,
    )
    gpu_text = (
        f"; on the first simulated GPU {gpu_running[1]} ran at once against {gpu_running[0]}"
        if gpu_running
        else ""
    )
    return (
        f"{running[1]} requests ran at once against {running[0]}{waste_text}, but {cpu}, "
        f"where a bigger batch costs proportionally more time{gpu_mem}{gpu_text}"
    )


def _flash_attention_cause(m: JSONObject, where: str) -> str:
    """Flash attention's cause: its share of a prefill's FLOPs (when the row is ``below`` its
    claim) and what the predictions time."""
    share = m.get("attention_flop_share")
    bound = 1 / (1 - share) if share is not None and share < 1 else None
    tokens = m.get("prompt_tokens") or 0
    parts = []
    if where == "below":
        parts.append(
            f"attention is {_pct(share)} of a {tokens:,.0f}-token prefill's FLOPs on the "
            f"model measured, so by FLOPs the whole prefill could gain at most {_x(bound)}"
        )
    parts.append(
        f"the predictions time attention alone, where at {tokens:,.0f} tokens naive attention "
        "moves the whole score matrix through memory and the fused kernel only Q, K, V and "
        "the output"
    )
    return "; ".join(parts)


def verdict(
    claim: Claim,
    bounds: tuple[float | None, float | None],
    measured: JSONObject,
    predictions: list[JSONObject],
) -> tuple[str, str | None]:
    """(placement of the measured ratio, the reason or None where everything agrees)."""
    low, high = bounds
    value = measured.get("value")
    where = place(value, low, high)
    predicted = [p["value"] for p in predictions if p.get("value") is not None]
    if low is not None and high is not None:
        off = [] if where == "within" else [f"measured {_x(value)} {where}"]
        # A prediction for another model carries that model's claimed range (GQA's 1/group).
        outside = [
            p["value"]
            for p in predictions
            if p.get("value") is not None
            and place(p["value"], *(p.get("claimed") or (low, high))) != "within"
        ]
        if outside:
            off.append(f"{len(outside)} of {len(predicted)} predictions outside ({_x(min(outside))}"
                       f"-{_x(max(outside))})")  # fmt: skip
        if not off:
            return where, None
        lead = f"{' and '.join(off)} the claimed {_x(low)}-{_x(high)}"
    else:
        if value is None or not predicted:
            return where, None
        mid = median(predicted)
        if max(value, mid) <= DISAGREE_FACTOR * min(value, mid):
            return where, None
        lead = f"measured {_x(value)} against {_x(mid)} predicted (median)"
    return where, f"{lead}: {_cause(claim, where, measured, predictions)}"
