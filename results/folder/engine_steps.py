"""steps.parquet: the engine's own per-step records, placed on the run's clock.

Engines that expose /debug/steps (the reference engine) report each step's start and end in
perf_counter_ns of their host. On Linux that is CLOCK_MONOTONIC, one clock for every process of
the machine, so for an engine on the load generator's host subtracting the run's t0_ns gives
seconds on the same axis as requests.parquet. For a remote engine the offset is unknown, and
the steps are not placed on the run's clock (the caller decides; see ``same_host``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

import httpx
import pandas as pd
import pyarrow as pa

from results.folder.table_columns import (
    STEP_ADDED_COLUMNS,
    STEP_COUNT_COLUMNS,
    STEP_RECORD_COLUMNS,
    STEP_TIME_COLUMNS,
)

# The engine's route of its per-step records (engine.serving.routes.admin_routes), and the clock
# its answer says its times are on.
STEPS_PATH = "/debug/steps"
STEPS_CLOCK = "perf_counter_ns"
# The host names of a base URL that reach this machine.
_LOCAL_HOSTS = ("127.0.0.1", "localhost", "::1")


def same_host(base_url: str) -> bool:
    """Whether the engine at ``base_url`` runs on this host: its steps share the run's clock,
    and its CPU and GPUs (its roofs, its processes) are this machine's."""
    return urlsplit(base_url).hostname in _LOCAL_HOSTS


def _seconds(name: str) -> str:
    """steps.parquet's name of a record's time column: ``start_ns`` -> ``start_s``."""
    return name.removesuffix("_ns") + "_s"


STEPS_SCHEMA = pa.schema(
    [
        pa.field("step", pa.int64(), nullable=False),
        # The record's times (STEP_TIME_COLUMNS), in seconds: start_ns -> start_s, ...
        *(pa.field(_seconds(name), pa.float64(), nullable=False) for name in STEP_TIME_COLUMNS),
        *(
            pa.field(name, pa.int64(), nullable=name in STEP_ADDED_COLUMNS)
            for name in STEP_COUNT_COLUMNS
        ),
    ]
)


def fetch_json(
    base_url: str, path: str, timeout_s: float = 10.0, headers: Mapping[str, str] | None = None
) -> Any | None:
    """GET ``base_url + path`` as JSON, with ``headers`` (an endpoint's key); None when the
    engine does not offer it (any failure)."""
    try:
        r = httpx.get(base_url.rstrip("/") + path, timeout=timeout_s, headers=headers)
    except httpx.HTTPError:
        return None
    if r.status_code != 200:
        return None
    try:
        return r.json()
    except ValueError:
        return None


def steps_frame(columns: dict[str, list[int]], t0_ns: int) -> pd.DataFrame:
    """Steps that started at or after ``t0_ns``, times in seconds from the run's start."""
    steps = len(columns.get("step", []))
    raw = pd.DataFrame(
        {
            # A count an older engine does not record reads as null (STEP_ADDED_COLUMNS).
            name: pd.Series([None] * steps, dtype="Int64")
            if name in STEP_ADDED_COLUMNS and name not in columns
            else pd.Series(columns.get(name, []), dtype="int64")
            for name in STEP_RECORD_COLUMNS
        }
    )
    raw = raw[raw["start_ns"] >= t0_ns].reset_index(drop=True)
    out = pd.DataFrame(
        {
            "step": raw["step"],
            "start_s": (raw["start_ns"] - t0_ns) / 1e9,
            "end_s": (raw["end_ns"] - t0_ns) / 1e9,
            "forward_s": raw["forward_ns"] / 1e9,
        }
    )
    for name in STEP_COUNT_COLUMNS:
        out[name] = raw[name]
    frame = pa.Table.from_pandas(out, schema=STEPS_SCHEMA, preserve_index=False).to_pandas()
    # A nullable count reads back from steps.parquet as pandas' nullable Int64, nulls or not:
    # the same here, so a followed table and one read of the engine compare equal.
    return frame.astype({name: "Int64" for name in STEP_ADDED_COLUMNS})


def fetch_steps(
    base_url: str, t0_ns: int, headers: Mapping[str, str] | None = None
) -> pd.DataFrame | None:
    """The engine's steps since ``t0_ns``, as far back as it keeps them, in one read; None if it
    does not expose /debug/steps. (`bench run` follows them during the load instead,
    bench.run.step_follower, whose steps.parquet is this table.)"""
    data = fetch_json(base_url, STEPS_PATH, headers=headers)
    if not isinstance(data, dict) or data.get("clock") != STEPS_CLOCK:
        return None
    return steps_frame(data.get("columns", {}), t0_ns)


def decode_overhead_share(steps: pd.DataFrame) -> float | None:
    """The share of decode steps' wall time spent outside the executor (model forward, logits,
    sampling): scheduling, the update, outputs, telemetry, and the engine loop between steps
    (for an engine core in its own process, its pipe). A step's wall time runs to the next
    step's start while requests remain (num_running > 0), else to its own end. None without
    decode-only steps."""
    if steps.empty:
        return None
    nxt = steps["start_s"].shift(-1)
    busy = (steps["num_running"] > 0) & nxt.notna()
    wall = (nxt.where(busy, steps["end_s"]) - steps["start_s"]).clip(lower=0.0)
    decode = (steps["num_prefill_tokens"] == 0) & (steps["num_decode_tokens"] > 0)
    total = float(wall[decode].sum())
    if not decode.any() or total <= 0:
        return None
    return 1.0 - float(steps.loc[decode, "forward_s"].sum()) / total
