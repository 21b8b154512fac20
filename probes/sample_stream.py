"""The probes' samples streamed into the run folder as they are taken, by the process taking them.

A run that held its readings until the end would grow with its length and lose all of them to a
SIGKILL. :class:`SampleStream` takes, every ``flush_s`` seconds (a timer thread), the readings
each sampler thread of a probe session took since the last flush
(probes.sampler.SampleBuffer.take) and writes them as one part, ``part-NNNNNN.parquet`` in the
parts folder it is given (the run folder's ``samples.parts``), through the one writer of parts
(results.folder.parts.writer.PartWriter), so a part is on disk whole or not at all. The
readings are on the probes' clock (t_ns, perf_counter_ns), with the index of the sampler that
took each (results.folder.table_columns.SAMPLE_PART_SAMPLER): the probes start before the
run's clock does, and results.folder.parts.sample_parts puts them on it when it
seals the parts into samples.parquet (or reads a killed run's).

Memory holds the readings of one flush interval (and, while the disk refuses a part, those not
yet written: retried at each flush, the failures counted). Light on purpose: the probe process
imports pyarrow for this, never pandas.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from perfmodel.files import JSONObject
from probes.sampler import SamplerThread
from results.folder.parts.writer import PartWriter
from results.folder.table_columns import SAMPLE_PART_SAMPLER

__all__ = ["SampleStream"]


class SampleStream:
    """The readings of ``threads`` appended to the parts folder ``parts`` (module docstring).

    ``flush_s``: seconds between two parts, the most a kill can lose.
    """

    def __init__(self, threads: Sequence[SamplerThread], parts: Path, flush_s: float) -> None:
        if not flush_s > 0:
            raise ValueError(f"flush_s must be > 0 seconds, got {flush_s}")
        self.threads = list(threads)
        self.parts = Path(parts)
        self.flush_s = flush_s
        self._writer = PartWriter(self.parts)
        self.errors = 0
        self.first_error: str | None = None
        self._unwritten: list[pa.Table] = []
        self._lock = threading.Lock()
        self._closed = threading.Event()
        self._timer = threading.Thread(target=self._tick, name="sample-stream", daemon=True)

    def start(self) -> None:
        self._timer.start()

    def _tick(self) -> None:
        while not self._closed.wait(self.flush_s):
            self.flush()

    def flush(self) -> None:
        """Write every reading taken since the last flush as one part (none: no part)."""
        with self._lock:
            for index, thread in enumerate(self.threads):
                t_ns, value, source, name, labels = thread.buffer.take()
                if t_ns:
                    columns: dict[str, Any] = {
                        "t_ns": np.frombuffer(t_ns, dtype=np.int64),
                        "source": pa.array(source, pa.string()),
                        "name": pa.array(name, pa.string()),
                        "value": np.frombuffer(value, dtype=np.float64),
                        "labels": pa.array(labels, pa.string()),
                        SAMPLE_PART_SAMPLER: np.full(len(t_ns), index, dtype=np.int32),
                    }
                    self._unwritten.append(pa.table(columns))
            if not self._unwritten:
                return
            part = pa.concat_tables(self._unwritten)
            try:
                self._writer.write(part)
            except OSError as exc:  # a full or failing disk: kept, and tried again next flush
                self.errors += 1
                self.first_error = self.first_error or f"{type(exc).__name__}: {exc}"
                self._unwritten = [part]
                return
            self._unwritten = []

    @property
    def parts_written(self) -> int:
        return self._writer.parts_written

    @property
    def samples_written(self) -> int:
        return self._writer.rows_written

    def close(self) -> None:
        """Stop the timer and write what is left; call once the sampler threads stopped."""
        self._closed.set()
        with contextlib.suppress(RuntimeError):  # never started
            self._timer.join(timeout=self.flush_s + 10.0)
        self.flush()

    def report(self) -> JSONObject:
        """What run.json's "probes" says of the stream."""
        return {
            "flush_s": self.flush_s,
            "parts": self.parts_written,
            "samples": self.samples_written,
            "unwritten": sum(t.num_rows for t in self._unwritten),
            "errors": self.errors,
            "first_error": self.first_error,
        }
