"""The figures of an ablation table, read from one run folder.

Latency and throughput come from summary.json; KV memory from steps.parquet (the engine's own
per-step records: blocks held are the reservation, token slots holding K/V are the use); prefix
hit rate and speculative acceptance from the engine's cumulative counters before and after the
load (run.json); weight bytes from the engine's description.
"""

from __future__ import annotations

from typing import Any

from results.folder.run_folder import RunData

# (key, title, unit)
ABLATION_COLUMNS: tuple[tuple[str, str, str], ...] = (
    ("output_tok_s", "out tok/s", "tok/s"),
    ("tps_p50", "per-user TPS p50", "tok/s"),
    ("ttft_p50_ms", "TTFT p50", "ms"),
    ("ttft_p99_ms", "TTFT p99", "ms"),
    ("kv_reserved_peak_bytes", "KV reserved (peak)", "bytes"),
    ("kv_used_peak_bytes", "KV used (peak)", "bytes"),
    ("kv_waste", "KV waste", "fraction"),
    ("max_running", "most running at once", "requests"),
    ("prefix_hit_rate", "prefix hit rate", "fraction"),
    ("acceptance_rate", "spec acceptance", "fraction"),
    ("weight_bytes", "weight bytes", "bytes"),
)


def _get(d: Any, *keys: str) -> Any:
    for k in keys:
        if not isinstance(d, dict):
            return None
        d = d.get(k)
    return d


def _delta_rate(start: dict | None, end: dict | None, num: str, den: str) -> float | None:
    if not isinstance(start, dict) or not isinstance(end, dict):
        return None
    d_den = end.get(den, 0) - start.get(den, 0)
    return (end.get(num, 0) - start.get(num, 0)) / d_den if d_den else None


def ablation_row(run: RunData) -> dict[str, Any]:
    """One row of ABLATION_COLUMNS keys; None where the run did not record the figure."""
    s = run.summary or {}
    engine = _get(run.run_json, "engine") or {}
    desc = engine.get("description") or {}
    start, end = desc.get("stats"), engine.get("stats_end")
    row: dict[str, Any] = {
        "output_tok_s": _get(s, "throughput", "output_tok_s"),
        "tps_p50": _get(s, "per_user_tps", "p50"),
        "ttft_p50_ms": _get(s, "ttft_ms", "p50"),
        "ttft_p99_ms": _get(s, "ttft_ms", "p99"),
        "kv_reserved_peak_bytes": None,
        "kv_used_peak_bytes": None,
        "kv_waste": None,
        "max_running": None,
        "prefix_hit_rate": _delta_rate(start, end, "prefix_cache_hits", "prefix_cache_queries"),
        "acceptance_rate": _delta_rate(
            start, end, "spec_num_accepted_tokens", "spec_num_draft_tokens"
        ),
        "weight_bytes": desc.get("weight_bytes"),
    }
    steps = run.steps
    per_token = desc.get("kv_bytes_per_token")
    block_size = desc.get("block_size")
    if steps is not None and not steps.empty and per_token and block_size:
        reserved = steps["kv_blocks_used"] * block_size
        used = steps["kv_slots_used"]
        row["kv_reserved_peak_bytes"] = int(reserved.max() * per_token)
        row["kv_used_peak_bytes"] = int(used.max() * per_token)
        total_reserved = float(reserved.sum())
        row["kv_waste"] = 1.0 - float(used.sum()) / total_reserved if total_reserved else None
        row["max_running"] = int(steps["num_running"].max())
    return row
