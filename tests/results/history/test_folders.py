"""Which runs a folder of runs holds (results/history/folders.py)."""

from __future__ import annotations

import json
from pathlib import Path

from results.folder.folder_kinds import FOLDER_FILES
from results.history.folders import collection_runs
from tests.support.gate_fakes import write_fake_run


def test_a_documents_long_notes_and_odd_strings_name_no_run(tmp_path: Path) -> None:
    """An A/B's ab.json holds notes of over 255 characters; every string is tried as a folder
    name, and at 2301656 such a note raised OSError (File name too long) in `bench export`,
    `bench history add` and the hint an A/B prints."""
    session = tmp_path / "ab-session"
    session.mkdir()
    run = write_fake_run(tmp_path / "runs", seed=1, requests=4)
    document = {"runs": [str(run)], "note": "busy " * 80, "odd": "a\x00b",
                "nested": {"why": ["x" * 300]}}  # fmt: skip
    (session / FOLDER_FILES["ab"]).write_text(json.dumps(document))
    assert collection_runs(session, FOLDER_FILES["ab"]) == [run.resolve()]
