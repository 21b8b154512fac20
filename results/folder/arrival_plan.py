"""arrival_plan.parquet: a trace run's plan, one row per request, written before any is sent.

The columns are :class:`ArrivalRow`'s fields in order, their parquet types from its annotations
(results.folder.tables.record_schema), so the plan is declared once. Beside requests.parquet it
shows
how closely the sends followed the plan (``sent_s - planned_offset_s``; ``scheduled_s`` equals
``planned_offset_s``) and what each request was meant to be.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, fields
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from perfmodel.files import atomic_write
from results.folder.tables import record_schema, to_frame

__all__ = [
    "ARRIVAL_PLAN_COLUMNS",
    "ARRIVAL_PLAN_PARQUET",
    "ARRIVAL_PLAN_SCHEMA",
    "ArrivalRow",
    "read_arrival_plan",
    "write_arrival_plan",
]

ARRIVAL_PLAN_PARQUET = "arrival_plan.parquet"


@dataclass(frozen=True, slots=True)
class ArrivalRow:
    """One planned request of a trace replay.

    Attributes:
        request_id: the request's id (requests.parquet's ``request_id``).
        planned_offset_s: when it is due, s from the load's start, after the replay's window
            and rescaling (``speed`` or ``target_rate_rps``).
        input_length: the trace's prompt length, tokens.
        prompt_tokens: the built prompt's true length under the run's tokenizer, tokens (it
            can differ from ``input_length`` by a token where hash-id blocks meet).
        output_length: the trace's output length, tokens (sent as ``max_tokens``).
        num_hash_ids: how many hash ids (shared blocks) the trace gave the prompt; 0 for a
            trace without them.
    """

    request_id: str
    planned_offset_s: float
    input_length: int
    prompt_tokens: int
    output_length: int
    num_hash_ids: int


ARRIVAL_PLAN_COLUMNS: tuple[str, ...] = tuple(f.name for f in fields(ArrivalRow))
ARRIVAL_PLAN_SCHEMA: pa.Schema = record_schema(ArrivalRow, ARRIVAL_PLAN_COLUMNS)


def write_arrival_plan(folder: Path | str, rows: Iterable[ArrivalRow]) -> Path:
    """Write ``folder/arrival_plan.parquet`` (through a temporary name)."""
    rows = list(rows)
    columns = {name: [getattr(r, name) for r in rows] for name in ARRIVAL_PLAN_COLUMNS}
    table = pa.Table.from_pydict(columns, schema=ARRIVAL_PLAN_SCHEMA)
    path = Path(folder) / ARRIVAL_PLAN_PARQUET
    return atomic_write(path, lambda tmp: pq.write_table(table, tmp))


def read_arrival_plan(folder: Path | str) -> pd.DataFrame | None:
    """``folder/arrival_plan.parquet`` as a DataFrame, or None when the run has none."""
    path = Path(folder) / ARRIVAL_PLAN_PARQUET
    if not path.is_file():
        return None
    return to_frame(pq.read_table(path), ARRIVAL_PLAN_SCHEMA, ARRIVAL_PLAN_PARQUET)
