"""ITL gaps of a run's chunk rows in one ordered pass, for tables whose requests lie together.

A run folder writes each request's chunks together and in index order (results.folder.tables:
record order, then chunk order; results.folder.record_stream: a part holds whole records). Its
gaps then need no sort: reading the files a row group at a time, a gap is the difference of two
consecutive rows of one request, divided by the later chunk's tokens, as results.figures.itl's
SQL window computes it (the same float operations: a difference, a division, a product by
1000.0), so the values are the same, in bounded memory. A window over 10^8 rows partitioned by
10^6 requests does not keep to DuckDB's memory limit (7.6 GB at 10^6 requests of 256 tokens);
this pass holds one row group.

:func:`grouped_gaps` yields each batch's gaps as (values, counts), the values grouped (sorted,
distinct) within the batch. It checks as it goes that the rows are grouped: a request's index
rises from row to row, and every request id starts one group only (the groups counted against
the number of distinct ids); when they are not, it raises :class:`NotGrouped` and the caller
uses the window instead.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from results.folder.token_source import TokenSource

__all__ = ["NotGrouped", "grouped_gaps"]

_COLUMNS = ["request_id", "index", "t_s", "n_tokens"]


class NotGrouped(Exception):
    """The chunk rows are not grouped by request in index order."""


def _distinct_ids(tokens: TokenSource) -> int:
    with tokens.query() as con:
        ((n,),) = con.execute(
            "SELECT count(DISTINCT request_id) FROM tokens WHERE n_tokens >= 1"
        ).fetchall()
    return int(n)


def _rows(tokens: TokenSource, rows: int) -> Iterator[pa.RecordBatch]:
    """The rows with tokens, in file order, cut to ``tokens.request_ids``."""
    wanted = None
    if tokens.request_ids is not None:
        wanted = pa.array(sorted(tokens.request_ids), pa.string())
    for path in tokens.files:
        for batch in pq.ParquetFile(path).iter_batches(batch_size=rows, columns=_COLUMNS):
            keep = pc.greater_equal(batch.column("n_tokens"), 1)
            if wanted is not None:
                ids = batch.column("request_id").cast(pa.string())
                keep = pc.and_(keep, pc.is_in(ids, value_set=wanted))
            yield batch.filter(keep)


def grouped_gaps(
    tokens: TokenSource, rows: int = 1 << 20
) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Each batch's ITL values (ms) and how many tokens carry each (module docstring); raises
    NotGrouped, possibly after some batches, when the rows are not grouped by request. Only for
    a TokenSource of files."""
    if tokens.frame is not None:
        raise NotGrouped("a frame is not read in file order")
    last_id: str | None = None
    last_index, last_t = 0, 0.0
    groups = 0
    for batch in _rows(tokens, rows):
        if batch.num_rows == 0:
            continue
        rid = batch.column("request_id").cast(pa.string())
        index = batch.column("index").to_numpy(zero_copy_only=False).astype(np.int64)
        t_s = batch.column("t_s").to_numpy(zero_copy_only=False).astype(np.float64)
        n = batch.column("n_tokens").to_numpy(zero_copy_only=False).astype(np.int64)
        same = np.empty(batch.num_rows, dtype=bool)
        same[1:] = pc.equal(rid[1:], rid[:-1]).to_numpy(zero_copy_only=False)
        same[0] = rid[0].as_py() == last_id
        previous_t = np.empty_like(t_s)
        previous_t[1:], previous_t[0] = t_s[:-1], last_t
        previous_index = np.empty_like(index)
        previous_index[1:], previous_index[0] = index[:-1], last_index
        if np.any(same & (index <= previous_index)):
            raise NotGrouped("a request's chunk index does not rise from row to row")
        groups += int(np.count_nonzero(~same))
        v = (t_s[same] - previous_t[same]) / n[same] * 1000.0
        w = n[same]
        real = ~np.isnan(v)
        values, inverse = np.unique(v[real], return_inverse=True)
        yield values, np.bincount(inverse, weights=w[real], minlength=values.size).astype(np.int64)
        last_id, last_index, last_t = rid[-1].as_py(), int(index[-1]), float(t_s[-1])
    if groups != _distinct_ids(tokens):
        raise NotGrouped("a request's chunks lie apart")
