"""The client table (client.parquet) and the verdict on it: was the client the bottleneck?

client.parquet holds the load generator's self-check series (loadgen.drivers.selfcheck) in long
form:
``t_s`` (run seconds), ``worker`` (process index), ``name`` (``schedule_lag_s``, ``loop_lag_s``,
``cpu_s``), ``value``. :func:`client_health` turns it into summary.json's ``"client"`` section,
from the table alone, so the verdict is recomputed identically from the run folder:

    * schedule lag (ms): started - due, per request (how late the client got to send);
    * event-loop lag (ms): how late a 10 ms ticker woke (how late every timestamp may be);
    * CPU: seconds used, and the busiest worker's share of one core over the load;
      CPU seconds per 1,000 output tokens.

    * read delay (ms, :func:`read_delay`): per chunk timed by the kernel's receive stamp
      (requests.parquet ``stamps`` "kernel"), tokens.parquet's ``read_s - t_s``: how long after
      its segment arrived the client read it; p50/p99/max and the share read over 1 ms late.

The run is **client-bound** when any of these passes its threshold (defaults below, written
into the summary): schedule lag p99 > 20 ms, a worker busy > 90 % of a core, and for the
timestamps: read delay p99 > 20 ms where every chunk carries a kernel stamp (it measures what
loop lag only bounds; a chunk read later than its connection's next segment arrived shares that
segment's stamp), else loop lag p99 > 20 ms. Then its latencies are the client's as much as the
server's: shard the users over more processes (``--workers``), use fewer users, or a faster
machine for the client.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from perfmodel.files import JSONObject, JSONView, atomic_write, json_safe
from results.figures.summary import LATENCY_PERCENTILES, distribution
from results.folder.client_samples import CLIENT_COLUMNS, ClientSamples
from results.folder.tables import plain_field
from results.folder.token_source import TokenSource, token_source

__all__ = [
    "CLIENT_PARQUET",
    "CLIENT_SCHEMA",
    "DEFAULT_THRESHOLDS",
    "client_health",
    "client_warning",
    "read_client_table",
    "read_delay",
    "write_client_table",
]

CLIENT_PARQUET = "client.parquet"
# One column per client-table column (results.folder.client_samples), of its type.
CLIENT_SCHEMA = pa.schema([plain_field(name, kind) for name, kind in CLIENT_COLUMNS.items()])
DEFAULT_THRESHOLDS: dict[str, float] = {
    "schedule_lag_p99_ms": 20.0,
    "loop_lag_p99_ms": 20.0,
    "cpu_utilization": 0.9,
    "read_delay_p99_ms": 20.0,
}
LATE_READ_MS = 1.0  # a chunk read later than this after it arrived counts as read late


def write_client_table(folder: Path | str, samples: ClientSamples) -> Path:
    """Write ``samples`` as ``folder/client.parquet`` (through a temporary name)."""
    path = Path(folder) / CLIENT_PARQUET
    table = pa.Table.from_pydict(samples.columns(), schema=CLIENT_SCHEMA)
    return atomic_write(path, lambda tmp: pq.write_table(table, tmp))


def read_client_table(folder: Path | str) -> pd.DataFrame | None:
    """``folder/client.parquet`` as a DataFrame, or None when the run has none."""
    path = Path(folder) / CLIENT_PARQUET
    if not path.is_file():
        return None
    return pq.read_table(path, schema=CLIENT_SCHEMA).to_pandas()


def _cpu(frame: pd.DataFrame, output_tokens: int | None) -> JSONObject:
    per_worker: JSONObject = {}
    total_s = 0.0
    for worker, rows in frame[frame["name"] == "cpu_s"].groupby("worker", sort=True):
        rows = rows.sort_values("t_s", kind="mergesort")
        used_s = float(rows["value"].iloc[-1] - rows["value"].iloc[0])
        span_s = float(rows["t_s"].iloc[-1] - rows["t_s"].iloc[0])
        total_s += used_s
        per_worker[str(worker)] = {
            "cpu_s": used_s,
            "wall_s": span_s,
            "utilization": used_s / span_s if span_s > 0 else None,
        }
    busiest = [w["utilization"] for w in per_worker.values() if w["utilization"] is not None]
    return {
        "cpu_s": total_s if per_worker else None,
        "utilization_max": max(busiest) if busiest else None,
        "cpu_s_per_1k_output_tokens": (
            total_s / output_tokens * 1000.0 if per_worker and output_tokens else None
        ),
        "per_worker": per_worker,
    }


def _unstamped() -> JSONObject:
    return {"available": False, "reason": "no chunk had a kernel receive stamp"}


def read_delay(
    requests_df: pd.DataFrame | None,
    tokens: pd.DataFrame | TokenSource | None,
    window: JSONView | None = None,
) -> JSONObject:
    """The client's own read delay (module docstring): over the chunks of kernel-stamped
    requests whose ``t_s`` is in ``window`` (``start_s``/``end_s``, when given), the
    distribution of ``read_s - t_s`` in ms, ``late_share`` (over :data:`LATE_READ_MS`) and
    ``kernel_share``, the share of all those chunks that had kernel stamps. ``available`` is
    False (with ``reason``) when no chunk had one: then ``t_s`` is the read time itself.
    tokens.parquet is read a batch at a time: only the kernel-stamped delays are held."""
    if tokens is None or requests_df is None or "stamps" not in requests_df:
        return {"available": False, "reason": "no kernel receive stamps recorded"}
    source = token_source(tokens)
    if "read_s" not in source.columns():
        return _unstamped()
    kernel_ids = pa.array(
        requests_df.loc[requests_df["stamps"] == "kernel", "request_id"].astype(str).tolist(),
        type=pa.string(),
    )
    if len(kernel_ids) == 0:  # no request was stamped: no chunk was, and the pass is moot
        return _unstamped()
    bounded = bool(window) and window.get("start_s") is not None and window.get("end_s") is not None
    parts: list[np.ndarray] = []
    chunks = 0
    for batch in source.batches(["request_id", "t_s", "read_s"]):
        t = batch.column(1).to_numpy(zero_copy_only=False).astype(np.float64)
        inside = (
            (t >= window["start_s"]) & (t <= window["end_s"]) if bounded else np.ones_like(t, bool)
        )
        chunks += int(inside.sum())
        stamped = inside & pc.is_in(batch.column(0), value_set=kernel_ids).to_numpy(
            zero_copy_only=False
        )
        read = batch.column(2).to_numpy(zero_copy_only=False).astype(np.float64)
        parts.append((read[stamped] - t[stamped]) * 1e3)
    delay_ms = np.sort(np.concatenate(parts)) if parts else np.empty(0)
    if not delay_ms.size:
        return _unstamped()
    return {
        "available": True,
        "ms": distribution(delay_ms, LATENCY_PERCENTILES),
        "late_share": float(np.mean(delay_ms > LATE_READ_MS)),
        "late_ms": LATE_READ_MS,
        "kernel_share": delay_ms.size / chunks,
    }


def client_health(
    client_df: pd.DataFrame | None,
    output_tokens: int | None = None,
    window: JSONView | None = None,
    thresholds: Mapping[str, float] | None = None,
    delay: JSONView | None = None,
) -> JSONObject:
    """summary.json's ``"client"`` section (module docstring).

    ``output_tokens`` (the run's, for CPU per 1,000 tokens); ``window`` (the summary's, with
    ``start_s``/``end_s``) limits the lag figures to the measured window; ``thresholds``
    overrides :data:`DEFAULT_THRESHOLDS` by key; ``delay``: :func:`read_delay`'s figure, kept
    as ``read_delay`` and judged. Without a table: ``recorded`` is False and ``client_bound``
    None (unknown).
    """
    limits = {**DEFAULT_THRESHOLDS, **(thresholds or {})}
    if client_df is None or client_df.empty:
        return {"recorded": False, "client_bound": None, "reasons": [], "thresholds": limits}
    delay = dict(delay or {"available": False, "reason": "not computed"})
    frame = client_df
    start = window.get("start_s") if window else None
    end = window.get("end_s") if window else None
    lags = frame[frame["name"] != "cpu_s"]
    if start is not None and end is not None:
        lags = lags[(lags["t_s"] >= start) & (lags["t_s"] <= end)]

    def lag_ms(name: str) -> JSONObject:
        values = lags.loc[lags["name"] == name, "value"].to_numpy(dtype=np.float64)
        return distribution(np.sort(values) * 1000.0, LATENCY_PERCENTILES)

    schedule, loop = lag_ms("schedule_lag_s"), lag_ms("loop_lag_s")
    cpu = _cpu(frame, output_tokens)
    reasons = []
    if (schedule["p99"] or 0.0) > limits["schedule_lag_p99_ms"]:
        reasons.append(
            f"requests went out late: schedule lag p99 {schedule['p99']:.1f} ms > "
            f"{limits['schedule_lag_p99_ms']:g} ms"
        )
    reasons.extend(_timestamp_reasons(loop, delay, limits))
    if (cpu["utilization_max"] or 0.0) > limits["cpu_utilization"]:
        reasons.append(
            f"a client process used {cpu['utilization_max']:.0%} of a core > "
            f"{limits['cpu_utilization']:.0%}"
        )
    return json_safe(
        {
            "recorded": True,
            "workers": int(frame["worker"].nunique()),
            "schedule_lag_ms": schedule,
            "loop_lag_ms": loop,
            "read_delay": delay,
            "cpu": cpu,
            "thresholds": limits,
            "client_bound": bool(reasons),
            "reasons": reasons,
        }
    )


def _timestamp_reasons(loop: JSONView, delay: JSONView, limits: Mapping[str, float]) -> list[str]:
    """Whether the chunks' times are the client's: by the measured read delay where every
    chunk had a kernel stamp, else by the loop lag that bounds a user-space stamp's delay."""
    if delay.get("available") and delay.get("kernel_share") == 1.0:
        p99 = delay["ms"]["p99"] or 0.0
        if p99 <= limits["read_delay_p99_ms"]:
            return []
        return [
            f"the client read chunks late: read delay p99 {p99:.1f} ms > "
            f"{limits['read_delay_p99_ms']:g} ms (chunks that queued on a connection share the "
            "last one's kernel stamp)"
        ]
    if (loop["p99"] or 0.0) > limits["loop_lag_p99_ms"]:
        return [
            f"the event loop was busy: loop lag p99 {loop['p99']:.1f} ms > "
            f"{limits['loop_lag_p99_ms']:g} ms (timestamps may be that late)"
        ]
    return []


def client_warning(summary: JSONView) -> str | None:
    """A one-paragraph warning when summary.json says the client was the bottleneck."""
    client = summary.get("client") or {}
    if not client.get("client_bound"):
        return None
    return (
        "the load generator was a bottleneck, so latencies include its own delays: "
        + "; ".join(client.get("reasons") or [])
        + ". Shard the users over more processes (--workers N), use fewer users, or run the "
        "client on another machine."
    )
