"""Inter-token latency over tokens.parquet, in bounded memory, with numpy's exact percentiles.

The ITL values are one per token after a request's first content chunk: the gap before a
chunk of k tokens, divided by k, counted k times (results.figures.summary's module docstring).
They are computed from the table where it lies: by one pass over its files a row group at a
time when each request's chunks lie together in index order, as a run folder writes them
(results.figures.itl_gaps), else by DuckDB (results.folder.token_source: a window over each
request's chunks in index order); DuckDB groups equal values with their counts, spilling to
disk what does not fit; the distinct values are then read in ascending order, a batch at a
time, so memory holds one batch whatever the run's length.

From that sorted stream the figures are those of results.figures.summary.distribution over the
repeated values: count, min and max exactly; each percentile exactly as numpy's default
(linear) method computes it, from the two values its index falls between (the same float
operations as numpy's ``_lerp``); mean and population std combined from those of each piece
of at most :data:`BATCH_ROWS` values (Chan et al.'s pairwise update), which agree with
numpy's over the whole array to within 1e-12 relative (they add the same values in another
order) and equal it when there are no more values than one piece.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterable, Iterator, Sequence

import duckdb
import numpy as np
import pyarrow as pa

from results.figures.itl_gaps import NotGrouped, grouped_gaps
from results.folder.token_source import TokenSource
from results.schema import Distribution

__all__ = ["BATCH_ROWS", "itl_by_request", "itl_cdf", "itl_distribution", "sorted_distribution"]

BATCH_ROWS = 1 << 20
# Distinct ITL values (ms) and how many times each occurs, ascending.
_Batch = tuple[np.ndarray, np.ndarray]

_ITL_SQL = """
CREATE TEMP TABLE itl AS
SELECT v, sum(w)::BIGINT AS w FROM (
    SELECT (t_s - lag(t_s) OVER (PARTITION BY request_id ORDER BY "index"))
           / n_tokens * 1000.0::DOUBLE AS v,
           n_tokens AS w
    FROM tokens WHERE n_tokens >= 1
) WHERE v IS NOT NULL AND NOT isnan(v)
GROUP BY v
"""


def _pkey(p: float) -> str:
    return f"p{p:g}"


def _ranks(n: int, percentiles: Sequence[float]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """numpy's linear method: the two neighbouring indexes of each percentile, and the weight."""
    q = np.true_divide(np.asarray(percentiles, dtype=np.float64), 100)
    virtual = (n - 1) * q
    previous = np.floor(virtual)
    following = previous + 1
    above = virtual >= n - 1
    previous[above] = n - 1
    following[above] = n - 1
    # numpy's gamma is taken against the index it uses (-1, the last, above the bounds).
    gamma = virtual - np.where(above, -1.0, previous)
    return previous.astype(np.int64), following.astype(np.int64), gamma


def _lerp(a: np.ndarray, b: np.ndarray, t: np.ndarray) -> np.ndarray:
    diff = b - a
    out = a + diff * t
    return np.where(t >= 0.5, b - diff * (1 - t), out)


def _expanded(values: np.ndarray, counts: np.ndarray, limit: int) -> Iterator[np.ndarray]:
    """``values`` each repeated its count times, in order, in pieces of at most ``limit``
    values: a batch of few distinct values may stand for 10^8 tokens (2 GB repeated at once)."""
    ends = np.cumsum(counts)
    total = int(ends[-1]) if ends.size else 0
    for start in range(0, total, limit):
        stop = min(start + limit, total)
        first = int(np.searchsorted(ends, start, side="right"))
        last = int(np.searchsorted(ends, stop - 1, side="right"))
        piece = counts[first : last + 1].copy()
        before = int(ends[first - 1]) if first else 0
        piece[0] -= start - before
        piece[-1] -= int(ends[last]) - stop
        yield np.repeat(values[first : last + 1], piece)


def sorted_distribution(
    batches: Iterable[_Batch], n: int, percentiles: Sequence[float]
) -> Distribution:
    """The distribution of values given as ascending ``(values, counts)`` batches (``n``: the
    counts' total), as results.figures.summary.distribution gives it (module docstring)."""
    stats: Distribution = {"count": int(n)}
    if n == 0:
        stats.update(dict.fromkeys(["mean", "std", "min", *map(_pkey, percentiles), "max"]))
        return stats
    previous, following, gamma = _ranks(n, percentiles)
    wanted = np.unique(np.concatenate([previous, following]))
    found: dict[int, float] = {}
    seen, mean, m2 = 0, 0.0, 0.0
    lowest = highest = math.nan
    for values, counts in batches:
        if values.size == 0:
            continue
        if seen == 0:
            lowest = float(values[0])
        highest = float(values[-1])
        ends = seen + np.cumsum(counts)
        inside = wanted[(wanted >= seen) & (wanted < ends[-1])]
        for rank, at in zip(inside, np.searchsorted(ends, inside, side="right"), strict=True):
            found[int(rank)] = float(values[at])
        for x in _expanded(values, counts, BATCH_ROWS):
            k, x_mean = x.size, float(np.mean(x))
            x_m2 = float(np.sum(np.square(x - x_mean)))
            if seen == 0:  # one piece: numpy's own mean and std of the sorted values
                mean, m2 = x_mean, x_m2
            else:
                delta, total = x_mean - mean, seen + k
                mean += delta * k / total
                m2 += x_m2 + delta * delta * seen * k / total
            seen += k
    at_previous = np.array([found[int(r)] for r in previous])
    at_following = np.array([found[int(r)] for r in following])
    stats["mean"] = mean
    stats["std"] = math.sqrt(m2 / n)
    stats["min"] = lowest
    for p, v in zip(percentiles, _lerp(at_previous, at_following, gamma), strict=True):
        stats[_pkey(p)] = float(v)
    stats["max"] = highest
    return stats


def _batches(reader: pa.RecordBatchReader) -> Iterator[_Batch]:
    for batch in reader:
        yield (
            batch.column(0).to_numpy(zero_copy_only=False).astype(np.float64, copy=False),
            batch.column(1).to_numpy(zero_copy_only=False).astype(np.int64, copy=False),
        )


def _itl_table(con: duckdb.DuckDBPyConnection, tokens: TokenSource) -> None:
    """``itl``: the distinct ITL values (v, ms) of ``tokens`` and the tokens carrying each (w),
    by one ordered pass when its rows are grouped by request (results.figures.itl_gaps), else
    by DuckDB's window."""
    con.execute("CREATE TEMP TABLE itl_raw (v DOUBLE, w BIGINT)")
    held: list[tuple[np.ndarray, np.ndarray]] = []
    held_values = 0

    def insert() -> None:
        nonlocal held_values
        # Batches are a row group each: inserted BATCH_ROWS values at a time, not one by one.
        gaps = pa.table({"v": np.concatenate([v for v, _ in held]),
                         "w": np.concatenate([w for _, w in held])})  # fmt: skip
        con.register("_gaps", gaps)
        con.execute("INSERT INTO itl_raw SELECT v, w FROM _gaps")
        con.unregister("_gaps")
        held.clear()
        held_values = 0

    try:
        for values, counts in grouped_gaps(tokens, BATCH_ROWS):
            held.append((values, counts))
            held_values += values.size
            if held_values >= BATCH_ROWS:
                insert()
        if held:
            insert()
    except NotGrouped:
        con.execute("DROP TABLE itl_raw")
        con.execute(_ITL_SQL)
        return
    con.execute("CREATE TEMP TABLE itl AS SELECT v, sum(w)::BIGINT AS w FROM itl_raw GROUP BY v")
    con.execute("DROP TABLE itl_raw")


@contextlib.contextmanager
def _sorted_itl(tokens: TokenSource) -> Iterator[tuple[int, Iterator[_Batch]]]:
    """The number of ITL values of ``tokens`` and their distinct values, ascending, in batches
    of (values, counts)."""
    with tokens.query() as con:
        _itl_table(con, tokens)
        ((n,),) = con.execute("SELECT coalesce(sum(w), 0)::BIGINT FROM itl").fetchall()
        ordered = con.sql("SELECT v, w FROM itl ORDER BY v")
        # DuckDB 2 names it to_arrow_reader, 1.x fetch_arrow_reader: a stream of batches.
        read = getattr(ordered, "to_arrow_reader", None) or ordered.fetch_arrow_reader
        yield int(n), _batches(read(BATCH_ROWS))


def itl_distribution(tokens: TokenSource, percentiles: Sequence[float]) -> Distribution:
    """The ITL distribution (ms) of ``tokens`` (cut to the requests it counts), in bounded
    memory (module docstring)."""
    with _sorted_itl(tokens) as (n, batches):
        return sorted_distribution(batches, n, percentiles)


def itl_cdf(tokens: TokenSource, max_points: int) -> tuple[np.ndarray, np.ndarray]:
    """The ITL values' empirical CDF, (value ms, fraction <= value), at most ``max_points``
    points evenly spaced in rank, the first and last always kept (exact min and max); every
    value when there are no more than ``max_points``. Bounded memory, as above."""
    with _sorted_itl(tokens) as (n, batches):
        if n == 0:
            return np.zeros(0), np.zeros(0)
        if n > max_points:  # never all n ranks: 2 GB of them at 10^6 requests of 256 tokens
            ranks = np.unique(np.round(np.linspace(0, n - 1, max_points)).astype(np.int64))
        else:
            ranks = np.arange(n, dtype=np.int64)
        x = np.empty(ranks.size)
        seen = 0
        for values, counts in batches:
            ends = seen + np.cumsum(counts)
            inside = (ranks >= seen) & (ranks < ends[-1]) if ends.size else ranks < 0
            x[inside] = values[np.searchsorted(ends, ranks[inside], side="right")]
            seen = int(ends[-1]) if ends.size else seen
        return x, (ranks + 1) / n


_BY_REQUEST_SQL = """
SELECT request_id, v, w FROM (
    SELECT request_id, "index",
           (t_s - lag(t_s) OVER (PARTITION BY request_id ORDER BY "index"))
           / n_tokens * 1000.0::DOUBLE AS v,
           n_tokens AS w
    FROM tokens WHERE n_tokens >= 1
) WHERE v IS NOT NULL ORDER BY request_id, "index"
"""


def itl_by_request(tokens: TokenSource) -> dict[str, np.ndarray]:
    """Each request's ITL values (ms), in chunk order, a chunk of k tokens counted k times (the
    values the gate's statistics resample): read a batch at a time, so memory holds the values
    (8 bytes a token), never the chunk rows."""
    parts: dict[str, list[np.ndarray]] = {}
    with tokens.query() as con:
        relation = con.sql(_BY_REQUEST_SQL)
        read = getattr(relation, "to_arrow_reader", None) or relation.fetch_arrow_reader
        for batch in read(BATCH_ROWS):
            rid = batch.column(0).to_numpy(zero_copy_only=False)
            v = batch.column(1).to_numpy(zero_copy_only=False).astype(np.float64)
            w = batch.column(2).to_numpy(zero_copy_only=False).astype(np.int64)
            starts = np.flatnonzero(np.r_[True, rid[1:] != rid[:-1]])
            for a, b in zip(starts, np.r_[starts[1:], rid.size], strict=True):
                parts.setdefault(str(rid[a]), []).append(np.repeat(v[a:b], w[a:b]))
    return {rid: np.concatenate(chunks) for rid, chunks in parts.items()}
