"""`bench run --repeat N`: the same scenario N times, one run folder each, in one group folder.

The group folder ``<runs_dir>/<UTC time>-<scenario>-<engine>-x<N>/`` holds the N run folders and
``group.json``::

    {"format": "llm-perf-lab/run-group", "format_version": 1, "scenario": ..., "engine": ...,
     "repeat": N, "runs": ["<run_id>", ...], "completed": k, "started_utc": ..., "ended_utc": ...,
     "error": null}

Each repeat is a full, independent run: without ``--url`` it starts its own engine, so that
run-to-run variation (process start-up, memory layout, the machine's state) shows between runs;
that variation is what the gate's run-level bootstrap measures. group.json is rewritten after
every run, so a group cut short still lists the runs it finished (and ``error`` says why).
``bench baseline save`` and ``bench gate`` accept a group folder wherever they accept runs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from bench.run.end.interrupt import RunInterrupted, interruption_note
from bench.run.messages import print_info
from bench.run.orchestrate import RunError, RunOptions, run_benchmark
from perfmodel.files import JSONObject, write_json
from results.folder.run_folder import RunFolder
from results.folder.run_group import GROUP_FORMAT, GROUP_JSON

if TYPE_CHECKING:
    from rich.console import Console

__all__ = ["run_repeated"]


def _write_manifest(group: Path, manifest: JSONObject) -> None:
    write_json(group / GROUP_JSON, manifest)


def run_repeated(
    opts: RunOptions,
    repeat: int,
    console: Console,
    on_run: Callable[[int, Path, JSONObject], None] | None = None,
) -> tuple[Path, list[Path]]:
    """Run ``opts.scenario`` ``repeat`` times; returns the group folder and the run folders.

    ``on_run(index, folder, summary)`` is called after each run (index from 0), e.g. to print
    its summary. A RunError from any run is re-raised after group.json records it; so is
    RunInterrupted (a signal), after group.json records the finished runs and "interrupted".
    """
    if repeat < 1:
        raise ValueError(f"--repeat must be >= 1, got {repeat}")
    engine = "reference" if opts.url is None else opts.engine
    # RunFolder.create claims a unique, timestamped directory name; the group reuses it.
    group = RunFolder.create(opts.runs_dir, opts.scenario.name, f"{engine}-x{repeat}").path
    manifest: JSONObject = {
        "format": GROUP_FORMAT,
        "format_version": 1,
        "scenario": opts.scenario.name,
        "engine": engine,
        "repeat": repeat,
        "runs": [],
        "completed": 0,
        "started_utc": datetime.now(UTC).isoformat(),
        "ended_utc": None,
        "error": None,
    }
    _write_manifest(group, manifest)
    folders: list[Path] = []
    try:
        for index in range(repeat):
            print_info(console, f"run {index + 1} of {repeat}")
            folder, summary = run_benchmark(replace(opts, runs_dir=group), console)
            folders.append(folder)
            manifest["runs"].append(folder.name)
            manifest["completed"] = len(folders)
            _write_manifest(group, manifest)
            if on_run is not None:
                on_run(index, folder, summary)
    except RunError as exc:
        manifest["error"] = str(exc)
        raise
    except RunInterrupted as exc:
        # group.json lists the runs that finished; the partial one is named apart.
        manifest["interrupted"] = interruption_note(exc)
        raise
    finally:
        manifest["ended_utc"] = datetime.now(UTC).isoformat()
        _write_manifest(group, manifest)
    return group, folders
