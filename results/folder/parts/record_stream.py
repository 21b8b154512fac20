"""Request and chunk records streamed into a run folder while the run goes on.

:class:`RecordStream` takes each finished RequestRecord as it comes and appends it, with its
chunks, to the folder in parts (results.folder.parts.writer): every ``flush_s`` seconds (a
timer thread, so a quiet spell flushes too) or every ``flush_rows`` rows (requests plus
chunks), whichever comes first, it writes one part of tokens and one of requests
(``tokens.parts/part-NNNNNN.parquet``, ``requests.parts/...``). Once a record's chunks are on
disk the record lets go of them (``chunks`` emptied): the caller may keep the slim record,
never the chunks.

A killed run therefore keeps every record that finished more than ``flush_s`` seconds (plus
the time one part takes to write) before the kill; it loses the records of its last flush
interval and the requests in flight, which had no record yet. :meth:`RecordStream.close` (a
run that ends, or is interrupted by SIGINT/SIGTERM, which still ends it) writes the rest; the
folder's writer then seals the parts into requests.parquet and tokens.parquet
(results.folder.parts.writer.seal_parts), and results.folder.run_folder.load_run reads the
parts of a folder that was never sealed.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterable
from pathlib import Path

from results.folder.parts.writer import (
    FLUSH_ROWS,
    FLUSH_S,
    REQUESTS_PARTS,
    TOKENS_PARTS,
    PartWriter,
)
from results.folder.records import RequestRecord
from results.folder.tables import requests_table, tokens_table

__all__ = ["RecordStream"]


class RecordStream:
    """Finished records appended to a run folder in parts (module docstring); thread-safe.

    ``flush_s`` (seconds) and ``flush_rows`` (requests plus chunks) bound what a kill can lose.
    """

    def __init__(
        self, folder: Path, flush_s: float = FLUSH_S, flush_rows: int = FLUSH_ROWS
    ) -> None:
        if not flush_s > 0 or flush_rows < 1:
            raise ValueError(f"flush_s must be > 0 and flush_rows >= 1: {flush_s}, {flush_rows}")
        self.folder = Path(folder)
        self.flush_s = flush_s
        self.flush_rows = flush_rows
        self.requests_written = 0
        self.chunks_written = 0
        # Tokens first: a kill between the two leaves chunks of unlisted requests, which no
        # figure counts, rather than requests whose chunks are missing.
        self._parts = PartWriter(self.folder / TOKENS_PARTS, self.folder / REQUESTS_PARTS)
        self._buffer: list[RequestRecord] = []
        self._rows = 0
        self._oldest: float | None = None
        self._lock = threading.Lock()
        self._closed = threading.Event()
        self._timer = threading.Thread(target=self._tick, name="record-stream", daemon=True)
        self._timer.start()

    @property
    def parts_written(self) -> int:
        """Parts of each table written so far."""
        return self._parts.parts_written

    def add(self, record: RequestRecord) -> None:
        """Take one finished RequestRecord (and its chunks); flush when a bound is reached."""
        with self._lock:
            if self._closed.is_set():
                raise RuntimeError(f"{self.folder}: the record stream is closed")
            self._buffer.append(record)
            self._rows += 1 + len(record.chunks)
            if self._oldest is None:
                self._oldest = time.monotonic()
            if self._rows >= self.flush_rows:
                self._flush_locked()

    def extend(self, records: Iterable[RequestRecord]) -> None:
        for record in records:
            self.add(record)

    def flush(self) -> None:
        """Write what is buffered now, as one part of each table."""
        with self._lock:
            self._flush_locked()

    def _tick(self) -> None:
        while not self._closed.wait(self.flush_s / 4):
            with self._lock:
                due = self._oldest is not None and time.monotonic() - self._oldest >= self.flush_s
                if due and not self._closed.is_set():
                    self._flush_locked()

    def _flush_locked(self) -> None:
        if not self._buffer:
            return
        records, self._buffer, self._rows, self._oldest = self._buffer, [], 0, None
        tokens = tokens_table(records)
        self._parts.write(tokens, requests_table(records))
        self.requests_written += len(records)
        self.chunks_written += tokens.num_rows
        for record in records:
            record.chunks = []  # on disk now; the caller's record need not hold them

    def close(self) -> None:
        """Flush the rest and stop the timer; the folder's writer then seals the parts
        (results.folder.run_folder.RunFolder.seal_records)."""
        with self._lock:
            if self._closed.is_set():
                return
            self._flush_locked()
            self._closed.set()
        with contextlib.suppress(RuntimeError):
            self._timer.join(timeout=5.0)
