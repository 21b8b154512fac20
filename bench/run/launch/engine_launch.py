"""The reference engine of one `bench run` without ``--url``, under Nsight Systems when asked.

- :func:`launch_reference`: `bench serve` with the run's :class:`ReferenceEngine` on a free
  port of 127.0.0.1 (the adapter derives the flags from the settings), wrapped in
  ``nsys profile`` for ``--nsys`` where nsys is installed (else said once, and the run goes on
  unprofiled).
- :func:`collect_nsys_report`: nsys's report moved into the run folder, noted in run.json.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console

from bench.run.messages import print_info, print_path, print_warning
from bench.scenario.engine_sets import SettingValue
from engine.config import EngineConfig
from engine_adapters.launcher import LaunchedEngine, free_port, launch
from engine_adapters.reference import serve_command
from probes import nsys
from results.folder.run_folder import RUN_JSON, RunFolder, read_run_json

__all__ = ["ReferenceEngine", "collect_nsys_report", "launch_reference"]


@dataclass(frozen=True)
class ReferenceEngine:
    """The reference engine a run starts, its settings checked once, as the run begins:
    ``config``, every setting validated together, and ``chosen``, the names the run set (the
    scenario's [engine] table, then ``--set``), which :meth:`settings` gives with the config's
    values: run.json's ``engine.settings`` and the flags of `bench serve`'s command line
    (engine_adapters.reference.serve_flags), so the engine parses back the same config."""

    config: EngineConfig
    chosen: tuple[str, ...]

    def settings(self) -> dict[str, SettingValue]:
        """The chosen settings by name, with the config's values."""
        flat = self.config.to_flat()
        return {name: flat[name] for name in self.chosen}


def launch_reference(
    engine: ReferenceEngine, nsys_wanted: bool, runs_dir: Path, console: Console
) -> tuple[LaunchedEngine, Path | None]:
    """Start the reference engine on a free local port, under nsys when asked and available."""
    host = "127.0.0.1"
    port = free_port(host)
    serve = serve_command(host, port, engine.settings())
    command, output = serve, None
    if nsys_wanted:
        runs_dir.mkdir(parents=True, exist_ok=True)
        output = runs_dir / f".nsys-{os.getpid()}-{port}"
        try:
            command = nsys.nsys_command(serve, output)
            print_info(console, f"profiling the engine with: {' '.join(command[:5])} ...")
        except nsys.NsysUnavailable as e:
            print_warning(console, e)
            output = None
    # Under nsys, stopping signals `bench serve` alone, which closes its engine core; nsys then
    # writes the report (engine_adapters.launcher.LaunchedEngine.stop).
    wrapped = serve if output is not None else None
    return launch(command, f"http://{host}:{port}", wrapped_command=wrapped), output


def collect_nsys_report(folder: Path, output: Path, console: Console) -> None:
    """Move nsys's report into the run folder and note it in run.json."""
    report = nsys.report_path(output)
    if not report.is_file():
        print_warning(console, f"nsys wrote no report at {report}")
        return
    target = folder / "engine.nsys-rep"
    report.replace(target)
    run_json = read_run_json(folder / RUN_JSON)
    run_json.setdefault("recorded", {})["nsys"] = target.name
    RunFolder(folder).write_run_json(run_json)
    print_path(console, "nsys report", target)
