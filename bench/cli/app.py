"""The `bench` command line: run, ablate, report; serve and the other groups register here.

The commands import what they run inside their own functions (as every module of bench.cli does),
so that `bench --help` and the analytic commands start without loading torch or the engine.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer

from bench.cli.flags import run as ro
from bench.cli.flags.auth import request_headers
from bench.cli.flags.history import HistoryPath, NoHistory
from bench.cli.flags.shared import (
    ApiKey,
    Calibrate,
    Engine,
    EngineSet,
    Header,
    Live,
    MaxErrorRate,
    Model,
    Probes,
    Route,
    RunsDir,
    Scenario,
    Tokenizer,
    Urls,
    Workers,
    command_group,
    declared,
)
from bench.run.end.exit_codes import EXIT_REFUSED
from bench.run.end.interrupt import catching_signals
from bench.run.messages import print_error, print_path, print_warning
from bench.run.terminal import terminal_console

if TYPE_CHECKING:
    from bench.run.orchestrate import RunOptions

app = command_group("LLM-inference performance lab: drive an engine with load, record, and report.")
# Piped output (CI logs, files) gets a width that fits the tables instead of rich's 80 columns.
console = terminal_console()


@app.command()
@catching_signals
@declared
def run(
    *,
    scenario: Scenario,
    users: ro.Users,
    num_requests: ro.NumRequests,
    input_len: ro.InputLen,
    output_len: ro.OutputLen,
    request_timeout: ro.RequestTimeout,
    read_timeout: ro.ReadTimeout,
    extra_body: ro.ExtraBody,
    url: Urls,
    route: Route,
    engine: Engine,
    model: Model,
    tokenizer: Tokenizer,
    engine_set: EngineSet,
    runs_dir: RunsDir,
    live: Live,
    nsys: ro.Nsys,
    probes: Probes,
    gpus: ro.Gpus,
    metrics_url: ro.MetricsUrl,
    calibrate: Calibrate,
    repeat: ro.Repeat,
    driver: ro.Driver,
    workers: Workers,
    expect_workers: ro.ExpectWorkers,
    master_bind: ro.MasterBind,
    worker_join_timeout: ro.WorkerJoinTimeout,
    worker_timeout: ro.WorkerTimeout,
    launch: ro.Launch,
    launch_model: ro.LaunchModel,
    api_key: ApiKey = None,
    header: Header = None,
    max_error_rate: MaxErrorRate,
    history: HistoryPath,
    no_history: NoHistory,
) -> None:
    """Run a scenario against an engine and write a run folder and its dashboard."""
    from bench.cli.history import use_history
    from bench.run.fleet import fleet_urls
    from bench.run.load_runner import LOCUST_REFUSES_SESSIONS
    from bench.run.orchestrate import RunOptions
    from bench.run.probing import metrics_targets
    from bench.run.remote_workers import RemoteWorkers
    from bench.scenario.engine_sets import parse_settings, refuse_settings_for_external
    from bench.scenario.scenario import ScenarioError, load_scenario

    urls = url or []
    load = {"users": users, "num_requests": num_requests, "input_len": input_len,
            "output_len": output_len, "request_timeout_s": request_timeout,
            "read_timeout_s": read_timeout}  # fmt: skip
    try:
        spec = ro.override_request(ro.override_load(load_scenario(scenario), load), extra_body)
        if driver == "locust" and spec.workload.kind == "sessions":
            raise ValueError(LOCUST_REFUSES_SESSIONS)
        settings = parse_settings(engine_set or [])
        refuse_settings_for_external(settings, urls, launch, launch_model)
        headers = request_headers(api_key, header)
        remote = RemoteWorkers.from_options(
            driver, workers, expect_workers, master_bind, worker_join_timeout, worker_timeout
        )
        fleet = fleet_urls(urls, route, starts_engine=bool(launch or launch_model))
        metrics = metrics_targets(metrics_url or [])
    except (ScenarioError, ValueError) as e:
        print_error(console, e)
        raise typer.Exit(EXIT_REFUSED) from e
    opts = RunOptions(
        scenario=spec, url=urls[0] if urls else None, engine=engine, model=model,
        tokenizer=tokenizer, runs_dir=runs_dir, live=live, engine_overrides=settings, nsys=nsys,
        probes=probes, gpus=gpus, driver=driver, workers=workers, launch=launch,
        launch_model=launch_model, headers=headers, max_error_rate=max_error_rate,
        remote_workers=remote, calibrate=calibrate, endpoints=fleet, route=route,
        metrics_urls=metrics,
    )  # fmt: skip
    use_history(history, no_history, runs_dir)
    if repeat > 1:
        _run_repeated(opts, repeat)
    _run_once(opts)


def _run_repeated(opts: RunOptions, repeat: int) -> NoReturn:
    """`bench run --repeat N`: N runs in one group folder; exits with the runs' verdict."""
    from bench.cli.dashboards import report_after_run
    from bench.cli.interrupted import end_interrupted
    from bench.experiments.repeat import run_repeated
    from bench.run.end.interrupt import RunInterrupted
    from bench.run.end.report import render_summary
    from bench.run.end.verdict import exit_code, print_unusable_runs
    from bench.run.orchestrate import RunError

    runs: list[tuple[str, Path, dict[str, Any] | None]] = []

    def show(index: int, folder: Path, summary: dict[str, Any]) -> None:
        runs.append((f"run {index + 1}", folder, summary.get("usability")))
        render_summary(summary, console, nvml_said=opts.probes)
        print_path(console, "run folder", folder)
        report_after_run(folder, console)

    try:
        group, _ = run_repeated(opts, repeat, console, on_run=show)
    except RunError as e:
        print_error(console, e)
        raise typer.Exit(e.exit_code) from e
    except RunInterrupted as e:
        end_interrupted(e, console)
    from bench.cli.history import record_collection

    record_collection(group, console)
    print_path(console, "group folder", group)
    print_unusable_runs(console, runs)
    raise typer.Exit(exit_code([verdict for _, _, verdict in runs]))


def _run_once(opts: RunOptions) -> NoReturn:
    """One run: its summary, folder and dashboard; exits with its verdict."""
    from bench.cli.interrupted import end_interrupted, report_then_exit_status
    from bench.run.end.interrupt import RunInterrupted
    from bench.run.end.report import render_summary
    from bench.run.orchestrate import RunError, run_benchmark
    from results.figures.client_check import client_warning

    try:
        folder, summary = run_benchmark(opts, console)
    except RunError as e:
        print_error(console, e)
        raise typer.Exit(e.exit_code) from e
    except RunInterrupted as e:
        end_interrupted(e, console)
    # The probes said at the start what they cannot read here (no NVML: no energy).
    render_summary(summary, console, nvml_said=opts.probes)
    if warning := client_warning(summary):
        print_warning(console, warning)
    print_path(console, "run folder", folder)
    raise typer.Exit(report_then_exit_status(folder, summary, console))


@app.command()
@catching_signals
@declared
def ablate(
    *,
    switch: Annotated[
        list[str],
        typer.Option(
            metavar="NAME=V1,V2",
            help="NAME=V1,V2: an engine setting and its values (repeat for more; all "
            "combinations run, the first is the baseline). E.g. batching=continuous,static.",
        ),
    ],
    scenario: Scenario,
    runs_dir: RunsDir,
    live: Live,
    max_error_rate: MaxErrorRate,
    history: HistoryPath,
    no_history: NoHistory,
    quality: Annotated[
        bool,
        typer.Option(
            "--quality/--no-quality",
            metavar="",
            help="Also judge each setting's output against the first's, in this process in "
            "float32 (teacher-forced logits; docs/reference-engine.md, 'Is the output right?').",
        ),
    ] = True,
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
    from bench.cli.history import record_collection, use_history

    use_history(history, no_history, runs_dir)
    try:
        path = run_ablation(spec, switches, runs_dir, console, live, max_error_rate, quality)
    except AblationError as e:
        print_error(console, e)
        raise typer.Exit(EXIT_REFUSED) from e
    except RunError as e:
        print_error(console, e)
        raise typer.Exit(e.exit_code) from e
    except RunInterrupted as e:
        end_interrupted(e, console)
    record_collection(path.parent, console)
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
    from bench.cli.report_folders import report_folder
    from bench.run.end.report import render_summary
    from results.folder.folder_kinds import folder_kind
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
        if "incomplete" in loaded.run_json:
            console.print("the run was killed before its end: summarized from its flushed records")
        else:
            console.print("summary.json is missing: recomputed from the tables")
    render_summary(summary, console)
    print_path(console, "run folder", run_folder)
    if html:
        from bench.cli.dashboards import write_report_html

        # The page reads the folder again, for drawing: the tables read here are let go
        # first (a run of 10^6 requests would hold both), and a summary computed here is
        # handed over rather than computed twice.
        computed = summary if loaded.summary is None else None
        del loaded
        write_report_html(run_folder, console, computed)


# Command groups defined beside their features.
from bench.cli.ab import register as register_ab  # noqa: E402
from bench.cli.analytic import register as register_probes  # noqa: E402
from bench.cli.dashboards import register as register_dashboards  # noqa: E402
from bench.cli.gate import register as register_gate  # noqa: E402
from bench.cli.history import register as register_history  # noqa: E402
from bench.cli.history_views import register as register_history_views  # noqa: E402
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
register_history(app)
register_history_views(app)
