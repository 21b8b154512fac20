"""bench.run.launch.engine_launch: nsys's report lands in the run folder and run.json says so."""

from __future__ import annotations

import io
from pathlib import Path

from rich.console import Console

from bench.run.launch.engine_launch import collect_nsys_report
from probes.nsys import report_path
from results.folder.run_folder import RunFolder, read_run_json
from tests.support.run_json import fake_run_json


def test_the_nsys_report_moves_into_the_run_folder(tmp_path: Path) -> None:
    folder = tmp_path / "run"
    folder.mkdir()
    RunFolder(folder).write_run_json(fake_run_json("run", recorded={"steps": True}))
    output = tmp_path / ".nsys-1-8000"
    report_path(output).write_bytes(b"nsys report bytes")
    printed = io.StringIO()
    collect_nsys_report(folder, output, Console(file=printed, width=200))
    assert (folder / "engine.nsys-rep").read_bytes() == b"nsys report bytes"
    assert not report_path(output).exists()
    recorded = read_run_json(folder / "run.json")["recorded"]
    assert recorded == {"steps": True, "nsys": "engine.nsys-rep"}
    assert "engine.nsys-rep" in printed.getvalue()


def test_a_missing_report_is_said_and_run_json_left_alone(tmp_path: Path) -> None:
    folder = tmp_path / "run"
    folder.mkdir()
    RunFolder(folder).write_run_json(fake_run_json("run"))
    before = (folder / "run.json").read_text()
    printed = io.StringIO()
    collect_nsys_report(folder, tmp_path / ".nsys-2-8000", Console(file=printed, width=200))
    assert "nsys wrote no report" in printed.getvalue()
    assert (folder / "run.json").read_text() == before
