"""ITL gaps of a run's chunk rows in one ordered pass, for tables whose requests lie together.

A run folder writes each request's chunks together and in index order (results.folder.tables:
record order, then chunk order; results.folder.parts.record_stream: a part holds whole records). Its
gaps then need no sort: reading the files a row group at a time, a gap is the difference of two
consecutive rows of one request, divided by the later chunk's tokens, as results.figures.itl's
SQL window computes it (the same float operations: a difference, a division, a product by
1000.0), so the values are the same, in bounded memory. A window over 10^8 rows partitioned by
10^6 requests does not keep to DuckDB's memory limit (7.6 GB at 10^6 requests of 256 tokens);
this pass holds one row group.

:func:`grouped_gaps` yields each batch's gaps as (values, counts), the values distinct within the
batch (in no order). It checks as it goes that the rows are grouped: a request's index
rises from row to row, and every request id starts one group only (the groups counted against
the number of distinct ids); when they are not, it raises :class:`NotGrouped` and the caller
uses the window instead.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pandas as pd
import pyarrow as pa
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


def _rows(tokens: TokenSource, rows: int) -> Iterator[tuple[pa.Array, np.ndarray, ...]]:
    """Each batch of the files, in file order, as (request ids, run, index, t_s, n_tokens) of
    the rows with tokens cut to ``tokens.request_ids``; ``run``: each kept row's run number
    (:func:`_runs`), which stands for its id. The ids are read dictionary-encoded and never
    filtered, and the cut is looked up once per distinct id, not per row."""
    wanted = tokens.request_ids
    for path in tokens.files:
        parquet = pq.ParquetFile(path, read_dictionary=["request_id"])
        for batch in parquet.iter_batches(batch_size=rows, columns=_COLUMNS):
            rid = batch.column("request_id")
            if not pa.types.is_dictionary(rid.type):  # a column of another type
                rid = rid.cast(pa.string()).dictionary_encode()
            codes = rid.indices.to_numpy(zero_copy_only=False)
            n = batch.column("n_tokens").to_numpy(zero_copy_only=False).astype(np.int64)
            keep = n >= 1
            if wanted is not None:
                ids = rid.dictionary.cast(pa.string()).to_pylist()
                known = np.fromiter((i in wanted for i in ids), dtype=bool, count=len(ids))
                keep &= known[codes]
            index = batch.column("index").to_numpy(zero_copy_only=False).astype(np.int64)
            t_s = batch.column("t_s").to_numpy(zero_copy_only=False).astype(np.float64)
            yield rid, _runs(codes)[keep], keep, index[keep], t_s[keep], n[keep]


def _runs(codes: np.ndarray) -> np.ndarray:
    """Each row's run number from its id's dictionary code: rows of one request side by side
    share one, another code starts the next. A dictionary holding an id twice (as a reader may
    build one) can only start a run too many, which the count of groups then catches
    (NotGrouped): never two requests in one run."""
    starts = np.ones(codes.size, dtype=np.int64)
    starts[1:] = codes[1:] != codes[:-1]
    return np.cumsum(starts)


def _id(rid: pa.DictionaryArray, row: int) -> str:
    return str(rid.dictionary[rid.indices[row].as_py()].as_py())


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
    for rid, run, keep, index, t_s, n in _rows(tokens, rows):
        if index.size == 0:
            continue
        same = np.empty(index.size, dtype=bool)
        same[1:] = run[1:] == run[:-1]
        first = _id(rid, int(np.argmax(keep)))
        same[0] = first == last_id
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
        # Hashed, not sorted: the caller groups the values again across batches.
        codes, values = pd.factorize(v[real])
        yield values, np.bincount(codes, weights=w[real], minlength=values.size).astype(np.int64)
        last_id = _id(rid, len(rid) - 1 - int(np.argmax(keep[::-1])))
        last_index, last_t = int(index[-1]), float(t_s[-1])
    if groups != _distinct_ids(tokens):
        raise NotGrouped("a request's chunks lie apart")
