"""A long run folder made by tiling a shorter one: K copies of its records, one after another.

Simulating 10^6 requests takes over an hour on a small machine; measuring what the summary, the
page and the gate cost at that size does not need a fresh simulation, only a folder of that
size with the same shape. Copy k of the source (k = 0 .. K-1) holds every request, chunk and
engine step of the source with its times shifted by k times the source's span (its latest
time plus one second) and ``~k`` appended to its request, user and session ids, so the copies
never overlap and every id stays unique. run.json is the source's with the request count
multiplied. Tables are copied one row group at a time, so memory holds one row group
whatever K is:

    python benchmarks/long_runs/tile_run.py RUN_FOLDER --times 10 --out TILED_FOLDER

The tiled folder has no summary.json: `bench report TILED_FOLDER` computes it.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

# The columns in run seconds, which each copy shifts, and the ids it makes unique.
TIME_COLUMNS = {
    "requests.parquet": ("scheduled_s", "sent_s", "first_token_s", "done_s",
                         "first_answer_token_s"),
    "tokens.parquet": ("t_s", "read_s"),
    "steps.parquet": ("start_s", "end_s"),
    "samples.parquet": ("t_s",),
}  # fmt: skip
ID_COLUMNS = ("request_id", "session_id")


def _span_s(folder: Path) -> float:
    """The source's latest time (run seconds) plus a second: one copy's length."""
    table = pq.read_table(folder / "requests.parquet", columns=["sent_s", "done_s"])
    latest = max(pc.max(table[c]).as_py() or 0.0 for c in table.column_names)
    return float(latest) + 1.0


def _shifted(batch: pa.RecordBatch, name: str, copy: int, shift_s: float) -> pa.RecordBatch:
    """``batch`` as copy ``copy``: times shifted by ``shift_s``, ids suffixed, steps renumbered."""
    columns = []
    for field, column in zip(batch.schema, batch.columns, strict=True):
        if field.name in TIME_COLUMNS.get(name, ()):
            column = pc.add(column, pa.scalar(shift_s, column.type))
        elif field.name in ID_COLUMNS and pa.types.is_string(field.type):
            column = pc.binary_join_element_wise(column, pa.scalar(f"~{copy}"), "")
        elif field.name == "user_id" and pa.types.is_integer(field.type):
            column = pc.add(column, pa.scalar(copy * 1_000_000_000, field.type))
        columns.append(column)
    return pa.RecordBatch.from_arrays(columns, schema=batch.schema)


def _renumbered(batch: pa.RecordBatch, offset: int) -> pa.RecordBatch:
    """A steps batch whose step numbers continue the previous copy's."""
    index = batch.schema.get_field_index("step")
    step = pc.add(batch.column(index), pa.scalar(offset, batch.schema.field(index).type))
    return batch.set_column(index, batch.schema.field(index), step)


def _copies(source: Path, name: str, times: int, span_s: float) -> Iterator[pa.RecordBatch]:
    parquet = pq.ParquetFile(source / name)
    rows = parquet.metadata.num_rows
    for copy in range(times):
        for group in range(parquet.num_row_groups):
            for batch in parquet.read_row_group(group).to_batches():
                batch = _shifted(batch, name, copy, copy * span_s)
                yield _renumbered(batch, copy * rows) if name == "steps.parquet" else batch


def tile(source: Path, times: int, out: Path) -> None:
    """Write ``out`` as ``times`` copies of the run folder ``source`` (module docstring)."""
    if times < 1:
        raise SystemExit(f"--times must be >= 1, got {times}")
    out.mkdir(parents=True, exist_ok=False)
    span_s = _span_s(source)
    for name in TIME_COLUMNS:
        if not (source / name).is_file():
            continue
        schema = pq.read_schema(source / name)
        with pq.ParquetWriter(out / name, schema) as writer:
            for batch in _copies(source, name, times, span_s):
                writer.write_batch(batch)
    run_json = json.loads((source / "run.json").read_text())
    run_json["run_id"] = out.name
    scenario = run_json.get("scenario") or {}
    if scenario.get("num_requests"):
        scenario["num_requests"] *= times
    (out / "run.json").write_text(json.dumps(run_json, indent=2) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("source", type=Path)
    parser.add_argument("--times", type=int, required=True)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    tile(args.source, args.times, args.out)


if __name__ == "__main__":
    main()
