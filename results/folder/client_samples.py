"""The client table's rows as the load generator collects them (client.parquet).

The client self-check (loadgen.drivers.selfcheck) and every worker process fill one of these; the
run folder's writer (results.figures.client_check.write_client_table) turns it into the table. Kept
free of pandas and pyarrow so that load-generating processes stay light.

A run adds a row about 100 times a second (the event loop's lag at every 10 ms tick) and once per
request (its schedule lag), so the rows grow with the run's length: they are held as typed
arrays, 21 bytes a row (a float64 time and value, an int32 worker, a one-byte code of the
series name), not as lists of Python objects (about 80 bytes a row); an hour of a run is then
about 8 MB.
"""

from __future__ import annotations

from array import array
from typing import Any

__all__ = ["CLIENT_COLUMNS", "CLIENT_SERIES", "ClientSamples"]

# The series names a monitor writes (the client table's ``name`` column).
CLIENT_SERIES: tuple[str, ...] = ("schedule_lag_s", "loop_lag_s", "cpu_s")
# The client table's columns and their Python types, in order (its parquet schema,
# results.figures.client_check.CLIENT_SCHEMA, is made of these).
CLIENT_COLUMNS: dict[str, type] = {"t_s": float, "worker": int, "name": str, "value": float}


class ClientSamples:
    """Columns of client-table rows: ``t_s`` (run seconds), ``worker``, ``name``, ``value``.

    ``t_s``, ``worker`` and ``value`` are arrays (iterable like lists); ``name`` is the names,
    one per row, made from their codes when asked for.
    """

    __slots__ = ("_codes", "_names", "t_s", "value", "worker")

    def __init__(self) -> None:
        self.t_s = array("d")
        self.worker = array("i")
        self.value = array("d")
        self._codes = array("B")
        self._names: list[str] = []

    def _code(self, name: str) -> int:
        try:
            return self._names.index(name)  # a handful of series: a scan beats a dict's upkeep
        except ValueError:
            if len(self._names) == 256:
                raise ValueError(f"client samples: more than 256 series names ({name!r})") from None
            self._names.append(name)
            return len(self._names) - 1

    def add(self, t_s: float, worker: int, name: str, value: float) -> None:
        self.t_s.append(t_s)
        self.worker.append(worker)
        self._codes.append(self._code(name))
        self.value.append(value)

    def extend(self, other: ClientSamples) -> None:
        """Append every row of ``other`` (e.g. a worker process's samples)."""
        self.t_s.extend(other.t_s)
        self.worker.extend(other.worker)
        recode = [self._code(name) for name in other._names]
        self._codes.extend(array("B", (recode[c] for c in other._codes)))
        self.value.extend(other.value)

    @property
    def name(self) -> list[str]:
        """Each row's series name."""
        return [self._names[c] for c in self._codes]

    def __len__(self) -> int:
        return len(self.t_s)

    def columns(self) -> dict[str, list[Any]]:
        """The columns by name (:data:`CLIENT_COLUMNS`' order), as lists (for an Arrow table,
        or a message to the Locust master)."""
        lists = {"t_s": self.t_s.tolist(), "worker": self.worker.tolist(), "name": self.name,
                 "value": self.value.tolist()}  # fmt: skip
        return {column: lists[column] for column in CLIENT_COLUMNS}
