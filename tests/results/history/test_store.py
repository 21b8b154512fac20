"""The history's store: rows from real run folders, idempotent adds, moved and vanished
folders, a rebuild from the row files alone, views over the folders' parquet, and several
processes adding to one history at once."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from results.folder.run_folder import RunFolderError
from results.history.query import missing_folders
from results.history.row import IDENTITY_COLUMNS, flatten_figures, run_row
from results.history.store import History
from results.history.target import ENV_VAR, choose_history, chosen_history, record_run
from tests.support.gate_fakes import write_fake_run
from tests.support.paths import REPO_ROOT, TEST_FIXTURES

OLD_RUN = TEST_FIXTURES / "run-folder-v0"


def test_a_row_holds_the_identity_and_every_figure_of_the_summary(tmp_path: Path) -> None:
    run = write_fake_run(tmp_path, seed=1)
    row = run_row(run)
    assert list(row)[: len(IDENTITY_COLUMNS)] == list(IDENTITY_COLUMNS)
    assert (row["scenario"], row["engine"], row["model"]) == ("synthetic", "fake", "tiny")
    assert row["git_commit"] == "abc123" and row["valid"] and row["usable"]
    summary = json.loads((run / "summary.json").read_text())
    assert row["throughput.output_tok_s"] == summary["throughput"]["output_tok_s"]
    assert row["ttft_ms.p99"] == summary["ttft_ms"]["p99"]
    # Derived from the document, not a list: a figure the summary gains becomes a column.
    assert flatten_figures({"a": {"b": 2, "c": [1], "d": "x", "e": True}}) == {"a.b": 2, "a.e": 1}


def test_adding_is_idempotent_and_a_moved_folder_is_updated(tmp_path: Path) -> None:
    history = History(tmp_path / "h" / "history.duckdb")
    run = write_fake_run(tmp_path / "runs", seed=2)
    assert history.add(run).status == "added"
    assert history.add(run).status == "unchanged"
    moved = shutil.move(run, tmp_path / "elsewhere")
    again = history.add(moved)
    assert (again.status, again.moved_from) == ("moved", str(run.resolve()))
    with history.reading() as con:
        assert con.execute("SELECT count(*), min(path) FROM runs").fetchone() == (1, str(moved))


def test_a_vanished_folder_is_kept_and_reported(tmp_path: Path) -> None:
    history = History(tmp_path / "history.duckdb")
    kept, gone = (write_fake_run(tmp_path / "runs", seed=s) for s in (3, 4))
    history.add(kept)
    history.add(gone)
    shutil.rmtree(gone)
    with history.reading() as con:
        assert missing_folders(con) == [(gone.name, str(gone.resolve()))]
        assert con.execute("SELECT count(*) FROM runs").fetchone() == (2,)
        # The views read the folders still there.
        assert con.execute("SELECT count(DISTINCT run_id) FROM requests").fetchone() == (1,)


def test_the_database_rebuilds_from_the_row_files(tmp_path: Path) -> None:
    history = History(tmp_path / "history.duckdb")
    for seed in (5, 6, 7):
        history.add(write_fake_run(tmp_path / "runs", seed=seed))
    history.path.unlink()
    with history.reading() as con:  # the next reader rebuilds it
        assert con.execute("SELECT count(*) FROM runs").fetchone() == (3,)
    history.path.write_bytes(b"not a database")
    with history.reading() as con:  # moved aside, and made again
        assert con.execute("SELECT count(*) FROM runs").fetchone() == (3,)
    assert len(list(tmp_path.glob("history.duckdb.broken-*"))) == 1
    assert history.rebuild() == 3


def test_views_join_the_folders_tables_to_their_runs(tmp_path: Path) -> None:
    history = History(tmp_path / "history.duckdb")
    history.add(OLD_RUN)
    with history.reading() as con:
        rows = con.execute("SELECT run_id, count(*) FROM steps GROUP BY run_id").fetchall()
        assert rows == [(run_row(OLD_RUN)["run_id"], 33)]
        ok = con.execute("SELECT count(*) FROM requests WHERE status = 'ok'").fetchone()[0]
        assert ok == con.execute('SELECT "counts.all.ok" FROM runs').fetchone()[0]


def test_a_folder_that_is_no_run_is_refused_in_one_line(tmp_path: Path) -> None:
    with pytest.raises(RunFolderError, match=r"holds no run\.json"):
        History(tmp_path / "history.duckdb").add(tmp_path)


def test_a_command_chooses_the_history_its_runs_add_themselves_to(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(ENV_VAR, raising=False)
    assert chosen_history(None) is None  # outside a command: no history
    run = write_fake_run(tmp_path / "runs", seed=8)
    assert record_run(run) == (None, None)
    assert choose_history(None, False, tmp_path / "runs") == tmp_path / "runs" / "history.duckdb"
    added, warning = record_run(run)
    assert warning is None and added is not None and added.status == "added"
    choose_history(None, True, tmp_path / "runs")
    assert chosen_history(tmp_path) is None and os.environ[ENV_VAR] == "off"
    # "off" in the variable: no history but one named by --history.
    assert choose_history(None, False, tmp_path / "runs") is None
    assert choose_history(tmp_path / "h.duckdb", False, tmp_path / "runs") == tmp_path / "h.duckdb"
    monkeypatch.setenv(ENV_VAR, str(tmp_path / "shared.duckdb"))
    assert choose_history(None, False, tmp_path / "runs") == tmp_path / "shared.duckdb"


_ADDER = """
import sys
from pathlib import Path
from results.history.store import History
history = History(sys.argv[1])
for folder in sys.argv[2:]:
    history.add(Path(folder))
"""


def test_several_processes_adding_at_once_lose_no_row(tmp_path: Path) -> None:
    runs = [write_fake_run(tmp_path / "runs", seed=s, requests=20) for s in range(12)]
    target = tmp_path / "shared" / "history.duckdb"
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    # Four writers, each with three runs of its own and three every writer adds.
    shares = [[*runs[3 * i : 3 * i + 3], *runs[9:]] for i in range(3)] + [runs[9:]]
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _ADDER, str(target), *map(str, share)],
            env=env,
            stderr=subprocess.PIPE,
            text=True,
        )
        for share in shares
    ]
    for proc in procs:
        _, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err
    history = History(target)
    with history.reading() as con:
        ids = sorted(r[0] for r in con.execute("SELECT run_id FROM runs").fetchall())
    assert ids == sorted(r.name for r in runs)
    assert len(list(history.rows_dir.glob("*.json"))) == 12
