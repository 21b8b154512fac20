"""Agent sessions and multi-turn chats: summary.json's ``sessions``, per turn and per session.

Over the requests that belong to a session (requests.parquet's ``session_id`` and ``turn``),
the whole run (a session spans the measured window's edges, so none is cut by it):

* ``by_turn``: one row per turn index: requests, ok ones, TTFT of the ok ones (ms), the mean
  prompt tokens (the history grows turn by turn, so TTFT grows with it), and the prefix cache's
  hit rate, cached prompt tokens / prompt tokens over the requests whose server reported cached
  tokens (``usage.prompt_tokens_details.cached_tokens``; None where none did);
* ``per_session``: sessions, those whose every turn was ok, and the distributions of turns,
  duration (s: the first turn's scheduled time to the last turn's end, delays included),
  prompt tokens and output tokens per session.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from perfmodel.files import JSONObject
from results.figures.summary import LATENCY_PERCENTILES, distribution

__all__ = ["TURN_PERCENTILES", "session_durations", "session_summary"]

# The percentiles of a turn's TTFT: the middle and the tail.
TURN_PERCENTILES: tuple[float, ...] = (50.0, 99.0)


def _hit_rate(rows: pd.DataFrame) -> tuple[int | None, float | None]:
    """Cached prompt tokens of ``rows`` and their share of prompt tokens, over the rows that
    report cached tokens; (None, None) where none does."""
    if "cached_tokens" not in rows.columns:
        return None, None
    reported = rows[rows["cached_tokens"].notna()]
    if reported.empty:
        return None, None
    cached = int(reported["cached_tokens"].sum())
    prompt = float(reported["prompt_tokens"].sum())
    return cached, (cached / prompt if prompt > 0 else None)


def _by_turn(frame: pd.DataFrame) -> list[JSONObject]:
    rows = []
    for turn, group in frame.groupby("turn", sort=True):
        ok = group[group["status"] == "ok"]
        ttft = (ok["first_token_s"].to_numpy(np.float64) - ok["sent_s"].to_numpy(np.float64)) * 1e3
        cached, rate = _hit_rate(ok)
        rows.append({
            "turn": int(turn), "requests": len(group), "ok": len(ok),
            "ttft_ms": distribution(ttft, TURN_PERCENTILES),
            "prompt_tokens_mean": float(ok["prompt_tokens"].mean()) if len(ok) else None,
            "cached_tokens": cached, "cache_hit_rate": rate,
        })  # fmt: skip
    return rows


def _sessions(requests: pd.DataFrame) -> pd.DataFrame:
    """The requests that belong to a session (none when the columns are missing)."""
    if "session_id" not in requests.columns or "turn" not in requests.columns:
        return requests.iloc[:0]
    return requests[requests["session_id"].notna() & requests["turn"].notna()]


def _per_session_table(frame: pd.DataFrame) -> pd.DataFrame:
    """One row per session of ``frame``: turns, start and end (s), tokens, failed turns, and
    ``duration_s``, the first turn's scheduled time to the last turn's end."""
    ends = frame["done_s"].fillna(frame["sent_s"])
    grouped = frame.assign(end_s=ends).groupby("session_id", sort=False)
    per = grouped.agg(
        turns=("turn", "size"), start_s=("scheduled_s", "min"), end_s=("end_s", "max"),
        prompt_tokens=("prompt_tokens", "sum"), output_tokens=("output_tokens", "sum"),
        failed=("status", lambda s: int((s != "ok").sum())),
    )  # fmt: skip
    return per.assign(duration_s=per["end_s"] - per["start_s"])


def session_durations(requests: pd.DataFrame) -> np.ndarray:
    """Each session's duration, seconds (module docstring); empty for a run of no session."""
    frame = _sessions(requests)
    if frame.empty:
        return np.empty(0)
    return _per_session_table(frame)["duration_s"].to_numpy(np.float64)


def _per_session(frame: pd.DataFrame) -> JSONObject:
    per = _per_session_table(frame)
    duration = per["duration_s"].to_numpy(np.float64)
    return {
        "sessions": len(per),
        "complete": int((per["failed"] == 0).sum()),
        "turns": distribution(per["turns"].to_numpy(np.float64), LATENCY_PERCENTILES),
        "duration_s": distribution(duration, LATENCY_PERCENTILES),
        "prompt_tokens": distribution(
            per["prompt_tokens"].to_numpy(np.float64), LATENCY_PERCENTILES
        ),
        "output_tokens": distribution(
            per["output_tokens"].to_numpy(np.float64), LATENCY_PERCENTILES
        ),
    }


def session_summary(requests: pd.DataFrame) -> JSONObject | None:
    """summary.json's ``sessions`` (module docstring); None for a run of no session."""
    frame = _sessions(requests)
    if frame.empty:
        return None
    cached, rate = _hit_rate(frame[frame["status"] == "ok"])
    return {
        "by_turn": _by_turn(frame),
        "per_session": _per_session(frame),
        "cached_tokens": cached,
        "cache_hit_rate": rate,
    }
