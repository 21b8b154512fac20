"""Requests the workload abandoned (a scenario's ``[abandon]``): summary.json's ``abandoned``.

An abandoned request is ``cancelled`` with ``abandoned`` true (results.folder.records): the client
closed its stream after the tokens or seconds the scenario gave, as a user who stopped reading.
Like every request that is not ok it is kept out of the latency figures (TTFT, ITL, TPOT,
E2EL) and counted here, over the whole run: how many, their share of all requests, the tokens
they received before the close, and how long after being sent they were closed.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from perfmodel.files import JSONObject
from results.figures.summary import LATENCY_PERCENTILES, distribution

__all__ = ["abandoned_line", "abandoned_summary"]


def abandoned_summary(requests: pd.DataFrame) -> JSONObject | None:
    """``requests`` (share of all requests, 0..1), ``count``, ``tokens_received`` (output
    tokens, summed), ``tokens_received_per_request`` and ``time_to_abandon_ms`` (done - sent)
    distributions; None when no request was abandoned."""
    if "abandoned" not in requests.columns or requests.empty:
        return None
    mask = requests["abandoned"].fillna(False).to_numpy(dtype=bool)
    count = int(np.count_nonzero(mask))
    if count == 0:
        return None
    cut = requests[mask]
    tokens = cut["output_tokens"].to_numpy(dtype=np.float64)
    held_ms = (cut["done_s"].to_numpy(dtype=np.float64) - cut["sent_s"].to_numpy(np.float64)) * 1e3
    return {
        "count": count,
        "share": count / len(requests),
        "tokens_received": int(tokens.sum()),
        "tokens_received_per_request": distribution(tokens, LATENCY_PERCENTILES),
        "time_to_abandon_ms": distribution(held_ms, LATENCY_PERCENTILES),
    }


def abandoned_line(section: JSONObject | None) -> str | None:
    """The terminal's note on abandoned requests, or None when there were none."""
    if not section:
        return None
    return (
        f"abandoned by the workload: {section['count']:,} requests ({section['share']:.0%}), "
        f"{section['tokens_received']:,} tokens received before the client closed the stream; "
        "kept out of the latency figures"
    )
