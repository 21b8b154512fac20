"""A pooling run's figures: embeddings and rerank, which answer once and generate nothing.

A pooling request (requests.parquet's ``inputs`` set: the texts it embedded, or the documents
it ranked) has no first token, no chunk and no output token, so the figures that time tokens
(TTFT, ITL, TPOT, per-user TPS) do not exist for it: summary.json leaves them out rather than
showing zeros or empty distributions, and every reader shows only what is there. Its figures,
over the ok requests of the measured window, per second of the window:

    * ``latency_ms``: the distribution of E2EL (done - sent), also in ``e2el_ms`` as for every
      run, and ``e2el_from_scheduled_ms`` and ``queueing_delay_ms`` as usual;
    * ``requests_per_s``, ``inputs_per_s`` (texts embedded, documents ranked) and
      ``input_tok_s`` (the server's ``usage`` count of input tokens, else the workload's);
    * ``inputs`` and ``input_tokens`` in the window, and ``inputs_per_request``.

A run is a pooling run when any of its requests carries ``inputs`` (one API per run).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from perfmodel.files import JSONObject

__all__ = ["TOKEN_FIGURES", "is_pooling_run", "pooling_lines", "pooling_section"]

# The figures a pooling run has no value for: left out of its summary.json.
TOKEN_FIGURES: tuple[str, ...] = (
    "ttft_ms",
    "itl_ms",
    "tpot_ms",
    "ttft_from_scheduled_ms",
    "per_user_tps",
)


def is_pooling_run(requests: pd.DataFrame) -> bool:
    """Whether ``requests`` (requests.parquet, backfilled) are a pooling run's (module doc)."""
    return "inputs" in requests.columns and bool(requests["inputs"].notna().any())


def pooling_section(
    req: pd.DataFrame, ok: np.ndarray, duration_s: float | None, latency: JSONObject
) -> JSONObject:
    """summary.json's ``pooling`` (module docstring): ``ok`` selects the ok requests of the
    window among ``req``'s rows, ``duration_s`` is the window's, ``latency`` the E2EL
    distribution (ms) already computed."""
    inputs = req["inputs"].to_numpy(dtype=np.float64, na_value=np.nan)[ok]
    tokens = req["prompt_tokens"].to_numpy(dtype=np.int64)[ok]
    n_ok, n_inputs, n_tokens = int(ok.sum()), int(np.nansum(inputs)), int(tokens.sum())

    def rate(amount: float) -> float | None:
        return amount / duration_s if duration_s else None

    return {
        "requests": n_ok,
        "inputs": n_inputs,
        "input_tokens": n_tokens,
        "inputs_per_request": n_inputs / n_ok if n_ok else None,
        "requests_per_s": rate(n_ok),
        "inputs_per_s": rate(n_inputs),
        "input_tok_s": rate(n_tokens),
        "latency_ms": latency,
    }


def pooling_lines(pooling: Any) -> list[str]:
    """The sentence every reader shows for summary.json's ``pooling`` section (none without)."""
    if not isinstance(pooling, dict):
        return []

    def num(value: Any) -> str:
        return "-" if value is None else f"{value:,.2f}"

    return [
        f"A pooling run: {num(pooling.get('requests_per_s'))} requests/s, "
        f"{num(pooling.get('inputs_per_s'))} inputs/s, {num(pooling.get('input_tok_s'))} "
        "input tokens/s; nothing is generated, so there is no TTFT, ITL, TPOT or per-user TPS."
    ]
