"""The ordered ITL pass over a folder's files gives the SQL window's values exactly, and yields
to it when the rows are not grouped by request."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from results.figures import itl
from results.figures.itl_gaps import NotGrouped, grouped_gaps
from results.figures.summary import LATENCY_PERCENTILES, distribution
from results.folder.token_source import TokenSource


def _chunks(requests: int, seed: int) -> pa.Table:
    """Each request's chunks together in index order, some of several tokens or of none."""
    rng = np.random.default_rng(seed)
    rows: dict[str, list] = {"request_id": [], "index": [], "t_s": [], "n_tokens": []}
    for r in range(requests):
        count = int(rng.integers(1, 40))
        t = np.cumsum(rng.exponential(0.02, count))
        rows["request_id"] += [f"req-{r:04d}"] * count
        rows["index"] += list(range(count))
        rows["t_s"] += list(t)
        rows["n_tokens"] += list(rng.choice([0, 1, 1, 1, 3], count))
    return pa.table(rows)


def _same(got: dict, want: dict) -> None:
    """Equal figures; mean and std to 1e-12 relative (numpy adds the values in another order)."""
    assert got.keys() == want.keys()
    for key in got:
        if key in ("mean", "std"):
            assert got[key] == pytest.approx(want[key], rel=1e-12)
        else:
            assert got[key] == want[key], key


def _window_values(table: pa.Table, ids: set[str] | None) -> np.ndarray:
    """The ITL values by their definition (results.figures.summary), one per token."""
    frame = table.to_pandas()
    frame = frame[frame["n_tokens"] >= 1]
    if ids is not None:
        frame = frame[frame["request_id"].isin(ids)]
    values = []
    for _, group in frame.groupby("request_id"):
        group = group.sort_values("index")
        t, n = group["t_s"].to_numpy(), group["n_tokens"].to_numpy()
        values.append(np.repeat((t[1:] - t[:-1]) / n[1:] * 1000.0, n[1:]))
    return np.concatenate(values)


@pytest.mark.parametrize("rows", [7, 1 << 20])
def test_grouped_pass_equals_the_definition_across_row_groups(tmp_path: Path, rows: int) -> None:
    table = _chunks(300, seed=1)
    path = tmp_path / "tokens.parquet"
    pq.write_table(table, path, row_group_size=101)  # requests cut across row groups
    ids = {f"req-{r:04d}" for r in range(0, 300, 3)}
    for cut in (None, ids):
        source = TokenSource(files=(path,), request_ids=None if cut is None else frozenset(cut))
        pieces = list(grouped_gaps(source, rows))
        got = np.concatenate([np.repeat(v, c) for v, c in pieces])
        want = _window_values(table, cut)
        np.testing.assert_array_equal(np.sort(got), np.sort(want))
        _same(
            itl.itl_distribution(source, LATENCY_PERCENTILES),
            distribution(want, LATENCY_PERCENTILES),
        )


def test_rows_apart_fall_back_to_the_window(tmp_path: Path) -> None:
    table = _chunks(50, seed=2)
    shuffled = table.take(np.random.default_rng(3).permutation(table.num_rows))
    path = tmp_path / "tokens.parquet"
    pq.write_table(shuffled, path)
    source = TokenSource(files=(path,))
    with pytest.raises(NotGrouped):
        list(grouped_gaps(source))
    want = _window_values(table, None)
    _same(
        itl.itl_distribution(source, LATENCY_PERCENTILES), distribution(want, LATENCY_PERCENTILES)
    )


def test_a_request_in_two_places_is_not_grouped(tmp_path: Path) -> None:
    table = _chunks(20, seed=4)
    first = table.filter(pa.compute.equal(table["request_id"], "req-0000"))
    # req-0000's chunks again at the end, with higher indexes: grouped row to row, yet apart.
    later = first.set_column(1, "index", pa.compute.add(first["index"], 1000))
    path = tmp_path / "tokens.parquet"
    pq.write_table(pa.concat_tables([table, later]), path)
    with pytest.raises(NotGrouped):
        list(grouped_gaps(TokenSource(files=(path,))))
