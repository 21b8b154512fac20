"""`bench simulate` and `bench sim-calibrate`: the simulated device on the command line.

Registered on the main app by :func:`register`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from bench.cli.flags.history import HistoryPath, NoHistory
from bench.cli.flags.shared import EngineSet, RunsDir, Scenario, declared
from bench.run.messages import print_error, print_info, print_path
from bench.run.terminal import terminal_console

console = terminal_console()


def _fail(message: str, code: int = 2) -> typer.Exit:
    print_error(console, message)
    return typer.Exit(code)


@declared
def simulate(
    *,
    scenario: Scenario,
    gpu: Annotated[
        str | None,
        typer.Option(
            metavar="NAME",
            help="Simulated GPU (a100-80gb, h100-sxm, h200, ...) or cpu (calibrated).",
        ),
    ] = None,
    tp: Annotated[
        int | None, typer.Option(metavar="N", min=1, help="Tensor-parallel degree (GPUs).")
    ] = None,
    model: Annotated[
        str | None,
        typer.Option(
            metavar="NAME", help="Model to simulate (llama-3-70b, ...; default: scenario's)."
        ),
    ] = None,
    setting: EngineSet,
    runs_dir: RunsDir,
    history: HistoryPath,
    no_history: NoHistory,
    html: Annotated[
        bool, typer.Option(metavar="", help="Write the run's dashboard, report.html.")
    ] = True,
) -> None:
    """Run a scenario on a simulated device in virtual time (no HTTP) and write a run folder."""
    from bench.cli.history import use_history
    from bench.run.end.report import render_summary
    from bench.scenario.engine_sets import parse_settings
    from bench.scenario.scenario import ScenarioError, load_scenario
    from bench.sim.simulate import SimulateError
    from bench.sim.simulate import simulate as run_simulation

    try:
        overrides = parse_settings(setting or [])
    except ValueError as e:
        raise _fail(str(e)) from e
    for name, value in (("gpu", gpu), ("tp", tp), ("model", model)):
        if value is not None:
            overrides[name] = value
    use_history(history, no_history, runs_dir)
    try:
        spec = load_scenario(scenario)
        folder, summary = run_simulation(spec, runs_dir, overrides)
    except (ScenarioError, SimulateError) as e:
        raise _fail(str(e)) from e
    render_summary(summary, console)
    print_path(console, "run folder", folder)
    if html:
        from bench.cli.dashboards import report_after_run

        report_after_run(folder, console)
    from bench.run.end.verdict import exit_code

    raise typer.Exit(exit_code([summary.get("usability")]))


def sim_calibrate(
    model: Annotated[str, typer.Option(help="A preset that runs here (tiny, ...).")] = "tiny",
    from_run: Annotated[
        list[Path] | None,
        typer.Option(help="Fit the steps.parquet of this run folder instead (repeat for more)."),
    ] = None,
    output: Annotated[Path | None, typer.Option(help="Where to save (default: the cache).")] = None,
    num_threads: Annotated[
        int, typer.Option(help="torch threads of the measured engine (serve with the same).")
    ] = 1,
) -> None:
    """Fit the simulated CPU's efficiencies and overheads to real steps of the torch executor."""
    from bench.sim.measure import measure_steps
    from engine.model.weights import load_model_spec
    from engine.sim.calibration import calibration_from_steps, save
    from engine.sim.cost import CPU, device_roofs
    from perfmodel import calibration as calibrate
    from perfmodel.roofline import Precision

    saved = calibrate.load()
    if saved is None:
        raise _fail("no calibration of this machine's roofs: run `bench calibrate` first")
    host = str(saved.get("host", {}).get("cpu", "unknown"))
    if from_run:
        columns, num_threads = _steps_of_runs(from_run, model)
        source = "steps of runs " + ", ".join(p.name for p in from_run)
    else:
        print_info(console, f"measuring steps of {model} on this CPU ...")
        columns = measure_steps(model, num_threads=num_threads)
        source = "bench sim-calibrate measurement"
    config, _ = load_model_spec(model, shape_only=True)
    dtype = "fp32" if config.dtype == "float32" else config.dtype
    precision = Precision(dtype, dtype, dtype)
    try:
        roofs = device_roofs(CPU, precision.activation_dtype)
    except ValueError as e:
        raise _fail(str(e)) from e
    result = calibration_from_steps(
        model, config, precision, roofs, columns, host, source, num_threads
    )
    path = save(result, output)
    console.print(
        f"{model} on {host}: compute {result.compute_efficiency:.3f} and memory "
        f"{result.memory_efficiency:.3f} of the calibrated peaks, step overhead "
        f"{result.step_overhead_s * 1e3:.3f} ms + {result.seq_overhead_s * 1e6:.1f} us per "
        f"sequence; rms error {result.rms_relative_error:.1%} over {result.num_steps} steps"
    )
    print_path(console, "saved", path)


def _steps_of_runs(paths: list[Path], model: str) -> tuple[dict[str, Any], int | None]:
    """The steps of every run (each its own clock, so a gap never spans two runs) and their
    engines' torch threads; Exit(2) when one is not a run of ``model`` with steps."""
    import numpy as np

    from results.folder.run_folder import RunFolderError, load_run

    frames, threads = [], None
    for offset, path in enumerate(paths):
        try:
            run = load_run(path)
        except RunFolderError as e:
            raise _fail(str(e)) from e
        description = (run.run_json.get("engine") or {}).get("description") or {}
        name = (description.get("model_config") or {}).get("name")
        if run.steps is None or name != model:
            raise _fail(f"{path}: not a run of {model} with steps.parquet (model: {name})")
        steps = run.steps.copy()
        # Each run a day after the previous one, so that no gap between steps spans two runs.
        steps["start_s"] += 86400.0 * offset
        steps["end_s"] += 86400.0 * offset
        frames.append(steps)
        threads = (description.get("engine_config") or {}).get("num_threads")
    columns = {c: np.concatenate([f[c].to_numpy() for f in frames]) for c in frames[0].columns}
    return columns, threads


def register(app: typer.Typer) -> None:
    """Add simulate and sim-calibrate to ``app``."""
    app.command()(simulate)
    app.command(name="sim-calibrate")(sim_calibrate)
