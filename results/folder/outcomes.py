"""What became of each request, read back from a run folder once its records are sealed.

A run whose records are streamed to disk (results.folder.parts.record_stream) keeps none in memory:
what the end of the run needs of them (how many there are, which failed or were cut, and when:
bench.run.end.interrupt, bench.run.launch.engine_watch) it reads back from requests.parquet,
four columns, one row group at a time, as :class:`RequestOutcome` rows, which hold no text but
an error's and none of the request's chunks.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import pyarrow.parquet as pq

from results.folder.run_folder import REQUESTS_PARQUET

__all__ = ["OUTCOME_COLUMNS", "Outcome", "RequestOutcome", "read_outcomes"]

# requests.parquet's columns (results.folder.records.RequestRecord) that an outcome holds.
OUTCOME_COLUMNS = ("status", "error", "sent_s", "done_s")


class Outcome(Protocol):
    """What the end of a run reads of a request: a RequestRecord or a RequestOutcome."""

    @property
    def status(self) -> str: ...

    @property
    def error(self) -> str | None: ...

    @property
    def sent_s(self) -> float: ...

    @property
    def done_s(self) -> float | None: ...


@dataclass(frozen=True, slots=True)
class RequestOutcome:
    """One row of requests.parquet's :data:`OUTCOME_COLUMNS`; times in run seconds."""

    status: str
    error: str | None
    sent_s: float
    done_s: float | None


def read_outcomes(folder: Path) -> list[RequestOutcome]:
    """Every request of ``folder``'s requests.parquet, in its order, as outcomes."""
    found: list[RequestOutcome] = []
    parquet = pq.ParquetFile(Path(folder) / REQUESTS_PARQUET)
    for group in range(parquet.num_row_groups):
        table = parquet.read_row_group(group, columns=list(OUTCOME_COLUMNS))
        columns = [table.column(name).to_pylist() for name in OUTCOME_COLUMNS]
        found.extend(RequestOutcome(*row) for row in zip(*columns, strict=True))
    return found
