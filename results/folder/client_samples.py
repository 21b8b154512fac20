"""The client table's rows as the load generator collects them (client.parquet).

The client self-check (loadgen.drivers.selfcheck) and every worker process fill one of these; the
run folder's writer (results.figures.client_check.write_client_table) turns it into the table. Kept
free of
pandas and pyarrow so that load-generating processes stay light.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields

__all__ = ["CLIENT_SERIES", "ClientSamples"]

# The series names a monitor writes (the client table's ``name`` column).
CLIENT_SERIES: tuple[str, ...] = ("schedule_lag_s", "loop_lag_s", "cpu_s")


@dataclass
class ClientSamples:
    """Columns of client-table rows: ``t_s`` (run seconds), ``worker``, ``name``, ``value``."""

    t_s: list[float] = field(default_factory=list)
    worker: list[int] = field(default_factory=list)
    name: list[str] = field(default_factory=list)
    value: list[float] = field(default_factory=list)

    def add(self, t_s: float, worker: int, name: str, value: float) -> None:
        self.t_s.append(t_s)
        self.worker.append(worker)
        self.name.append(name)
        self.value.append(value)

    def extend(self, other: ClientSamples) -> None:
        """Append every row of ``other`` (e.g. a worker process's samples)."""
        self.t_s += other.t_s
        self.worker += other.worker
        self.name += other.name
        self.value += other.value

    def __len__(self) -> int:
        return len(self.t_s)

    def columns(self) -> dict[str, list]:
        """The columns by name, in the fields' order (for a DataFrame or an Arrow table; the
        client table's schema, results.figures.client_check.CLIENT_SCHEMA, is these fields')."""
        return {f.name: getattr(self, f.name) for f in fields(self)}
