"""The run folder: the one contract between a run and everything that reads it.

``runs/<UTC %Y%m%dT%H%M%SZ>-<scenario>-<engine>/`` holds ``run.json``, ``requests.parquet``,
``tokens.parquet`` and ``summary.json`` (other writers add their own files beside them). Every
file is written to a temporary name and renamed, so a crash never leaves a half-written file.

The parquet files have fixed Arrow schemas (:data:`REQUESTS_SCHEMA`, :data:`TOKENS_SCHEMA`), and
the DataFrames returned by the writers and by :func:`load_run` both come from the same Arrow ->
pandas conversion, so a summary computed in the run equals one recomputed from the folder.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from results.engine_steps import STEPS_SCHEMA
from results.summary import json_safe

__all__ = [
    "REQUESTS_SCHEMA",
    "SAMPLES_SCHEMA",
    "TOKENS_SCHEMA",
    "RunData",
    "RunFolder",
    "RunFolderError",
    "load_run",
    "requests_frame",
    "tokens_frame",
]

RUN_JSON = "run.json"
REQUESTS_PARQUET = "requests.parquet"
TOKENS_PARQUET = "tokens.parquet"
SUMMARY_JSON = "summary.json"
STEPS_PARQUET = "steps.parquet"
SAMPLES_PARQUET = "samples.parquet"

# Times are seconds from the run's start on its monotonic clock; None (null) where an event never
# happened (no first token, no HTTP status). output_tokens_source is "usage", "tokenizer" or
# "chunks" (no usage and no tokenizer: one token per content chunk).
REQUESTS_SCHEMA = pa.schema(
    [
        pa.field("request_id", pa.string(), nullable=False),
        pa.field("user_id", pa.int64(), nullable=False),
        pa.field("scheduled_s", pa.float64(), nullable=False),
        pa.field("sent_s", pa.float64(), nullable=False),
        pa.field("first_token_s", pa.float64()),
        pa.field("done_s", pa.float64()),
        pa.field("prompt_tokens", pa.int64(), nullable=False),
        pa.field("output_tokens", pa.int64(), nullable=False),
        pa.field("status", pa.string(), nullable=False),
        pa.field("error", pa.string()),
        pa.field("http_status", pa.int64()),
        pa.field("output_tokens_source", pa.string()),
    ]
)
# One row per received content chunk; index counts a request's chunks from 0.
TOKENS_SCHEMA = pa.schema(
    [
        pa.field("request_id", pa.string(), nullable=False),
        pa.field("index", pa.int64(), nullable=False),
        pa.field("t_s", pa.float64(), nullable=False),
        pa.field("n_tokens", pa.int64(), nullable=False),
    ]
)

# The probes' time series, long format (probes/: nvml, gpm, cpu, engine). t_s is on the run's
# clock and may be negative: the probes start before the load. labels is a JSON object as text
# ('' when none), e.g. {"gpu":"0"} or {"metric":"vllm:kv_cache_usage_perc",...}.
SAMPLES_SCHEMA = pa.schema(
    [
        pa.field("t_s", pa.float64(), nullable=False),
        pa.field("source", pa.string(), nullable=False),
        pa.field("name", pa.string(), nullable=False),
        pa.field("value", pa.float64(), nullable=False),
        pa.field("labels", pa.string(), nullable=False),
    ]
)


class RunFolderError(ValueError):
    """A path that is not a (complete, readable) run folder; the message says what is missing."""


def _to_frame(table: pa.Table, schema: pa.Schema, source: str) -> pd.DataFrame:
    """Arrow -> pandas with fixed dtypes, used for both freshly written and loaded tables."""
    missing = [name for name in schema.names if name not in table.column_names]
    if missing:
        raise RunFolderError(f"{source}: missing columns {', '.join(missing)}")
    try:
        table = table.select(schema.names).cast(schema)
    except (pa.ArrowInvalid, pa.ArrowTypeError, ValueError) as exc:
        raise RunFolderError(f"{source}: columns do not fit the run folder schema: {exc}") from exc
    frame = table.to_pandas()
    for field in schema:
        # Nullable integers would become float64 only when a null is present; a fixed Int64
        # keeps the dtype independent of the data.
        if pa.types.is_integer(field.type) and field.nullable:
            frame[field.name] = frame[field.name].astype("Int64")
    return frame


def _table_from_rows(
    rows: Iterable[Any], schema: pa.Schema, what: str, chunks: bool = False
) -> pa.Table:
    columns: dict[str, list[Any]] = {name: [] for name in schema.names}
    items = (chunk for record in rows for chunk in record.chunks) if chunks else rows
    for position, item in enumerate(items):
        for name, values in columns.items():
            try:
                values.append(getattr(item, name))
            except AttributeError:
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


def _requests_table(records: Iterable[Any]) -> pa.Table:
    return _table_from_rows(records, REQUESTS_SCHEMA, "request record")


def _tokens_table(records: Iterable[Any]) -> pa.Table:
    return _table_from_rows(records, TOKENS_SCHEMA, "chunk record", chunks=True)


def requests_frame(records: Iterable[Any]) -> pd.DataFrame:
    """requests.parquet's rows as a DataFrame, from RequestRecord-like objects, in their order."""
    return _to_frame(_requests_table(records), REQUESTS_SCHEMA, REQUESTS_PARQUET)


def tokens_frame(records: Iterable[Any]) -> pd.DataFrame:
    """tokens.parquet's rows: every record's ``chunks`` (objects with request_id, index, t_s,
    n_tokens), in record order then chunk order."""
    return _to_frame(_tokens_table(records), TOKENS_SCHEMA, TOKENS_PARQUET)


def _atomic_write(path: Path, write: Any) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    write(tmp)
    os.replace(tmp, path)


def _write_json(path: Path, data: Mapping[str, Any]) -> None:
    text = json.dumps(json_safe(data), indent=2, allow_nan=False) + "\n"
    _atomic_write(path, lambda tmp: tmp.write_text(text, encoding="utf-8"))


def _write_parquet(path: Path, table: pa.Table) -> None:
    _atomic_write(path, lambda tmp: pq.write_table(table, tmp))


def sanitize_name(name: str) -> str:
    """A name safe in a folder name: [A-Za-z0-9._-] only, at most 64 characters."""
    cleaned = re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("._-")[:64]
    return cleaned or "unnamed"


@dataclass(frozen=True)
class RunData:
    """A run folder read back. ``summary`` is None when summary.json was never written (the run
    stopped early); it can be recomputed from the tables with
    ``results.summary.compute_summary``."""

    path: Path
    run_json: dict[str, Any]
    requests: pd.DataFrame
    tokens: pd.DataFrame
    summary: dict[str, Any] | None
    steps: pd.DataFrame | None = None
    samples: pd.DataFrame | None = None


@dataclass(frozen=True)
class RunFolder:
    """A run folder being written."""

    path: Path

    @property
    def run_id(self) -> str:
        return self.path.name

    @classmethod
    def create(
        cls, root: Path | str, scenario_name: str, engine_name: str, now: datetime | None = None
    ) -> RunFolder:
        """Create ``root/<UTC time>-<scenario>-<engine>`` (``-2``, ``-3``... if it exists).

        ``now`` (default: the current time) is converted to UTC for the name.
        """
        stamp = (now or datetime.now(UTC)).astimezone(UTC).strftime("%Y%m%dT%H%M%SZ")
        base = f"{stamp}-{sanitize_name(scenario_name)}-{sanitize_name(engine_name)}"
        root = Path(root)
        root.mkdir(parents=True, exist_ok=True)
        suffix = 1
        while True:
            path = root / (base if suffix == 1 else f"{base}-{suffix}")
            try:
                # mkdir without exist_ok claims the name atomically, even against a parallel run.
                path.mkdir()
            except FileExistsError:
                suffix += 1
                continue
            return cls(path)

    def write_run_json(self, data: Mapping[str, Any]) -> Path:
        """Write run.json (indent 2; NaN/inf become null, Paths and numpy scalars plain JSON)."""
        path = self.path / RUN_JSON
        _write_json(path, data)
        return path

    def write_requests(self, records: Iterable[Any]) -> pd.DataFrame:
        """Write requests.parquet from RequestRecord-like objects; returns the frame written."""
        # Records may be a one-shot iterator: build the table once, write it and convert it.
        table = _requests_table(records)
        _write_parquet(self.path / REQUESTS_PARQUET, table)
        return _to_frame(table, REQUESTS_SCHEMA, REQUESTS_PARQUET)

    def write_tokens(self, records: Iterable[Any]) -> pd.DataFrame:
        """Write tokens.parquet from the records' chunks; returns the frame written."""
        table = _tokens_table(records)
        _write_parquet(self.path / TOKENS_PARQUET, table)
        return _to_frame(table, TOKENS_SCHEMA, TOKENS_PARQUET)

    def write_steps(self, steps: pd.DataFrame) -> Path:
        """Write steps.parquet (results.engine_steps.STEPS_SCHEMA) from engine_steps.steps_frame."""
        path = self.path / STEPS_PARQUET
        table = pa.Table.from_pandas(steps, schema=STEPS_SCHEMA, preserve_index=False)
        _write_parquet(path, table)
        return path

    def write_samples(self, samples: pd.DataFrame) -> pd.DataFrame:
        """Write samples.parquet (SAMPLES_SCHEMA's columns); returns the frame as read back."""
        try:
            table = pa.Table.from_pandas(samples, schema=SAMPLES_SCHEMA, preserve_index=False)
        except (pa.ArrowInvalid, pa.ArrowTypeError, KeyError) as exc:
            raise TypeError(f"samples do not fit the run folder schema: {exc}") from exc
        _write_parquet(self.path / SAMPLES_PARQUET, table)
        return _to_frame(table, SAMPLES_SCHEMA, SAMPLES_PARQUET)

    def write_summary(self, summary: Mapping[str, Any]) -> Path:
        """Write summary.json (indent 2)."""
        path = self.path / SUMMARY_JSON
        _write_json(path, summary)
        return path

    @staticmethod
    def load(path: Path | str) -> RunData:
        return load_run(path)


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise RunFolderError(f"{path}: cannot be read as JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise RunFolderError(f"{path}: expected a JSON object, found {type(data).__name__}")
    return data


def _read_parquet(path: Path, schema: pa.Schema) -> pd.DataFrame:
    try:
        table = pq.read_table(path)
    except (OSError, pa.ArrowException) as exc:
        raise RunFolderError(f"{path}: cannot be read as parquet: {exc}") from exc
    return _to_frame(table, schema, str(path))


def load_run(path: Path | str) -> RunData:
    """Read a run folder. Raises RunFolderError naming the missing files if it is not one.

    run.json, requests.parquet and tokens.parquet are required; summary.json is optional.
    """
    path = Path(path)
    if not path.is_dir():
        what = "does not exist" if not path.exists() else "is not a directory"
        raise RunFolderError(f"not a run folder: {path} {what}")
    required = (RUN_JSON, REQUESTS_PARQUET, TOKENS_PARQUET)
    missing = [name for name in required if not (path / name).is_file()]
    if missing:
        raise RunFolderError(
            f"not a run folder: {path} lacks {', '.join(missing)} "
            f"(a run folder holds {', '.join(required)} and {SUMMARY_JSON})"
        )
    summary_path = path / SUMMARY_JSON
    steps_path = path / STEPS_PARQUET
    samples_path = path / SAMPLES_PARQUET
    return RunData(
        path=path,
        run_json=_read_json(path / RUN_JSON),
        requests=_read_parquet(path / REQUESTS_PARQUET, REQUESTS_SCHEMA),
        tokens=_read_parquet(path / TOKENS_PARQUET, TOKENS_SCHEMA),
        summary=_read_json(summary_path) if summary_path.is_file() else None,
        steps=_read_parquet(steps_path, STEPS_SCHEMA) if steps_path.is_file() else None,
        samples=_read_parquet(samples_path, SAMPLES_SCHEMA) if samples_path.is_file() else None,
    )
