"""TokenSource's counts over windows: one pass gives what a query per window gives, on chunks
that fall on the windows' edges, from a frame and from the parquet files alike."""

from __future__ import annotations

from itertools import pairwise
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from results.folder.token_source import TokenSource


def _chunks() -> pd.DataFrame:
    times = [0.5, 1.0, 1.0, 1.5, 2.0, 2.25, 3.0, 3.5, 4.0]  # on and between the edges
    return pd.DataFrame({
        "request_id": [f"r{i % 3}" for i in range(len(times))], "index": range(len(times)),
        "t_s": times, "n_tokens": [1, 2, 3, 4, 5, 6, 7, 8, 9],
    })  # fmt: skip


def test_windows_count_as_a_query_per_window_does(tmp_path: Path) -> None:
    frame = _chunks()
    path = tmp_path / "tokens.parquet"
    pq.write_table(pa.Table.from_pandas(frame, preserve_index=False), path)
    edges = [1.0, 2.0, 2.5, 3.0, 3.5]
    for source in (TokenSource(frame=frame), TokenSource(files=(path,))):
        per_window = [source.tokens_between(lo, hi) for lo, hi in pairwise(edges)]
        assert source.tokens_in_windows(edges) == per_window == [4 + 5, 6, 7, 8]
        assert source.only(["r0"]).tokens_in_windows(edges) == [4, 0, 7, 0]
    assert TokenSource(frame=frame).tokens_in_windows([1.0]) == []
