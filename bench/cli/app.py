"""The `bench` command line: run, ablate, report; serve and the other groups register here.

The commands import what they run inside their own functions (as every module of bench.cli does),
so that `bench --help` and the analytic commands start without loading torch or the engine.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from bench.cli.auth_options import API_KEY_OPTION, HEADER_OPTION, request_headers
from bench.cli.scenario_option import SCENARIO_HELP
from bench.run.end.exit_codes import EXIT_REFUSED
from bench.run.end.interrupt import catching_signals
from bench.run.messages import print_error, print_path, print_warning
from bench.run.terminal import terminal_console
from loadgen.drivers.locust_driver import DEFAULT_JOIN_TIMEOUT_S, DEFAULT_WORKER_TIMEOUT_S
from results.validity.usability import DEFAULT_MAX_ERROR_RATE

app = typer.Typer(
    help="LLM-inference performance lab: drive an engine with load, record, and report.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
# Piped output (CI logs, files) gets a width that fits the tables instead of rich's 80 columns.
console = terminal_console()


@app.command()
@catching_signals
def run(
    scenario: Annotated[str, typer.Option(help=SCENARIO_HELP)] = "100-users",
    url: Annotated[
        list[str] | None,
        typer.Option(
            help="Base URL of a running engine; without it the reference engine starts. "
            "Repeat it for a fleet: one run against several replicas, routed by --route."
        ),
    ] = None,
    route: Annotated[
        str,
        typer.Option(
            help="A fleet's routing: round-robin, or least-outstanding (the replica with the "
            "fewest of this client's requests in flight, ties by --url order)."
        ),
    ] = "round-robin",
    engine: Annotated[
        str,
        typer.Option(help="Adapter: reference, openai, vllm, sglang, tgi, llamacpp, trtllm."),
    ] = "reference",
    model: Annotated[
        str | None, typer.Option(help="Model name to send (default: the server's first model).")
    ] = None,
    tokenizer: Annotated[
        str | None,
        typer.Option(
            help="Tokenizer that builds the prompts: a local folder, a preset, or a Hugging Face "
            "Hub id (org/name or org/name@revision). Default with --url: the served model's root, "
            "then its id, from /v1/models, else the server's /tokenize."
        ),
    ] = None,
    runs_dir: Annotated[Path, typer.Option(help="Where run folders are written.")] = Path("runs"),
    live: Annotated[bool, typer.Option(help="Show a live display while the load runs.")] = True,
    nsys: Annotated[
        bool,
        typer.Option(
            help="Run the launched engine under `nsys profile -t cuda,nvtx`; the report goes to "
            "the run folder as engine.nsys-rep (says so when nsys is not on PATH)."
        ),
    ] = False,
    probes: Annotated[
        bool, typer.Option(help="Sample NVML/GPM, CPU and the engine's /metrics during the run.")
    ] = True,
    gpus: Annotated[
        str | None,
        typer.Option(
            help="The engine's GPUs for the probes when neither its processes nor its "
            "CUDA_VISIBLE_DEVICES show them (a --url engine): NVML indices or GPU-/MIG- UUIDs, "
            "comma-separated. Without either, every GPU is sampled and the run says so."
        ),
    ] = None,
    calibrate: Annotated[
        bool,
        typer.Option(
            help="A CPU run without a calibration of this CPU first measures a quick one (a few "
            "seconds, before the load, cached) for MFU and MBU; --no-calibrate skips it."
        ),
    ] = True,
    repeat: Annotated[
        int,
        typer.Option(
            min=1,
            help="Run the scenario N times (a fresh engine each), one run folder each, grouped "
            "in one folder with group.json: what `bench baseline save` and `bench gate` take.",
        ),
    ] = 1,
    driver: Annotated[
        str, typer.Option(help="asyncio (this process, or --workers processes) or locust.")
    ] = "asyncio",
    workers: Annotated[
        int, typer.Option(min=1, help="Client processes sharing the users (Locust: workers).")
    ] = 1,
    expect_workers: Annotated[
        int,
        typer.Option(
            min=0,
            help="Locust: start no local worker; wait for N that join with `bench worker "
            "--master HOST:PORT` (printed), from other machines or this one.",
        ),
    ] = 0,
    master_bind: Annotated[
        str | None,
        typer.Option(
            help="Locust: HOST:PORT the master listens on for workers (e.g. 0.0.0.0:5557)."
        ),
    ] = None,
    worker_join_timeout: Annotated[
        float, typer.Option(help="Locust: seconds to wait for every worker to join.")
    ] = DEFAULT_JOIN_TIMEOUT_S,
    worker_timeout: Annotated[
        float,
        typer.Option(help="Locust: a worker silent this many seconds is lost (its requests fail)."),
    ] = DEFAULT_WORKER_TIMEOUT_S,
    launch: Annotated[
        str | None,
        typer.Option(
            help="Start the --engine with this command line ({port}, {model}, {host}, {exe} "
            "filled in), wait for it, and stop it after the run."
        ),
    ] = None,
    launch_model: Annotated[
        str | None,
        typer.Option(
            help="Start the --engine's usual command line for this model (a HF dir; a .gguf "
            "for llamacpp); also the default --tokenizer."
        ),
    ] = None,
    api_key: Annotated[str | None, API_KEY_OPTION] = None,
    header: Annotated[list[str] | None, HEADER_OPTION] = None,
    max_error_rate: Annotated[
        float,
        typer.Option(
            min=0.0,
            max=1.0,
            help="Exit 1 (the run is not usable) when more than this share of the requests "
            "failed, or none succeeded; the run folder is written either way.",
        ),
    ] = DEFAULT_MAX_ERROR_RATE,
) -> None:
    """Run a scenario against an engine and write a run folder and its dashboard."""
    from bench.cli.dashboards import report_after_run
    from bench.cli.interrupted import end_interrupted, report_then_exit_status
    from bench.run.end.interrupt import RunInterrupted
    from bench.run.end.report import render_summary
    from bench.run.end.verdict import exit_code, print_unusable_runs
    from bench.run.fleet import fleet_urls
    from bench.run.orchestrate import RunError, RunOptions, run_benchmark
    from bench.run.remote_workers import RemoteWorkers
    from bench.scenario.scenario import ScenarioError, load_scenario

    try:
        spec = load_scenario(scenario)
        headers = request_headers(api_key, header)
        remote = RemoteWorkers.from_options(
            driver, workers, expect_workers, master_bind, worker_join_timeout, worker_timeout
        )
        urls = url or []
        fleet = fleet_urls(urls, route, starts_engine=bool(launch or launch_model))
    except (ScenarioError, ValueError) as e:
        print_error(console, e)
        raise typer.Exit(EXIT_REFUSED) from e
    opts = RunOptions(
        spec, urls[0] if urls else None, engine, model, tokenizer, runs_dir, live, nsys=nsys,
        probes=probes, gpus=gpus, driver=driver, workers=workers, launch=launch,
        launch_model=launch_model, headers=headers, max_error_rate=max_error_rate,
        remote_workers=remote, calibrate=calibrate, endpoints=fleet, route=route,
    )  # fmt: skip
    if repeat > 1:
        from bench.experiments.repeat import run_repeated

        runs: list[tuple[str, Path, dict[str, Any] | None]] = []

        def show(index: int, folder: Path, summary: dict[str, Any]) -> None:
            runs.append((f"run {index + 1}", folder, summary.get("usability")))
            render_summary(summary, console)
            print_path(console, "run folder", folder)
            report_after_run(folder, console)

        try:
            group, _ = run_repeated(opts, repeat, console, on_run=show)
        except RunError as e:
            print_error(console, e)
            raise typer.Exit(e.exit_code) from e
        except RunInterrupted as e:
            end_interrupted(e, console)
        print_path(console, "group folder", group)
        print_unusable_runs(console, runs)
        raise typer.Exit(exit_code([verdict for _, _, verdict in runs]))
    try:
        folder, summary = run_benchmark(opts, console)
    except RunError as e:
        print_error(console, e)
        raise typer.Exit(e.exit_code) from e
    except RunInterrupted as e:
        end_interrupted(e, console)
    render_summary(summary, console)
    from results.figures.client_check import client_warning

    if warning := client_warning(summary):
        print_warning(console, warning)
    print_path(console, "run folder", folder)
    raise typer.Exit(report_then_exit_status(folder, summary, console))


@app.command()
@catching_signals
def ablate(
    switch: Annotated[
        list[str],
        typer.Option(
            help="NAME=V1,V2: an engine setting and its values (repeat for more; all "
            "combinations run, the first is the baseline). E.g. batching=continuous,static."
        ),
    ],
    scenario: Annotated[str, typer.Option(help=SCENARIO_HELP)] = "100-users",
    runs_dir: Annotated[Path, typer.Option(help="Where run folders are written.")] = Path("runs"),
    live: Annotated[bool, typer.Option(help="Show a live display while each load runs.")] = True,
    max_error_rate: Annotated[
        float,
        typer.Option(
            min=0.0, max=1.0, help="Exit 1 when a setting's run has more failed requests than this."
        ),
    ] = DEFAULT_MAX_ERROR_RATE,
) -> None:
    """Run a scenario once per engine setting, each on a fresh reference engine."""
    from bench.cli.interrupted import end_interrupted
    from bench.experiments.ablate import (
        AblationError,
        ablation_verdicts,
        parse_switch,
        render_ablation,
        run_ablation,
    )
    from bench.run.end.interrupt import RunInterrupted, active_interrupts
    from bench.run.end.verdict import exit_code, print_unusable_runs
    from bench.run.orchestrate import RunError
    from bench.scenario.scenario import ScenarioError, load_scenario

    try:
        spec = load_scenario(scenario)
        switches = [parse_switch(s) for s in switch]
    except (ScenarioError, AblationError) as e:
        print_error(console, e)
        raise typer.Exit(EXIT_REFUSED) from e
    try:
        path = run_ablation(spec, switches, runs_dir, console, live, max_error_rate)
    except AblationError as e:
        print_error(console, e)
        raise typer.Exit(EXIT_REFUSED) from e
    except RunError as e:
        print_error(console, e)
        raise typer.Exit(e.exit_code) from e
    except RunInterrupted as e:
        end_interrupted(e, console)
    render_ablation(path, console)
    from dashboards.pages.ablation import ablation_input_from_json, write_ablation_report

    page = write_ablation_report(ablation_input_from_json(path), path.with_name("ablation.html"))
    print_path(console, "dashboard", page)
    if (got := active_interrupts().first) is not None:
        print_error(console, f"interrupted by {got.name}: {path} keeps the settings that finished")
        raise typer.Exit(got.exit_code)
    verdicts = ablation_verdicts(path)
    print_unusable_runs(console, verdicts)
    raise typer.Exit(exit_code([verdict for _, _, verdict in verdicts]))


@app.command()
def report(
    run_folder: Annotated[
        Path,
        typer.Argument(
            help="A folder bench wrote: a run, a `--repeat` group, a sweep or an ablation."
        ),
    ],
    html: Annotated[
        bool, typer.Option("--html", help="Also write the folder's dashboard page.")
    ] = False,
) -> None:
    """Print a run's summary again, or a group's runs, a sweep's or an ablation's table."""
    from bench.cli.report_folders import folder_kind, report_folder
    from bench.run.end.report import render_summary
    from results.folder.run_folder import RunFolderError, load_run

    try:
        if (kind := folder_kind(run_folder)) != "run":
            report_folder(run_folder, kind, html, console)
            return
        loaded = load_run(run_folder)
    except RunFolderError as e:
        print_error(console, e)
        raise typer.Exit(2) from e
    summary = loaded.summary
    if summary is None:
        # A run that stopped before writing summary.json: its tables still hold every request.
        from results.run_summary import summarize_run

        summary = summarize_run(loaded)
        console.print("summary.json is missing: recomputed from the tables")
    render_summary(summary, console)
    print_path(console, "run folder", run_folder)
    if html:
        from bench.cli.dashboards import write_report_html

        write_report_html(run_folder, console)


# Command groups defined beside their features.
from bench.cli.ab import register as register_ab  # noqa: E402
from bench.cli.analytic import register as register_probes  # noqa: E402
from bench.cli.dashboards import register as register_dashboards  # noqa: E402
from bench.cli.gate import register as register_gate  # noqa: E402
from bench.cli.quantize import register as register_quantize  # noqa: E402
from bench.cli.serve import register as register_serve  # noqa: E402
from bench.cli.simulate import register as register_simulate  # noqa: E402
from bench.cli.sweep import register as register_sweep  # noqa: E402
from bench.cli.techniques import register as register_techniques  # noqa: E402
from bench.cli.worker import register as register_worker  # noqa: E402

register_serve(app)
register_dashboards(app)
register_probes(app)
register_gate(app)
register_sweep(app)
register_techniques(app)
register_simulate(app)
register_worker(app)
register_ab(app)
register_quantize(app)
