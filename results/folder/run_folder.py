"""The run folder: the one contract between a run and everything that reads it.

``runs/<UTC %Y%m%dT%H%M%SZ>-<scenario>-<engine>/`` holds ``run.json``, ``requests.parquet``,
``tokens.parquet`` and ``summary.json`` (other writers add their own files beside them). Every
file is written to a temporary name and renamed, so a crash never leaves a half-written file.

run.json and summary.json are declared by results.schema (RunJson, SummaryJson, each with its
``schema_version``): the writers check a document before writing it, and :func:`load_run` reads
through the schema's upgrade, so a folder written by an older version opens as the current one.
The parquet files have fixed Arrow schemas (results.folder.tables, from results.folder.records),
and the
DataFrames returned by the writers and by :func:`load_run` both come from the same Arrow ->
pandas conversion, so a summary computed in the run equals one recomputed from the folder.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from perfmodel.files import JSONObject, atomic_write, atomic_write_text, json_safe, json_text
from results.folder.endpoints import fill_endpoints, fill_models
from results.folder.engine_steps import STEPS_SCHEMA
from results.folder.parts.record_stream import RecordStream
from results.folder.parts.sample_parts import read_sample_parts, seal_samples
from results.folder.parts.writer import (
    FLUSH_ROWS,
    FLUSH_S,
    REQUESTS_PARTS,
    SAMPLES_PARTS,
    STEPS_PARTS,
    TOKENS_PARTS,
    has_parts,
    part_files,
    read_parts,
    seal_parts,
)
from results.folder.redact import redact_command
from results.folder.tables import (
    REQUESTS_SCHEMA,
    SAMPLES_SCHEMA,
    TOKENS_SCHEMA,
    TableError,
    requests_frame,
    requests_table,
    to_frame,
    tokens_frame,
    tokens_table,
)
from results.folder.token_source import TokenSource, token_source
from results.schema import (
    RunJson,
    SchemaError,
    SummaryJson,
    check_run_json,
    check_summary_json,
    upgrade_run_json,
    upgrade_summary_json,
)

__all__ = [
    "REQUESTS_PARQUET",
    "REQUESTS_SCHEMA",
    "RUN_JSON",
    "SAMPLES_PARQUET",
    "SAMPLES_SCHEMA",
    "STEPS_PARQUET",
    "SUMMARY_JSON",
    "TOKENS_PARQUET",
    "TOKENS_SCHEMA",
    "RunData",
    "RunFolder",
    "RunFolderError",
    "load_run",
    "read_run_json",
    "read_summary_json",
    "requests_frame",
    "tokens_frame",
]

RUN_JSON = "run.json"
REQUESTS_PARQUET = "requests.parquet"
TOKENS_PARQUET = "tokens.parquet"
SUMMARY_JSON = "summary.json"
STEPS_PARQUET = "steps.parquet"
SAMPLES_PARQUET = "samples.parquet"
# Rows a parquet table is decoded at a time when it is read whole (_read_parquet).
_READ_BATCH_ROWS = 65_536


class RunFolderError(ValueError):
    """A path that is not a (complete, readable) run folder; the message says what is missing."""


def _write_parquet(path: Path, table: pa.Table) -> None:
    atomic_write(path, lambda tmp: pq.write_table(table, tmp))


def sanitize_name(name: str) -> str:
    """A name safe in a folder name: [A-Za-z0-9._-] only, at most 64 characters."""
    cleaned = re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("._-")[:64]
    return cleaned or "unnamed"


@dataclass(frozen=True)
class RunData:
    """A run folder read back. ``summary`` is None when summary.json was never written (the run
    stopped early); it can be recomputed from the tables with
    ``results.figures.summary.compute_summary``."""

    path: Path
    run_json: RunJson
    requests: pd.DataFrame
    # tokens.parquet's rows, or where they lie (read on first use of ``tokens``).
    token_data: pd.DataFrame | TokenSource
    summary: SummaryJson | None
    steps: pd.DataFrame | None = None
    samples: pd.DataFrame | None = None

    @functools.cached_property
    def tokens(self) -> pd.DataFrame:
        """tokens.parquet's rows in memory, read on first use; the summary reads them where
        they lie instead (:attr:`token_source`), in bounded memory."""
        data = self.token_data
        if isinstance(data, pd.DataFrame):
            return data
        tables = [pq.read_table(f) for f in data.files]
        table = pa.concat_tables(tables) if tables else TOKENS_SCHEMA.empty_table()
        return to_frame(table, TOKENS_SCHEMA, str(self.path / TOKENS_PARQUET))

    @property
    def token_source(self) -> TokenSource:
        """The chunk rows as results.folder.token_source reads them (DuckDB, bounded memory)."""
        return token_source(self.token_data)


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

    def write_run_json(self, data: RunJson) -> Path:
        """Write run.json (indent 2; NaN/inf become null, Paths and numpy scalars plain JSON).

        Raises results.schema.SchemaError (nothing written) when ``data`` does not fit
        results.schema.RunJson at the current RUN_JSON_VERSION, naming the key. The engine's
        launch command is stored redacted (results.folder.redact), whoever built the document.
        """
        path = self.path / RUN_JSON
        engine = data.get("engine")
        if isinstance(engine, dict) and engine.get("launch_command"):
            redacted = {**engine, "launch_command": redact_command(engine["launch_command"])}
            data = {**data, "engine": redacted}  # type: ignore[typeddict-item]
        # Checked as encoded, so what is checked is what is written; encoded once.
        atomic_write_text(path, json_text(check_run_json(json_safe(data), str(path))))
        return path

    def write_requests(self, records: Iterable[Any]) -> pd.DataFrame:
        """Write requests.parquet from RequestRecord-like objects; returns the frame written."""
        # Records may be a one-shot iterator: build the table once, write it and convert it.
        table = requests_table(records)
        _write_parquet(self.path / REQUESTS_PARQUET, table)
        return to_frame(table, REQUESTS_SCHEMA, REQUESTS_PARQUET)

    def write_tokens(self, records: Iterable[Any]) -> pd.DataFrame:
        """Write tokens.parquet from the records' chunks; returns the frame written."""
        table = tokens_table(records)
        _write_parquet(self.path / TOKENS_PARQUET, table)
        return to_frame(table, TOKENS_SCHEMA, TOKENS_PARQUET)

    def open_stream(self, flush_s: float = FLUSH_S, flush_rows: int = FLUSH_ROWS) -> RecordStream:
        """A stream of finished records into this folder's parts
        (results.folder.parts.record_stream); :meth:`seal_records` once it is closed."""
        return RecordStream(self.path, flush_s, flush_rows)

    def seal_records(self) -> None:
        """requests.parquet and tokens.parquet from the streamed parts, which are removed."""
        seal_parts(self.path, REQUESTS_PARTS, REQUESTS_PARQUET, REQUESTS_SCHEMA)
        seal_parts(self.path, TOKENS_PARTS, TOKENS_PARQUET, TOKENS_SCHEMA)

    def write_steps(self, steps: pd.DataFrame) -> Path:
        """Write steps.parquet (results.folder.engine_steps.STEPS_SCHEMA) from
        engine_steps.steps_frame."""
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
        return to_frame(table, SAMPLES_SCHEMA, SAMPLES_PARQUET)

    def seal_samples(self, t0_ns: int) -> Path | None:
        """samples.parquet from the probes' streamed ``samples.parts`` (removed), on the clock
        of the run that began at ``t0_ns`` (perf_counter_ns); None when there are none."""
        return seal_samples(self.path, SAMPLES_PARQUET, t0_ns)

    def write_summary(self, summary: SummaryJson) -> Path:
        """Write summary.json (indent 2). Raises results.schema.SchemaError (nothing written)
        when ``summary`` does not fit results.schema.SummaryJson, naming the key."""
        path = self.path / SUMMARY_JSON
        atomic_write_text(path, json_text(check_summary_json(json_safe(summary), str(path))))
        return path

    @staticmethod
    def load(path: Path | str) -> RunData:
        return load_run(path)


def _read_json(path: Path) -> JSONObject:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise RunFolderError(f"{path}: cannot be read as JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise RunFolderError(f"{path}: expected a JSON object, found {type(data).__name__}")
    return data


def read_run_json(path: Path | str) -> RunJson:
    """The run.json at ``path``, upgraded to the current version (results.schema).

    Raises RunFolderError naming the file when it cannot be read, is newer than this code reads,
    or does not fit results.schema.RunJson.
    """
    path = Path(path)
    try:
        return upgrade_run_json(_read_json(path), str(path))
    except SchemaError as exc:
        raise RunFolderError(str(exc)) from exc


def read_summary_json(path: Path | str) -> SummaryJson:
    """The summary.json at ``path``, upgraded to the current version (as :func:`read_run_json`)."""
    path = Path(path)
    try:
        return upgrade_summary_json(_read_json(path), str(path))
    except SchemaError as exc:
        raise RunFolderError(str(exc)) from exc


def _read_parquet(path: Path, schema: pa.Schema) -> pd.DataFrame:
    try:
        # In batches: a streamed run's file has a row group per flushed part (thousands in a
        # long run), which read_table decodes all at once, holding three times the table
        # (735 MB beside 212 MB of requests at 10^6); batches hold 0.4 GB more and cost half
        # the CPU.
        parquet = pq.ParquetFile(path)
        batches = parquet.iter_batches(batch_size=_READ_BATCH_ROWS)
        table = pa.Table.from_batches(list(batches), schema=parquet.schema_arrow)
    except (OSError, pa.ArrowException) as exc:
        raise RunFolderError(f"{path}: cannot be read as parquet: {exc}") from exc
    try:
        return to_frame(table, schema, str(path))
    except TableError as exc:
        raise RunFolderError(str(exc)) from exc


def _token_files(path: Path, files: list[Path]) -> TokenSource:
    """The token files of a folder, their columns checked now (their rows read on use)."""
    for file in files:
        try:
            to_frame(pq.read_schema(file).empty_table(), TOKENS_SCHEMA, str(file))
        except (OSError, pa.ArrowException) as exc:
            raise RunFolderError(f"{file}: cannot be read as parquet: {exc}") from exc
        except TableError as exc:
            raise RunFolderError(str(exc)) from exc
    # Resolved: a reader that linked the files from elsewhere may remove its links.
    return TokenSource(files=tuple(f.resolve() for f in files))


def _read_streamed(path: Path, schema: pa.Schema, parts: str, name: str) -> pd.DataFrame:
    """A table of a folder whose streamed parts were never sealed (a killed run)."""
    try:
        return to_frame(read_parts(path, parts, schema), schema, str(path / parts))
    except (OSError, pa.ArrowException, TableError) as exc:
        raise RunFolderError(f"{path / parts}: the parts of {name} cannot be read: {exc}") from exc


def _read_steps(path: Path) -> pd.DataFrame | None:
    """steps.parquet, else the steps streamed to steps.parts of a run killed before it sealed
    them (bench.run.step_follower, results.folder.parts.step_parts); None: the run has no steps."""
    if (path / STEPS_PARQUET).is_file():
        return _read_parquet(path / STEPS_PARQUET, STEPS_SCHEMA)
    if part_files(path, STEPS_PARTS):
        return _read_streamed(path, STEPS_SCHEMA, STEPS_PARTS, STEPS_PARQUET)
    return None


def _read_samples(path: Path, run_json: RunJson) -> pd.DataFrame | None:
    """samples.parquet, else the probes' parts of a run killed before it sealed them, on the
    run's clock (run.json's ``client.t0_ns``); None when the folder has neither."""
    if (path / SAMPLES_PARQUET).is_file():
        return _read_parquet(path / SAMPLES_PARQUET, SAMPLES_SCHEMA)
    if not part_files(path, SAMPLES_PARTS):
        return None
    t0_ns = (run_json.get("client") or {}).get("t0_ns")
    if not isinstance(t0_ns, int):
        raise RunFolderError(
            f"{path / RUN_JSON}: client.t0_ns is missing, so the readings of "
            f"{path / SAMPLES_PARTS} cannot be put on the run's clock; move the parts away to "
            "read the rest"
        )
    try:
        table = read_sample_parts(path, t0_ns)
        return to_frame(table, SAMPLES_SCHEMA, str(path / SAMPLES_PARTS))
    except (OSError, pa.ArrowException, TableError) as exc:
        raise RunFolderError(
            f"{path / SAMPLES_PARTS}: the parts of {SAMPLES_PARQUET} cannot be read: {exc}"
        ) from exc


def load_run(path: Path | str) -> RunData:
    """Read a run folder. Raises RunFolderError naming the missing files if it is not one, and
    the file and key when one does not fit its schema.

    run.json, requests.parquet and tokens.parquet are required; summary.json is optional. Both
    JSON documents come back upgraded to their current schema_version (results.schema). A
    folder whose run was killed before it sealed its streamed records
    (results.folder.parts.record_stream) is read from its parts, with run.json's ``incomplete``
    saying so and no summary (a summary.json there is not of these records); its engine
    steps, likewise, from steps.parts when steps.parquet was never sealed, and its samples
    from the probes' parts, ``incomplete`` counting them.
    """
    path = Path(path)
    if not path.is_dir():
        what = "does not exist" if not path.exists() else "is not a directory"
        raise RunFolderError(f"not a run folder: {path} {what}")
    # A killed run's streamed parts, never sealed: read them, and say so (``incomplete``).
    streamed = has_parts(path) and (path / RUN_JSON).is_file()
    required = (RUN_JSON, REQUESTS_PARQUET, TOKENS_PARQUET)
    missing = [name for name in required if not (path / name).is_file()]
    if missing and not streamed:
        raise RunFolderError(
            f"not a run folder: {path} lacks {', '.join(missing)} "
            f"(a run folder holds {', '.join(required)} and {SUMMARY_JSON})"
        )
    summary_path = path / SUMMARY_JSON
    run_json = read_run_json(path / RUN_JSON)
    samples = _read_samples(path, run_json)
    if streamed:
        requests = _read_streamed(path, REQUESTS_SCHEMA, REQUESTS_PARTS, REQUESTS_PARQUET)
        tokens = _token_files(path, part_files(path, TOKENS_PARTS))
        incomplete = {**(run_json.get("incomplete") or {}), "requests_flushed": len(requests)}
        if samples is not None and not (path / SAMPLES_PARQUET).is_file():
            incomplete["samples_flushed"] = len(samples)
        run_json = {**run_json, "incomplete": incomplete}  # type: ignore[typeddict-item]
    else:
        requests = _read_parquet(path / REQUESTS_PARQUET, REQUESTS_SCHEMA)
        tokens = _token_files(path, [path / TOKENS_PARQUET])
    return RunData(
        path=path,
        run_json=run_json,
        requests=fill_models(fill_endpoints(requests, run_json), run_json),
        token_data=tokens,
        summary=read_summary_json(summary_path)
        if summary_path.is_file() and not streamed
        else None,
        steps=_read_steps(path),
        samples=samples,
    )
