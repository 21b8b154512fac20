"""`bench run --repeat N` (bench.experiments.repeat.run_repeated): N run folders in one group
folder with a manifest that `bench baseline save` and `bench gate` expand. Real runs against a
reference engine served in this process on 127.0.0.1."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from rich.console import Console

from bench.experiments.repeat import run_repeated
from bench.gate.baseline import load_run_group
from bench.run.orchestrate import RunError, RunOptions
from bench.scenario.scenario import load_scenario
from engine.config import EngineConfig
from engine_adapters.launcher import free_port
from results.folder.run_group import GROUP_JSON, expand_run_paths

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

SCENARIO = """
name = "repeat"
users = 2
num_requests = 6
ignore_eos = true

[input_len]
kind = "fixed"
value = 16

[output_len]
kind = "fixed"
value = 6
"""


# The engine the module's base_url fixture (tests/conftest.py) serves.
SERVER_CONFIG = EngineConfig.from_flat(
    dict(model="tiny", dtype="float32", device="cpu", num_threads=1)
)


def options(tmp_path: Path, url: str) -> RunOptions:
    path = tmp_path / "repeat.toml"
    path.write_text(SCENARIO)
    scenario = load_scenario(path)
    return RunOptions(
        scenario, url, "reference", None, "tiny", tmp_path / "runs", live=False, probes=False
    )


def test_repeat_writes_a_group_that_gate_commands_expand(tmp_path: Path, base_url: str) -> None:
    seen: list[int] = []
    with open("/dev/null", "w") as sink:
        group, folders = run_repeated(
            options(tmp_path, base_url),
            2,
            Console(file=sink),
            on_run=lambda i, f, s: seen.append(i),
        )
    assert seen == [0, 1] and len(folders) == 2 and all(f.parent == group for f in folders)
    assert group.name.endswith("-repeat-reference-x2")
    manifest = json.loads((group / GROUP_JSON).read_text())
    assert manifest["runs"] == [f.name for f in folders]
    assert (manifest["completed"], manifest["repeat"], manifest["error"]) == (2, 2, None)
    assert manifest["ended_utc"] is not None
    assert expand_run_paths([group]) == folders
    runs, _ = load_run_group([group], "runs")
    assert [r.num_requests for r in runs.runs] == [6, 6]


def test_a_failed_run_is_recorded_in_the_manifest(tmp_path: Path) -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    with open("/dev/null", "w") as sink, pytest.raises(RunError):
        run_repeated(options(tmp_path, dead), 3, Console(file=sink))
    (group,) = (tmp_path / "runs").iterdir()
    manifest = json.loads((group / GROUP_JSON).read_text())
    assert manifest["completed"] == 0 and manifest["runs"] == []
    assert dead in manifest["error"]
