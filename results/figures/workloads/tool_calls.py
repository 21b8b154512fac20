"""The tool calls a run's answers made: summary.json's ``tool_calls``.

Over the ok requests of the measured window (results.figures.summary.WINDOW_RULE), from
requests.parquet's ``num_tool_calls`` (results.folder.records): how many requests answered with
one or more tool calls and their share, the calls in all, calls per request over every request
and over those that called, and the TTFT of the calling requests beside the others' (a tool
call's first fragment is its first token: TTFT is the first generated token of any kind).

Present when the scenario offered tools (its ``[tools]``) or any request made a call (a
dataset's own tools); a run whose model never called a tool it was offered says so with 0.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from perfmodel.files import JSONObject, JSONView
from results.figures.attribution import measured_requests
from results.figures.summary import LATENCY_PERCENTILES, distribution

__all__ = ["tool_calls_line", "tool_calls_summary"]


def tool_calls_summary(
    requests: pd.DataFrame, window: JSONView, offered: bool
) -> JSONObject | None:
    """``requests`` (measured ok ones), ``requests_with_tool_calls``, ``share`` (0..1, None
    without requests), ``tool_calls`` (summed), ``calls_per_request`` (mean over every
    measured ok request), ``calls_per_calling_request`` and the TTFT distributions
    ``ttft_ms_calling`` and ``ttft_ms_not_calling``; None when the run offered no tools and
    none was called (module docstring)."""
    if "num_tool_calls" not in requests.columns:
        return None
    calls_all = requests["num_tool_calls"].to_numpy(dtype=np.int64, na_value=0)
    if not offered and not calls_all.any():
        return None
    ok = measured_requests(requests, window) & (requests["status"] == "ok").to_numpy()
    calls = calls_all[ok]
    calling = calls > 0
    ttft_ms = (
        (requests["first_token_s"] - requests["sent_s"]).to_numpy(dtype=np.float64, na_value=np.nan)
        * 1e3
    )[ok]
    n = int(ok.sum())
    return {
        "requests": n,
        "requests_with_tool_calls": int(calling.sum()),
        "share": float(calling.sum()) / n if n else None,
        "tool_calls": int(calls.sum()),
        "calls_per_request": float(calls.mean()) if n else None,
        "calls_per_calling_request": distribution(
            calls[calling].astype(np.float64), LATENCY_PERCENTILES
        ),
        "ttft_ms_calling": distribution(ttft_ms[calling], LATENCY_PERCENTILES),
        "ttft_ms_not_calling": distribution(ttft_ms[~calling], LATENCY_PERCENTILES),
    }


def tool_calls_line(section: JSONView | None) -> str | None:
    """The terminal's line on tool calls, or None for a run without the section."""
    if not section:
        return None
    share = section.get("share")
    per = section.get("calls_per_calling_request") or {}
    line = (
        f"tool calls: {section['requests_with_tool_calls']:,} of {section['requests']:,} "
        f"requests ({0.0 if share is None else share:.0%}) answered with tool calls, "
        f"{section['tool_calls']:,} calls in all"
    )
    if per.get("count"):
        line += f", {per['mean']:.2f} per calling request (max {per['max']:g})"
    return line
