"""The figures the GPU checks judge by, computed from plain arrays and step tables (no GPU).

MBU is the project's own (results.figures.attribution): analytic bytes of each step (the same
step_costs a run folder's attribution uses) / its forward time / the part's peak bytes/s.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from perfmodel.roofs import Roofs
from results.figures.attribution import step_costs


def decode_mbu(steps: pd.DataFrame, analytic: Mapping[str, Any], num_seqs: int) -> dict[str, Any]:
    """MBU of the pure decode steps of ``num_seqs`` sequences in ``steps``
    (results.folder.engine_steps'
    table), against ``analytic``'s roofs (run.json's analytic section, results.figures.analytic).

    Returns ``steps`` (how many such steps), ``forward_s`` (their median forward time,
    seconds), ``bytes`` (their median analytic bytes) and ``mbu`` (the median of each step's
    bytes / forward_s / peak bytes/s); ``mbu`` is None without roofs or such steps.
    """
    roofs = Roofs.from_dict(analytic.get("roofs"))
    decode = steps[(steps["num_prefill_tokens"] == 0) & (steps["num_decode_seqs"] == num_seqs)]
    if decode.empty:
        return {"steps": 0, "forward_s": None, "bytes": None, "mbu": None}
    moved = step_costs(decode, analytic)["bytes"].to_numpy()
    forward = decode["forward_s"].to_numpy(dtype=np.float64)
    mbu = None
    if roofs is not None and np.all(forward > 0):
        mbu = float(np.median(moved / forward / roofs.bytes_per_s))
    return {
        "steps": len(decode),
        "forward_s": float(np.median(forward)),
        "bytes": float(np.median(moved)),
        "mbu": mbu,
    }


def roofline_bound(
    steps: pd.DataFrame, analytic: Mapping[str, Any], num_seqs: int, factor: float
) -> dict[str, Any]:
    """The pure decode steps of ``num_seqs`` sequences against the roofline: each step's
    analytic time is max(bytes / peak bytes/s, FLOPs / peak FLOP/s) on ``analytic``'s roofs.

    Returns ``steps``, ``forward_s`` and ``roofline_s`` (medians, seconds), ``ratio``
    (median forward_s / median roofline_s) and ``within`` (ratio <= ``factor``); ``ratio`` and
    ``within`` are None without roofs or such steps.
    """
    roofs = Roofs.from_dict(analytic.get("roofs"))
    decode = steps[(steps["num_prefill_tokens"] == 0) & (steps["num_decode_seqs"] == num_seqs)]
    out: dict[str, Any] = {"steps": len(decode), "forward_s": None, "roofline_s": None,
                           "ratio": None, "within": None, "factor": factor}  # fmt: skip
    if decode.empty or roofs is None:
        return out
    costs = step_costs(decode, analytic)
    analytic_s = np.maximum(
        costs["bytes"].to_numpy() / roofs.bytes_per_s, costs["flops"].to_numpy() / roofs.flops_per_s
    )
    forward = float(np.median(decode["forward_s"].to_numpy(dtype=np.float64)))
    roofline = float(np.median(analytic_s))
    ratio = forward / roofline
    return {**out, "forward_s": forward, "roofline_s": roofline, "ratio": ratio,
            "within": ratio <= factor}  # fmt: skip
