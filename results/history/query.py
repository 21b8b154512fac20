"""Reading the history: runs by filter, and one metric's series over time.

Every reader filters the same way (:class:`Filters`): by scenario, engine, model, hardware (its
fingerprint, or any part of its label), since a time, and valid runs only unless asked. A
*series* is the runs of one scenario, engine, model and hardware, in time order: what a trend
plots and where change points are looked for (results.history.changes).
"""

from __future__ import annotations

import dataclasses
import difflib
import os
import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import duckdb
import pandas as pd

from results.history.row import IDENTITY_COLUMNS

__all__ = [
    "SERIES_KEYS",
    "Filters",
    "QueryError",
    "figure_columns",
    "list_runs",
    "metric_series",
    "missing_folders",
    "parse_since",
]

# What one series holds equal: change points are searched within, never across, these.
SERIES_KEYS: tuple[str, ...] = ("scenario", "engine", "model", "hardware")
_LIST_COLUMNS = (
    "started_utc",
    "run_id",
    "scenario",
    "engine",
    "engine_version",
    "model",
    "git_commit",
    "hardware_label",
    "valid",
    "usable",
    "path",
)
_RELATIVE = re.compile(r"^(\d+)\s*([dhm])$")


class QueryError(ValueError):
    """A filter or metric the history cannot answer; one line naming it and the fix."""


def parse_since(text: str | None) -> datetime | None:
    """``--since``: an ISO 8601 date or time (UTC when it names no zone), or an age such as
    ``7d``, ``12h``, ``30m``; as a naive UTC time. Raises QueryError for anything else."""
    if text is None:
        return None
    if match := _RELATIVE.match(text.strip()):
        unit = {"d": "days", "h": "hours", "m": "minutes"}[match.group(2)]
        return datetime.now(UTC).replace(tzinfo=None) - timedelta(**{unit: int(match.group(1))})
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        raise QueryError(
            f"--since {text!r}: give an ISO date or time (2026-12-01, 2026-12-01T04:00) "
            "or an age (7d, 12h, 30m)"
        ) from None
    return when.astimezone(UTC).replace(tzinfo=None) if when.tzinfo else when


@dataclass(frozen=True)
class Filters:
    """Which runs a reader takes (module docstring); None: any."""

    scenario: str | None = None
    engine: str | None = None
    model: str | None = None
    hardware: str | None = None
    since: datetime | None = None
    include_invalid: bool = False

    def where(self) -> tuple[str, list[Any]]:
        """The SQL condition on table ``runs`` and its parameters."""
        terms, params = ["TRUE"], []
        for column in ("scenario", "engine", "model"):
            value = getattr(self, column)
            if value is not None:
                terms.append(f"{column} = ?")
                params.append(value)
        if self.hardware is not None:
            terms.append("(hardware LIKE ? OR hardware_label ILIKE ?)")
            params += [f"{self.hardware}%", f"%{self.hardware}%"]
        if self.since is not None:
            terms.append("started_utc >= ?")
            params.append(self.since)
        if not self.include_invalid:
            terms.append("valid AND usable")
        return " AND ".join(terms), params


def figure_columns(con: duckdb.DuckDBPyConnection) -> list[str]:
    """The figures the history holds (every column of ``runs`` after the identity)."""
    names = [
        r[0]
        for r in con.execute(
            "SELECT column_name FROM duckdb_columns() WHERE table_name = 'runs' "
            "ORDER BY column_index"
        ).fetchall()
    ]
    return [n for n in names if n not in IDENTITY_COLUMNS]


def _check_metric(con: duckdb.DuckDBPyConnection, metric: str) -> None:
    figures = figure_columns(con)
    if metric in figures:
        return
    close = difflib.get_close_matches(metric, figures, n=3, cutoff=0.5)
    hint = f"; did you mean {', '.join(close)}?" if close else "; `bench history sql` lists them"
    raise QueryError(f"metric {metric!r}: no run in the history has this figure{hint}")


def missing_folders(con: duckdb.DuckDBPyConnection) -> list[tuple[str, str]]:
    """(run_id, path) of every indexed run whose folder is gone (moved or deleted): kept,
    with its figures, and reported."""
    rows = con.execute("SELECT run_id, path FROM runs ORDER BY started_utc, run_id").fetchall()
    return [(run_id, path) for run_id, path in rows if not os.path.isdir(path)]


def list_runs(
    con: duckdb.DuckDBPyConnection, filters: Filters, metrics: tuple[str, ...] = ()
) -> pd.DataFrame:
    """The runs ``filters`` take, oldest first: who, what, where, and ``metrics``' values."""
    for metric in metrics:
        _check_metric(con, metric)
    where, params = filters.where()
    columns = ", ".join([*_LIST_COLUMNS, *(f'"{m}"' for m in metrics)])
    query = f"SELECT {columns} FROM runs WHERE {where} ORDER BY started_utc, run_id"
    return con.execute(query, params).df()


def hidden_runs(con: duckdb.DuckDBPyConnection, filters: Filters) -> int:
    """How many runs ``filters`` leave out only for being not valid or not usable (busy,
    throttled, interrupted, their engine dead, too many failures): 0 with include_invalid."""
    if filters.include_invalid:
        return 0
    every, params = dataclasses.replace(filters, include_invalid=True).where()
    row = con.execute(f"SELECT count(*) FROM runs WHERE {every} AND NOT (valid AND usable)",
                      params).fetchone()  # fmt: skip
    return int(row[0]) if row else 0


def metric_series(con: duckdb.DuckDBPyConnection, metric: str, filters: Filters) -> pd.DataFrame:
    """One row per run that has ``metric``, in time order, with every column a trend groups by
    or links to: the series keys, engine_version, git_commit, hardware_label, valid, usable,
    path, and ``value``. Invalid runs come too (``valid``/``usable`` false) unless filtered.

    Raises QueryError naming a metric no run has, with the closest names.
    """
    _check_metric(con, metric)
    where, params = filters.where()
    query = (
        "SELECT run_key, run_id, path, started_utc, scenario, engine, model, hardware, "
        f'hardware_label, engine_version, git_commit, valid, usable, "{metric}" AS value '
        f'FROM runs WHERE {where} AND "{metric}" IS NOT NULL ORDER BY started_utc, run_id'
    )
    return con.execute(query, params).df()
