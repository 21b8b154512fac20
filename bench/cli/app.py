"""The `bench` command line: serve, run, report.

The commands import what they run inside their own functions (as every module of bench.cli does),
so that `bench --help` and the analytic commands start without loading torch or the engine.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

app = typer.Typer(
    help="LLM-inference performance lab: drive an engine with load, record, and report.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
# Piped output (CI logs, files) gets a width that fits the tables instead of rich's 80 columns.
console = Console(width=None if sys.stdout.isatty() else 132)


@app.command()
def serve(
    model: Annotated[str, typer.Option(help="Preset name (tiny, llama-3-8b, ...) or HF dir.")] = (
        "tiny"
    ),
    host: Annotated[str, typer.Option(help="Address to bind; 127.0.0.1 keeps it local.")] = (
        "127.0.0.1"
    ),
    port: Annotated[int, typer.Option(help="TCP port.")] = 8000,
    served_model_name: Annotated[str | None, typer.Option(help="Name clients send.")] = None,
    dtype: Annotated[str, typer.Option(help="auto | float32 | bfloat16 | float16.")] = "auto",
    device: Annotated[
        str, typer.Option(help="auto | cpu | cuda | cuda:N | sim (a simulated --gpu, no weights).")
    ] = "auto",
    seed: Annotated[int, typer.Option(help="Seed of random weights and unseeded sampling.")] = 0,
    block_size: Annotated[int, typer.Option(help="KV block size in tokens.")] = 16,
    kv_cache_memory_bytes: Annotated[
        int | None, typer.Option(help="KV cache budget in bytes (default: 512 MiB on CPU).")
    ] = None,
    max_model_len: Annotated[int | None, typer.Option(help="Context length cap, tokens.")] = None,
    max_num_seqs: Annotated[int, typer.Option(help="Most requests in one batch.")] = 256,
    max_num_batched_tokens: Annotated[
        int, typer.Option(help="Token budget per step (vLLM's CPU default).")
    ] = 2048,
    enable_chunked_prefill: Annotated[
        bool, typer.Option(help="Split long prompts across steps within the token budget.")
    ] = True,
    num_threads: Annotated[
        int | None,
        typer.Option(help="torch threads (default: the engine core takes all cores but one)."),
    ] = None,
    prefill_num_threads: Annotated[
        int | None,
        typer.Option(help="torch threads for burst steps, mostly prefill (default: all cores)."),
    ] = None,
    step_delay_ms: Annotated[
        float, typer.Option(help="Sleep per step: a deliberately slower engine for gate tests.")
    ] = 0.0,
    batching: Annotated[
        str,
        typer.Option(help="continuous: admit requests every step; static: one batch at a time."),
    ] = "continuous",
    kv_layout: Annotated[
        str, typer.Option(help="paged: blocks on demand; contiguous: reserve max_model_len.")
    ] = "paged",
    enable_prefix_caching: Annotated[
        bool | None,
        typer.Option(help="Reuse KV blocks of shared prefixes (default: on when paged)."),
    ] = None,
    speculative: Annotated[
        str, typer.Option(help="off | ngram (prompt lookup) | draft (a draft model).")
    ] = "off",
    num_speculative_tokens: Annotated[int, typer.Option(help="Draft tokens per step (k).")] = 3,
    prompt_lookup_min: Annotated[int, typer.Option(help="ngram: shortest n-gram matched.")] = 2,
    prompt_lookup_max: Annotated[int, typer.Option(help="ngram: longest n-gram matched.")] = 4,
    draft_model: Annotated[
        str | None, typer.Option(help="draft: a preset or HF directory with the same vocab.")
    ] = None,
    draft_num_layers: Annotated[
        int | None, typer.Option(help="draft: use the target's first L layers (self-speculative).")
    ] = None,
    quantization: Annotated[
        str, typer.Option(help="Weight-only: none | int8 (per channel) | int4 (grouped).")
    ] = "none",
    quant_group_size: Annotated[int, typer.Option(help="int4 group size (inputs).")] = 32,
    kv_cache_dtype: Annotated[
        str, typer.Option(help="auto (the model's dtype) | fp8 (e4m3 with a scale).")
    ] = "auto",
    attention_backend: Annotated[
        str,
        typer.Option(help="Decode attention: auto | native (C kernel, CPU) | torch (gather+bmm)."),
    ] = "auto",
    custom_ops: Annotated[
        str,
        typer.Option(help="Small-batch linear and add+RMSNorm: auto | native (C, CPU) | torch."),
    ] = "auto",
    gpu: Annotated[
        str | None,
        typer.Option(help="--device sim: a100-80gb, h100-sxm, h200, ... or cpu (calibrated)."),
    ] = None,
    tp: Annotated[int, typer.Option(help="--device sim: tensor-parallel GPUs.")] = 1,
    gpu_memory_utilization: Annotated[
        float, typer.Option(help="--device sim: share of each GPU's memory (weights + KV).")
    ] = 0.9,
    sim_speedup: Annotated[
        float, typer.Option(help="--device sim: 1 real time, s > 1 s times faster, 0 virtual.")
    ] = 1.0,
    sim_acceptance_rate: Annotated[
        float | None, typer.Option(help="--device sim: chance each draft token is accepted.")
    ] = None,
    sim_step_overhead_ms: Annotated[
        float | None, typer.Option(help="--device sim: host time per step (default: none).")
    ] = None,
    engine_core_process: Annotated[
        bool,
        typer.Option(
            help="Step the engine in its own process (as vLLM V1), not a thread of the server."
        ),
    ] = True,
    log_level: Annotated[str, typer.Option(help="Python log level.")] = "INFO",
) -> None:
    """Start the reference engine's OpenAI-compatible server."""
    from engine.config import EngineConfig
    from engine.serving.core_process import EngineCoreError
    from engine.serving.server import run_server

    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(name)s %(message)s")
    try:
        config = EngineConfig(
            model=model,
            served_model_name=served_model_name,
            dtype=dtype,
            device=device,
            seed=seed,
            block_size=block_size,
            kv_cache_memory_bytes=kv_cache_memory_bytes,
            max_model_len=max_model_len,
            max_num_seqs=max_num_seqs,
            max_num_batched_tokens=max_num_batched_tokens,
            enable_chunked_prefill=enable_chunked_prefill,
            num_threads=num_threads,
            prefill_num_threads=prefill_num_threads,
            step_delay_ms=step_delay_ms,
            batching=batching,
            kv_layout=kv_layout,
            enable_prefix_caching=enable_prefix_caching,
            speculative=speculative,
            num_speculative_tokens=num_speculative_tokens,
            prompt_lookup_min=prompt_lookup_min,
            prompt_lookup_max=prompt_lookup_max,
            draft_model=draft_model,
            draft_num_layers=draft_num_layers,
            quantization=quantization,
            quant_group_size=quant_group_size,
            kv_cache_dtype=kv_cache_dtype,
            attention_backend=attention_backend,
            custom_ops=custom_ops,
            gpu=gpu,
            tp=tp,
            gpu_memory_utilization=gpu_memory_utilization,
            sim_speedup=sim_speedup,
            sim_acceptance_rate=sim_acceptance_rate,
            sim_step_overhead_ms=sim_step_overhead_ms,
        )
    except ValueError as e:
        raise typer.BadParameter(str(e)) from e
    try:
        run_server(config, host, port, core_process=engine_core_process)
    except (EngineCoreError, ValueError) as e:
        typer.echo(f"error: the engine did not start: {e}", err=True)
        raise typer.Exit(1) from e


@app.command()
def run(
    scenario: Annotated[
        str, typer.Option(help="A shipped scenario name (100-users, 1-user) or a TOML path.")
    ] = "100-users",
    url: Annotated[
        str | None,
        typer.Option(help="Base URL of a running engine; without it the reference engine starts."),
    ] = None,
    engine: Annotated[
        str,
        typer.Option(help="Adapter: reference, openai, vllm, sglang, tgi, llamacpp, trtllm."),
    ] = "reference",
    model: Annotated[
        str | None, typer.Option(help="Model name to send (default: the server's first model).")
    ] = None,
    tokenizer: Annotated[
        str | None,
        typer.Option(help="HF directory or preset whose tokenizer builds the prompts (--url)."),
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
) -> None:
    """Run a scenario against an engine and write a run folder and its dashboard."""
    from bench.cli.dashboards import report_after_run
    from bench.run.orchestrate import RunError, RunOptions, run_benchmark
    from bench.run.report import render_summary
    from bench.scenario.scenario import ScenarioError, load_scenario

    try:
        spec = load_scenario(scenario)
    except ScenarioError as e:
        console.print(f"[red]{e}[/red]")
        raise typer.Exit(2) from e
    opts = RunOptions(
        spec, url, engine, model, tokenizer, runs_dir, live, nsys=nsys, probes=probes,
        driver=driver, workers=workers, launch=launch, launch_model=launch_model,
    )  # fmt: skip
    if repeat > 1:
        from bench.experiments.repeat import run_repeated

        def show(index: int, folder: Path, summary: dict[str, Any]) -> None:
            render_summary(summary, console)
            console.print(f"run folder: [bold]{folder}[/bold]")
            report_after_run(folder, console)

        try:
            group, _ = run_repeated(opts, repeat, console, on_run=show)
        except RunError as e:
            console.print(f"[red]{e}[/red]")
            raise typer.Exit(1) from e
        console.print(f"group folder: [bold]{group}[/bold]")
        return
    try:
        folder, summary = run_benchmark(opts, console)
    except RunError as e:
        console.print(f"[red]{e}[/red]")
        raise typer.Exit(1) from e
    render_summary(summary, console)
    from results.client_check import client_warning

    if warning := client_warning(summary):
        console.print(f"[yellow]{warning}[/yellow]")
    console.print(f"run folder: [bold]{folder}[/bold]")
    report_after_run(folder, console)


@app.command()
def ablate(
    switch: Annotated[
        list[str],
        typer.Option(
            help="NAME=V1,V2: an engine setting and its values (repeat for more; all "
            "combinations run, the first is the baseline). E.g. batching=continuous,static."
        ),
    ],
    scenario: Annotated[str, typer.Option(help="Scenario name or TOML path.")] = "100-users",
    runs_dir: Annotated[Path, typer.Option(help="Where run folders are written.")] = Path("runs"),
    live: Annotated[bool, typer.Option(help="Show a live display while each load runs.")] = True,
) -> None:
    """Run a scenario once per engine setting, each on a fresh reference engine."""
    from bench.experiments.ablate import AblationError, parse_switch, render_ablation, run_ablation
    from bench.run.orchestrate import RunError
    from bench.scenario.scenario import ScenarioError, load_scenario

    try:
        spec = load_scenario(scenario)
        switches = [parse_switch(s) for s in switch]
    except (ScenarioError, AblationError) as e:
        console.print(f"[red]{e}[/red]")
        raise typer.Exit(2) from e
    try:
        path = run_ablation(spec, switches, runs_dir, console, live)
    except (AblationError, RunError) as e:
        console.print(f"[red]{e}[/red]")
        raise typer.Exit(1) from e
    render_ablation(path, console)
    from dashboards.ablation import ablation_input_from_json, write_ablation_report

    page = write_ablation_report(ablation_input_from_json(path), path.with_name("ablation.html"))
    console.print(f"dashboard: [bold]{page}[/bold]")


@app.command()
def report(
    run_folder: Annotated[Path, typer.Argument(help="A run folder written by `bench run`.")],
    html: Annotated[
        bool, typer.Option("--html", help="Also write report.html, the dashboard.")
    ] = False,
) -> None:
    """Print a run's summary again, from its folder."""
    from bench.run.report import render_summary
    from results.run_folder import RunFolderError, load_run

    try:
        loaded = load_run(run_folder)
    except RunFolderError as e:
        console.print(f"[red]{e}[/red]")
        raise typer.Exit(2) from e
    summary = loaded.summary
    if summary is None:
        # A run that stopped before writing summary.json: its tables still hold every request.
        from results.run_summary import summarize_run

        summary = summarize_run(loaded)
        console.print("summary.json is missing: recomputed from the tables")
    render_summary(summary, console)
    console.print(f"run folder: [bold]{run_folder}[/bold]")
    if html:
        from bench.cli.dashboards import write_report_html

        write_report_html(run_folder, console)


# Command groups defined beside their features.
from bench.cli.analytic import register as register_probes  # noqa: E402
from bench.cli.dashboards import register as register_dashboards  # noqa: E402
from bench.cli.gate import register as register_gate  # noqa: E402
from bench.cli.simulate import register as register_simulate  # noqa: E402
from bench.cli.sweep import register as register_sweep  # noqa: E402

register_dashboards(app)
register_probes(app)
register_gate(app)
register_sweep(app)
register_simulate(app)
