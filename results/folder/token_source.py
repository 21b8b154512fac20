"""tokens.parquet where it lies: the chunk rows a summary reads without loading them.

A long run's chunk rows outnumber its requests by the output length (256 to one at 256 tokens):
5 million rows at 20,000 requests, 92 million in an hour at 100 requests per second. The
summary's figures over them (ITL, the tokens between two energy readings) are computed by DuckDB
straight from the parquet files, in bounded memory: :data:`MEMORY_LIMIT` bytes, spilling what
does not fit (a sort, an aggregate) to a temporary folder that is removed afterwards. A
:class:`TokenSource` is that table, wherever it is: the folder's files (tokens.parquet, or the
parts of a run killed before it sealed them, results.folder.parts.record_stream), or a DataFrame a
caller built, with an optional set of requests it is cut to (one endpoint's, results.figures.fleet).
"""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import duckdb
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

__all__ = ["MEMORY_LIMIT", "TokenSource", "token_source"]

# What DuckDB may hold in memory for one query; the rest spills to disk.
MEMORY_LIMIT = "1GB"
THREADS = 2


@dataclass(frozen=True)
class TokenSource:
    """tokens.parquet's rows: ``files`` (parquet, in order) or ``frame``; ``request_ids``, when
    set, cuts them to those requests."""

    files: tuple[Path, ...] = ()
    frame: pd.DataFrame | None = None
    request_ids: frozenset[str] | None = None

    def only(self, request_ids: Iterable[str]) -> TokenSource:
        """The same rows cut to ``request_ids`` (within any cut already made)."""
        ids = frozenset(request_ids)
        if self.request_ids is not None:
            ids &= self.request_ids
        return TokenSource(self.files, self.frame, ids)

    def columns(self) -> list[str]:
        """The table's column names (a folder's: its first file's schema)."""
        if self.frame is not None:
            return list(self.frame.columns)
        return pq.read_schema(self.files[0]).names if self.files else []

    def load(self) -> pd.DataFrame:
        """Every row in memory (for readers that draw them; never the summary)."""
        if self.frame is not None:
            frame = self.frame
        else:
            frame = pa.concat_tables([pq.read_table(f) for f in self.files]).to_pandas()
        if self.request_ids is not None:
            frame = frame[frame["request_id"].isin(self.request_ids)]
        return frame

    @contextlib.contextmanager
    def query(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """A DuckDB connection in which ``tokens`` is this table (bounded memory, spilling to
        a temporary folder removed on exit)."""
        with tempfile.TemporaryDirectory(prefix="tokens-") as spill:
            con = duckdb.connect(config={"memory_limit": MEMORY_LIMIT, "threads": THREADS})
            try:
                con.execute(f"SET temp_directory = '{spill}'")
                con.execute("SET preserve_insertion_order = false")
                if self.frame is not None:
                    con.register("_frame", self.frame)
                    source = "SELECT * FROM _frame"
                elif self.files:
                    paths = ", ".join(f"'{p}'" for p in self.files)
                    source = f"SELECT * FROM read_parquet([{paths}], union_by_name = true)"
                else:
                    source = (
                        'SELECT NULL::VARCHAR AS request_id, NULL::BIGINT AS "index", '
                        "NULL::DOUBLE AS t_s, NULL::BIGINT AS n_tokens WHERE false"
                    )
                if self.request_ids is not None:
                    ids = pa.table({"request_id": pa.array(sorted(self.request_ids), pa.string())})
                    con.register("_ids", ids)
                    # An empty frame gives its columns no type: compare as text.
                    source += " WHERE CAST(request_id AS VARCHAR) IN (SELECT request_id FROM _ids)"
                con.execute(f"CREATE VIEW tokens AS {source}")
                yield con
            finally:
                con.close()

    def batches(self, columns: Sequence[str], rows: int = 1 << 20) -> Iterator[pa.RecordBatch]:
        """The rows' ``columns``, a batch of at most ``rows`` at a time (bounded memory)."""
        with self.query() as con:
            names = ", ".join(f'"{c}"' for c in columns)
            relation = con.sql(f"SELECT {names} FROM tokens")
            read = getattr(relation, "to_arrow_reader", None) or relation.fetch_arrow_reader
            yield from read(rows)

    def tokens_between(self, t_a: float, t_b: float) -> int:
        """Output tokens of the chunks that arrived in (t_a, t_b] (run seconds)."""
        with self.query() as con:
            ((total,),) = con.execute(
                "SELECT coalesce(sum(n_tokens), 0)::BIGINT FROM tokens WHERE t_s > ? AND t_s <= ?",
                [t_a, t_b],
            ).fetchall()
        return int(total)

    def tokens_in_windows(self, edges: Sequence[float]) -> list[int]:
        """Output tokens of the chunks in each window (edges[i], edges[i + 1]] (run seconds,
        ascending), as :meth:`tokens_between` counts them, in one pass over the rows."""
        if len(edges) < 2:
            return []
        windows = pa.table({"i": pa.array(range(len(edges) - 1), pa.int64()),
                            "lo": pa.array(edges[:-1], pa.float64()),
                            "hi": pa.array(edges[1:], pa.float64())})  # fmt: skip
        with self.query() as con:
            con.register("_windows", windows)
            rows = con.execute(
                "SELECT w.i, coalesce(sum(t.n_tokens), 0)::BIGINT FROM tokens t "
                "JOIN _windows w ON t.t_s > w.lo AND t.t_s <= w.hi GROUP BY w.i"
            ).fetchall()
        counts = [0] * (len(edges) - 1)
        for i, total in rows:
            counts[int(i)] = int(total)
        return counts


def token_source(tokens: pd.DataFrame | TokenSource) -> TokenSource:
    """``tokens`` as a TokenSource (a DataFrame is wrapped)."""
    return tokens if isinstance(tokens, TokenSource) else TokenSource(frame=tokens)
