"""The history's files: one row file per run, and the DuckDB file that indexes them.

For a history at ``runs/history.duckdb``::

    runs/.history.rows/<run_key>.json         one run's row (results.history.row), written once
    runs/.history.rows/collection-<key>.json  a --repeat group, sweep, ablation or A/B session
    runs/history.duckdb                       the index: table ``runs`` (one row per run),
                                              ``collections`` and ``collection_runs``
    runs/history.duckdb.lock                  the writers' lock (flock)

Why two layers: several processes (CI machines on one volume) add at once. Each writes its own
row file, whole or not at all (perfmodel.files.atomic_write, a unique name per run), before it
touches the database, so no row is ever lost to a race; the database is then updated under an
exclusive lock, and every writer first copies in the row files the database lacks. The database
is an index: delete it (or let it break) and the next use rebuilds it from the row files, and
`bench history add` rebuilds the row files from the run folders, the source of truth.

Readers take the lock shared and open the database read-only; the run folders' tables are
readable as temporary views (:data:`FOLDER_VIEWS`) over the parquet of the folders still there.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb

from perfmodel.files import write_json
from results.figures.client_check import CLIENT_PARQUET
from results.folder.run_folder import (
    REQUESTS_PARQUET,
    SAMPLES_PARQUET,
    STEPS_PARQUET,
    TOKENS_PARQUET,
)
from results.history.row import IDENTITY_COLUMNS, run_row

__all__ = [
    "FOLDER_VIEWS",
    "Added",
    "History",
    "HistoryError",
]

ROW_FORMAT = "llm-perf-lab/history-row"
COLLECTION_FORMAT = "llm-perf-lab/history-collection"
# A view per run-folder table: its name and file. Each row carries the run's run_key and run_id.
FOLDER_VIEWS: dict[str, str] = {
    "requests": REQUESTS_PARQUET,
    "tokens": TOKENS_PARQUET,
    "steps": STEPS_PARQUET,
    "samples": SAMPLES_PARQUET,
    "client": CLIENT_PARQUET,
}
# How long a writer waits for another's lock before giving up, seconds.
LOCK_TIMEOUT_S = 120.0
_COLLECTION_TABLES = (
    "CREATE TABLE IF NOT EXISTS collections (key VARCHAR PRIMARY KEY, kind VARCHAR, "
    "path VARCHAR, name VARCHAR)",
    "CREATE TABLE IF NOT EXISTS collection_runs (collection_key VARCHAR, run_key VARCHAR, "
    "PRIMARY KEY (collection_key, run_key))",
)


class HistoryError(RuntimeError):
    """The history cannot be used: a lock not obtained, a folder not readable; one line."""


@dataclass(frozen=True)
class Added:
    """What adding one run did: ``status`` added, unchanged or moved (``moved_from`` the path
    it was indexed at before)."""

    run_key: str
    run_id: str
    path: str
    status: str
    moved_from: str | None = None


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


class History:
    """One history: the DuckDB file at ``path`` and its row files (module docstring)."""

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        # Hidden, so that a shell's runs/*/ (bench gate runs/*/) still names run folders only.
        self.rows_dir = self.path.with_name(f".{self.path.stem}.rows")
        self.lock_path = self.path.with_name(self.path.name + ".lock")

    # -- locking and connections ------------------------------------------------------------

    @contextlib.contextmanager
    def _locked(self, exclusive: bool) -> Iterator[None]:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        mode = fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH
        with open(self.lock_path, "a+") as handle:
            deadline = time.monotonic() + LOCK_TIMEOUT_S
            while True:
                try:
                    fcntl.flock(handle, mode | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() > deadline:
                        raise HistoryError(
                            f"{self.path}: another process held its lock for {LOCK_TIMEOUT_S:.0f}"
                            f" s; the row files under {self.rows_dir} keep every run meanwhile"
                        ) from None
                    time.sleep(0.05)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    def _open_for_writing(self) -> duckdb.DuckDBPyConnection:
        """The database, opened for writing (the caller holds the exclusive lock); a file that
        is no database is moved aside and rebuilt from the row files."""
        try:
            con = duckdb.connect(str(self.path))
        except duckdb.IOException as exc:
            # Only a file that is no database is replaced; a lock taken outside bench (the duckdb
            # shell holding the file) is reported, the file left alone.
            if not self.path.is_file() or "not a valid DuckDB database" not in str(exc):
                raise HistoryError(f"{self.path}: cannot be opened: {exc}") from None
            broken = self.path.with_name(f"{self.path.name}.broken-{int(time.time())}")
            self.path.rename(broken)
            con = duckdb.connect(str(self.path))
        con.execute(
            "CREATE TABLE IF NOT EXISTS runs ("
            + ", ".join(f"{_quote(n)} {t}" for n, t in IDENTITY_COLUMNS.items())
            + ", PRIMARY KEY (run_key))"
        )
        for statement in _COLLECTION_TABLES:
            con.execute(statement)
        return con

    # -- writing -------------------------------------------------------------------------------

    def _row_file(self, key: str) -> Path:
        return self.rows_dir / f"{key}.json"

    def _upsert(self, con: duckdb.DuckDBPyConnection, row: dict[str, Any]) -> None:
        have = {
            r[0].lower()
            for r in con.execute(
                "SELECT column_name FROM duckdb_columns() WHERE table_name = 'runs'"
            ).fetchall()
        }
        for name in row:
            if name.lower() not in have:
                con.execute(f"ALTER TABLE runs ADD COLUMN {_quote(name)} DOUBLE")
                have.add(name.lower())
        names = ", ".join(_quote(n) for n in row)
        marks = ", ".join("?" for _ in row)
        con.execute(f"INSERT OR REPLACE INTO runs ({names}) VALUES ({marks})", list(row.values()))

    def _sync(self, con: duckdb.DuckDBPyConnection) -> int:
        """Copy into the database every row file it lacks; returns how many."""
        if not self.rows_dir.is_dir():
            return 0
        have = {r[0] for r in con.execute("SELECT run_key FROM runs").fetchall()}
        have_c = {r[0] for r in con.execute("SELECT key FROM collections").fetchall()}
        copied = 0
        for file in sorted(self.rows_dir.glob("*.json")):
            key = file.stem.removeprefix("collection-")
            if key in (have_c if file.stem.startswith("collection-") else have):
                continue
            document = json.loads(file.read_text(encoding="utf-8"))
            if document.get("format") == ROW_FORMAT:
                self._upsert(con, document["row"])
            elif document.get("format") == COLLECTION_FORMAT:
                self._insert_collection(con, document["collection"])
            copied += 1
        return copied

    def add(self, folder: Path | str) -> Added:
        """Index the run folder ``folder``: its row file, then the database. Idempotent: a run
        already indexed at this path is ``unchanged``; at another path it is ``moved`` there.

        Raises RunFolderError for a folder that is no run, HistoryError for a lock not obtained.
        """
        row = run_row(Path(folder))
        key = row["run_key"]
        file = self._row_file(key)
        before = None
        if file.is_file():
            before = json.loads(file.read_text(encoding="utf-8"))["row"]
        if before != row:
            write_json(file, {"format": ROW_FORMAT, "format_version": 1, "row": row})
        with self._locked(exclusive=True):
            con = self._open_for_writing()
            try:
                old = con.execute("SELECT path FROM runs WHERE run_key = ?", [key]).fetchone()
                self._sync(con)
                self._upsert(con, row)
            finally:
                con.close()
        was = old[0] if old else (before or {}).get("path")
        status = "added" if was is None else "unchanged" if was == row["path"] else "moved"
        return Added(key, row["run_id"], row["path"], status, was if status == "moved" else None)

    def _insert_collection(self, con: duckdb.DuckDBPyConnection, c: dict[str, Any]) -> None:
        con.execute(
            "INSERT OR REPLACE INTO collections VALUES (?, ?, ?, ?)",
            [c["key"], c["kind"], c["path"], c["name"]],
        )
        con.execute("DELETE FROM collection_runs WHERE collection_key = ?", [c["key"]])
        for run in c["run_keys"]:
            con.execute("INSERT INTO collection_runs VALUES (?, ?)", [c["key"], run])

    def add_collection(self, kind: str, folder: Path | str, runs: Sequence[Added]) -> str:
        """Index a folder of runs (``kind``: group, sweep, ablation, ab) holding ``runs``, each
        already added; its key is its kind and folder name, so a moved folder keeps it."""
        folder = Path(folder).resolve()
        key = f"{kind}-{folder.name}"
        body = {
            "key": key,
            "kind": kind,
            "path": str(folder),
            "name": folder.name,
            "run_keys": sorted({r.run_key for r in runs}),
        }
        write_json(
            self._row_file(f"collection-{key}"),
            {"format": COLLECTION_FORMAT, "format_version": 1, "collection": body},
        )
        with self._locked(exclusive=True):
            con = self._open_for_writing()
            try:
                self._sync(con)
                self._insert_collection(con, body)
            finally:
                con.close()
        return key

    def rebuild(self) -> int:
        """Make the database again from the row files alone; returns the runs it holds."""
        with self._locked(exclusive=True):
            with contextlib.suppress(FileNotFoundError):
                self.path.unlink()
            with contextlib.suppress(FileNotFoundError):
                self.path.with_name(self.path.name + ".wal").unlink()
            con = self._open_for_writing()
            try:
                self._sync(con)
                return int(con.execute("SELECT count(*) FROM runs").fetchone()[0])
            finally:
                con.close()

    # -- reading -------------------------------------------------------------------------------

    @contextlib.contextmanager
    def reading(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """A read-only connection with the folder views (:data:`FOLDER_VIEWS`) over the run
        folders still present; the database is first brought up to the row files."""
        with self._locked(exclusive=True):
            con = self._open_for_writing()
            try:
                self._sync(con)
            finally:
                con.close()
        with self._locked(exclusive=False):
            con = duckdb.connect(str(self.path), read_only=True)
            try:
                self._folder_views(con)
                yield con
            finally:
                con.close()

    def _folder_views(self, con: duckdb.DuckDBPyConnection) -> None:
        paths = [r[0] for r in con.execute("SELECT path FROM runs").fetchall()]
        for view, name in FOLDER_VIEWS.items():
            files = [f"{p}/{name}" for p in paths if os.path.isfile(f"{p}/{name}")]
            if not files:
                continue
            listed = ", ".join("'" + f.replace("'", "''") + "'" for f in files)
            con.execute(
                f"CREATE TEMP VIEW {view} AS SELECT h.run_key, h.run_id, t.* EXCLUDE (filename) "
                f"FROM read_parquet([{listed}], filename = true, union_by_name = true) t "
                f"JOIN runs h ON t.filename = h.path || '/{name}'"
            )
