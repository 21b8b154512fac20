"""The run folder's parquet tables: their Arrow schemas and the one Arrow -> pandas conversion.

requests.parquet and tokens.parquet are declared by the dataclasses of results.folder.records (one
row
per RequestRecord, one per ChunkRecord): their columns are the dataclasses' fields, in order, and
each column's Arrow type and nullability follow the field's annotation (str -> string, int ->
int64, float -> float64, a Literal of strings -> string; ``X | None`` is nullable, anything else
must be set). samples.parquet has no record class; its schema is declared here.

The DataFrames returned by the writers and by results.folder.run_folder.load_run both come from
:func:`to_frame`, so a summary computed in the run equals one recomputed from the folder.
"""

from __future__ import annotations

import types
from collections.abc import Iterable
from typing import Any, Literal, Union, get_args, get_origin, get_type_hints

import pandas as pd
import pyarrow as pa

from results.folder.engine_steps import STEPS_SCHEMA
from results.folder.records import (
    REQUEST_BACKFILLS,
    REQUEST_COLUMNS,
    TOKEN_BACKFILLS,
    TOKEN_COLUMNS,
    Backfill,
    ChunkRecord,
    RequestRecord,
)
from results.folder.table_columns import (
    SAMPLE_COLUMNS,
    SAMPLE_PART_SAMPLER,
    STEP_ADDED_COLUMNS,
)

__all__ = [
    "REQUESTS_SCHEMA",
    "SAMPLES_SCHEMA",
    "SAMPLE_PART_SCHEMA",
    "TOKENS_SCHEMA",
    "TableError",
    "backfill_frame",
    "plain_field",
    "record_schema",
    "requests_frame",
    "requests_table",
    "to_frame",
    "tokens_frame",
    "tokens_table",
]

_ARROW_TYPES: dict[type, pa.DataType] = {
    str: pa.string(),
    int: pa.int64(),
    float: pa.float64(),
    bool: pa.bool_(),
}


class TableError(ValueError):
    """A table read back that lacks a column or whose columns do not fit their schema."""


def _arrow_field(name: str, annotation: Any, record: type) -> pa.Field:
    options = get_args(annotation) if get_origin(annotation) in (Union, types.UnionType) else ()
    nullable = type(None) in options
    if options:
        rest = [arg for arg in options if arg is not type(None)]
        annotation = rest[0] if len(rest) == 1 else annotation
    if get_origin(annotation) is Literal:
        annotation = type(get_args(annotation)[0])
    if annotation not in _ARROW_TYPES:
        raise TypeError(f"{record.__name__}.{name}: {annotation!r} has no parquet column type")
    return pa.field(name, _ARROW_TYPES[annotation], nullable=nullable)


def plain_field(name: str, kind: type) -> pa.Field:
    """A column that is always set, of the Python type ``kind`` (str, int, float or bool)."""
    return pa.field(name, _ARROW_TYPES[kind], nullable=False)


def record_schema(record: type, columns: Iterable[str]) -> pa.Schema:
    """The Arrow schema of ``columns`` of the dataclass ``record``, from its annotations."""
    hints = get_type_hints(record)
    return pa.schema([_arrow_field(name, hints[name], record) for name in columns])


# Times are seconds from the run's start on its monotonic clock; null where an event never
# happened (no first token, no HTTP status). See RequestRecord and ChunkRecord for each column.
REQUESTS_SCHEMA = record_schema(RequestRecord, REQUEST_COLUMNS)
TOKENS_SCHEMA = record_schema(ChunkRecord, TOKEN_COLUMNS)

# The probes' time series, long format (probes/: nvml, gpm, cpu, engine). t_s is on the run's
# clock and may be negative: the probes start before the load. labels is a JSON object as text
# ('' when none), e.g. {"gpu":"0"} or {"metric":"vllm:kv_cache_usage_perc",...}.
# The columns are the probes' readings' (results.folder.table_columns.SAMPLE_COLUMNS) with t_s
# in place of t_ns.
SAMPLES_SCHEMA = pa.schema(
    [
        pa.field("t_s", pa.float64(), nullable=False),
        *(plain_field(name, kind) for name, kind in SAMPLE_COLUMNS.items() if name != "t_ns"),
    ]
)

# A part of samples.parts, as the probes write it during the run: the readings on their own
# clock (t_ns, perf_counter_ns) and the index of the sampler that took each
# (results.folder.table_columns.SAMPLE_PART_SAMPLER); results.folder.parts.sample_parts seals the
# parts into samples.parquet.
SAMPLE_PART_SCHEMA = pa.schema(
    [
        *(plain_field(name, kind) for name, kind in SAMPLE_COLUMNS.items()),
        pa.field(SAMPLE_PART_SAMPLER, pa.int32(), nullable=False),
    ]
)


# The schemas whose later columns an older table may lack (results.folder.records.Backfill).
_BACKFILLS: tuple[tuple[pa.Schema, dict[str, Backfill]], ...] = (
    (REQUESTS_SCHEMA, REQUEST_BACKFILLS),
    (TOKENS_SCHEMA, TOKEN_BACKFILLS),
    (STEPS_SCHEMA, {name: Backfill(None) for name in STEP_ADDED_COLUMNS}),
)


def _backfilled(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """``table`` with the columns added after it was written, filled by their Backfill rule."""
    rules = next((rules for known, rules in _BACKFILLS if schema.equals(known)), {})
    for name, rule in rules.items():
        if name in table.column_names:
            continue
        kind = schema.field(name).type
        if rule.copy_of is not None and rule.copy_of in table.column_names:
            column: Any = table.column(rule.copy_of).cast(kind)
        elif rule.value is None:
            column = pa.nulls(table.num_rows, kind)
        else:
            column = pa.array([rule.value] * table.num_rows, kind)
        table = table.append_column(name, column)
    return table


def backfill_frame(frame: pd.DataFrame, rules: dict[str, Backfill]) -> pd.DataFrame:
    """``frame`` with each column of ``rules`` it lacks filled by its rule (a copy when any is
    added; ``frame`` itself when none is missing). For frames from other tools or older code."""
    missing = [name for name in rules if name not in frame.columns]
    if not missing:
        return frame
    frame = frame.copy()
    for name in missing:
        rule = rules[name]
        if rule.copy_of is not None and rule.copy_of in frame.columns:
            frame[name] = frame[rule.copy_of]
        else:
            frame[name] = rule.value
    return frame


def to_frame(table: pa.Table, schema: pa.Schema, source: str) -> pd.DataFrame:
    """Arrow -> pandas with fixed dtypes, used for both freshly written and loaded tables.

    A requests or tokens table written before a column existed gets that column by its
    results.folder.records.Backfill rule. Raises TableError naming ``source`` when any other column
    is missing or a column does not fit ``schema``.
    """
    table = _backfilled(table, schema)
    missing = [name for name in schema.names if name not in table.column_names]
    if missing:
        raise TableError(f"{source}: missing columns {', '.join(missing)}")
    try:
        table = table.select(schema.names).cast(schema)
    except (pa.ArrowInvalid, pa.ArrowTypeError, ValueError) as exc:
        raise TableError(f"{source}: columns do not fit the run folder schema: {exc}") from exc
    frame = table.to_pandas()
    for field in schema:
        # Nullable integers would become float64 only when a null is present; a fixed Int64
        # keeps the dtype independent of the data.
        if pa.types.is_integer(field.type) and field.nullable:
            frame[field.name] = frame[field.name].astype("Int64")
    return frame


def _table_from_rows(
    rows: Iterable[Any],
    schema: pa.Schema,
    what: str,
    backfills: dict[str, Backfill],
    chunks: bool = False,
) -> pa.Table:
    columns: dict[str, list[Any]] = {name: [] for name in schema.names}
    items = (chunk for record in rows for chunk in record.chunks) if chunks else rows
    for position, item in enumerate(items):
        for name, values in columns.items():
            try:
                values.append(getattr(item, name))
            except AttributeError:
                rule = backfills.get(name)
                if rule is not None:
                    # An object written to the older contract: read as that contract's tables.
                    values.append(getattr(item, rule.copy_of) if rule.copy_of else rule.value)
                    continue
                raise TypeError(
                    f"{what} #{position} ({type(item).__name__}) has no attribute {name!r}"
                ) from None
    # Arrow accepts nulls in a non-nullable field here; reject them so no None slips into a
    # column that readers rely on (a time, a count, a status).
    for field in schema:
        if not field.nullable and None in columns[field.name]:
            position = columns[field.name].index(None)
            raise TypeError(f"{what} #{position}: {field.name} is None; it must be set")
    try:
        return pa.Table.from_pydict(columns, schema=schema)
    except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
        raise TypeError(f"{what}s do not fit the run folder schema: {exc}") from exc


def requests_table(records: Iterable[Any]) -> pa.Table:
    """requests.parquet's table from RequestRecord-like objects (any with its attributes)."""
    return _table_from_rows(records, REQUESTS_SCHEMA, "request record", REQUEST_BACKFILLS)


def tokens_table(records: Iterable[Any]) -> pa.Table:
    """tokens.parquet's table: every record's ``chunks``, in record order then chunk order."""
    return _table_from_rows(records, TOKENS_SCHEMA, "chunk record", TOKEN_BACKFILLS, chunks=True)


def requests_frame(records: Iterable[Any]) -> pd.DataFrame:
    """requests.parquet's rows as a DataFrame, from RequestRecord-like objects, in their order."""
    return to_frame(requests_table(records), REQUESTS_SCHEMA, "requests.parquet")


def tokens_frame(records: Iterable[Any]) -> pd.DataFrame:
    """tokens.parquet's rows: every record's ``chunks`` (objects with request_id, index, t_s,
    n_tokens), in record order then chunk order."""
    return to_frame(tokens_table(records), TOKENS_SCHEMA, "tokens.parquet")
