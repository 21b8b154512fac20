"""steps.parquet's columns added after it was first written: read as null where absent."""

from __future__ import annotations

import pandas as pd
import pyarrow as pa

from results.folder.engine_steps import STEPS_SCHEMA, steps_frame
from results.folder.table_columns import STEP_ADDED_COLUMNS, STEP_RECORD_COLUMNS
from results.folder.tables import to_frame


def _record(steps: int, without: tuple[str, ...] = ()) -> dict[str, list[int]]:
    columns = {name: [1] * steps for name in STEP_RECORD_COLUMNS if name not in without}
    columns["step"] = list(range(steps))
    columns["start_ns"] = [10 + i for i in range(steps)]
    return columns


def test_an_engine_that_records_the_graph_column_keeps_it() -> None:
    record = _record(3)
    record["cuda_graph"] = [0, 1, 1]
    frame = steps_frame(record, t0_ns=0)
    assert frame["cuda_graph"].tolist() == [0, 1, 1]


def test_an_older_engine_without_the_added_columns_reads_as_unknown() -> None:
    frame = steps_frame(_record(3, without=STEP_ADDED_COLUMNS), t0_ns=0)
    assert len(frame) == 3
    for name in STEP_ADDED_COLUMNS:
        assert frame[name].isna().all()


def test_an_older_steps_table_reads_as_unknown() -> None:
    frame = steps_frame({**_record(2), "cuda_graph": [1, 0]}, t0_ns=0)
    old = pa.Table.from_pandas(frame.drop(columns=list(STEP_ADDED_COLUMNS)), preserve_index=False)
    read = to_frame(old, STEPS_SCHEMA, "old steps.parquet")
    assert read["cuda_graph"].isna().all() and str(read["cuda_graph"].dtype) == "Int64"
    assert read["num_seqs"].tolist() == [1, 1]
    pd.testing.assert_series_equal(read["step"], frame["step"])
