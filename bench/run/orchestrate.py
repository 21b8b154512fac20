"""`bench run`: resolve the engine, start the probes, run the load, stop them, write the folder.

Data flows one way: scenario -> engine (launched or given) -> probes started -> load generator ->
probes stopped -> records and readings -> run folder -> summary. The folder is written by
bench.run.end.run_writer, the writer every command's runs share; its summary is computed from the
written folder (results.run_summary), never from in-memory state, so recomputing it from the
folder gives the same figures. report.html comes last, once the engine is stopped
(:func:`run_and_report`, or the `bench run` command after it showed the summary).
"""

from __future__ import annotations

import asyncio
import gc
import subprocess
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rich.console import Console

from bench.run.auto_calibrate import calibrate_before_load
from bench.run.end.exit_codes import EXIT_REFUSED, EXIT_UNUSABLE
from bench.run.end.interrupt import RunInterrupted, active_interrupts, run_end_sections
from bench.run.end.run_writer import RunWriter, write_report
from bench.run.endpoint.cache_state import PrefixCacheRun, prepare_prefix_cache
from bench.run.endpoint.environment import cpu_name, git_commit, hardware, package_versions
from bench.run.endpoint.preflight import (
    Preflight,
    PreflightError,
    first_model,
    preflight,
    served_context,
)
from bench.run.endpoint.preflight_fields import (
    FieldCheck,
    check_request_fields,
    fields_section,
    redact_fields,
)
from bench.run.endpoint.run_fingerprint import RunFingerprint, engine_identity
from bench.run.endpoint.server_tokenizer import ServerTokenizer
from bench.run.endpoint.tokenizer_source import (
    ResolvedTokenizer,
    TokenizerNotFoundError,
    resolve_tokenizer,
    tokenizer_for_endpoint,
)
from bench.run.fleet import fleet_engine_fields, preflight_fleet
from bench.run.launch.engine_launch import ReferenceEngine, collect_nsys_report, launch_reference
from bench.run.launch.engine_watch import EngineWatch
from bench.run.live import LiveDisplay
from bench.run.load_plan import plan_ran_out, reads_rows, without_ignore_eos
from bench.run.load_runner import LoadError, drive_load, prepare_load, record_load
from bench.run.messages import print_info, print_note, print_warning
from bench.run.probing import (
    gpu_scope_of,
    start_probes,
)
from bench.run.remote_workers import RemoteWorkers
from bench.run.step_follower import StepFollower, steps_taken
from bench.scenario.engine_sets import SettingValue
from bench.scenario.scenario import Scenario
from engine.config import EngineConfig, SettingError
from engine_adapters.base import EngineAdapter
from engine_adapters.launch_command import LaunchError, launch_plan, start_engine
from engine_adapters.launcher import EngineStartError, LaunchedEngine
from engine_adapters.registry import get_adapter
from loadgen.client.auth import RequestHeaders
from loadgen.client.routing import DEFAULT_ROUTE
from loadgen.clock import RunClock
from loadgen.drivers.driver import LoadPlan, LoadResult
from loadgen.drivers.stop import LoadStop
from loadgen.protocols import TokenizerLike
from loadgen.workloads.spec import WorkloadError
from probes import nsys
from probes.session import ProbeResult
from results.figures.analytic import analytic_section
from results.figures.engine_facts import engine_folder_name
from results.folder.engine_steps import fetch_json, same_host
from results.folder.outcomes import read_outcomes
from results.folder.parts.record_stream import RecordStream
from results.folder.records import RequestRecord
from results.folder.redact import redact_command
from results.schema import ClientClock, EngineSection, SummaryJson
from results.validity.usability import DEFAULT_MAX_ERROR_RATE


class RunError(RuntimeError):
    """A run that could not start or finish; the message says why and what to do."""

    exit_code = EXIT_UNUSABLE


class RunRefused(RunError):
    """A run refused before any load (bad input, or the pre-flight check): nothing was sent."""

    exit_code = EXIT_REFUSED


@dataclass(frozen=True)
class RunOptions:
    scenario: Scenario
    url: str | None
    engine: str
    model: str | None
    tokenizer: str | None
    runs_dir: Path
    live: bool = True
    # Reference-engine settings (EngineConfig fields) over the scenario's [engine] table.
    engine_overrides: dict[str, SettingValue] = field(default_factory=dict)
    # Wrap a launched engine in `nsys profile -t cuda,nvtx` (probes.nsys) when nsys is on PATH.
    nsys: bool = False
    # Start the probes (NVML/GPM, CPU, engine /metrics) around the load.
    probes: bool = True
    # The engine's GPUs for the probes when its processes and CUDA_VISIBLE_DEVICES do not show
    # them (probes.gpu_scope): NVML indices or UUIDs, comma-separated.
    gpus: str | None = None
    # Load driver: "asyncio" (this process, or `workers` processes sharing the users) or
    # "locust" (a local Locust master and `workers` workers).
    driver: str = "asyncio"
    workers: int = 1
    # Start an external engine through its adapter (engine_adapters.launch_command): a command
    # line ({port}, {model}, {host}, {exe} filled in), or the model for the adapter's usual one.
    launch: str | None = None
    launch_model: str | None = None
    # --api-key and --header: sent with every request to the endpoint, never written down.
    headers: RequestHeaders = field(default_factory=RequestHeaders)
    # The share of failed requests (0..1) above which the run is not usable
    # (results.validity.usability).
    max_error_rate: float = DEFAULT_MAX_ERROR_RATE
    # Locust: workers that join with `bench worker`, the master's address
    # (bench.run.remote_workers).
    remote_workers: RemoteWorkers | None = None
    # Measure this CPU's roofs quickly before the load when a CPU run has none
    # (bench.run.auto_calibrate); False: --no-calibrate.
    calibrate: bool = True
    # A fleet (bench.run.fleet): every --url in order when there are several (url is the
    # first), and how each request picks its replica (loadgen.client.routing.ROUTES).
    endpoints: tuple[str, ...] = ()
    route: str = DEFAULT_ROUTE
    # --metrics-url: (label, URL) of each /metrics the probes scrape instead of the load URL's
    # (bench.run.probing.metrics_targets); empty: the load URL's.
    metrics_urls: tuple[tuple[str, str], ...] = ()


def reference_engine(scenario: Scenario, overrides: Mapping[str, SettingValue]) -> ReferenceEngine:
    """The reference engine of the scenario's [engine] table, then ``overrides`` (unset, None,
    values left to the engine's defaults).

    RunRefused naming the setting where settings do not go together: here, rather than in the
    engine's process after it started.
    """
    settings = {**scenario.engine.engine_settings(), **overrides}
    try:
        config = EngineConfig.from_flat(settings)
    except SettingError as e:
        raise RunRefused(f"{scenario.source}: engine settings: {e}") from e
    return ReferenceEngine(config, tuple(k for k, v in settings.items() if v is not None))


def total_known(scenario: Scenario) -> bool:
    """Whether the load sends every planned request (else its duration bounds it)."""
    return bool(scenario.num_requests or scenario.open_loop)


def _resolve_tokenizer(
    opts: RunOptions, spec: str | None, adapter: EngineAdapter
) -> ResolvedTokenizer:
    """The prompts' tokenizer (bench.run.endpoint.tokenizer_source): ``spec``, else the
    endpoint's."""
    try:
        if spec is not None:
            # Without --tokenizer, the launched engine's model names the tokenizer too.
            option = "--tokenizer" if opts.tokenizer else "--launch-model"
            if opts.tokenizer is None and opts.url is None and opts.launch_model is None:
                option = "the reference engine's model"
            return resolve_tokenizer(spec, option=option)
        if opts.url is None:
            raise RunRefused(
                f"--launch {opts.launch!r}: prompts of exact token lengths need the served "
                "model's tokenizer; pass --tokenizer (a folder, a preset or a Hub id) or "
                "--launch-model"
            )
        return tokenizer_for_endpoint(
            opts.url, opts.model, presets=adapter.name == "reference",
            headers=opts.headers.as_dict(),
        )  # fmt: skip
    except TokenizerNotFoundError as e:
        raise RunRefused(str(e)) from e


def run_benchmark(opts: RunOptions, console: Console) -> tuple[Path, SummaryJson]:
    """Run ``opts.scenario`` end to end; returns the run folder and its summary.

    Raises RunInterrupted (bench.run.end.interrupt) after writing the partial run folder when a
    signal cut the load (or before any folder, when it came before the load).
    """
    interrupts = active_interrupts()
    interrupts.begin_run()
    scenario = opts.scenario
    external = opts.launch is not None or opts.launch_model is not None
    reference = opts.url is None and not external
    adapter = get_adapter("reference" if reference else opts.engine)
    launched: LaunchedEngine | None = None
    engine = reference_engine(scenario, opts.engine_overrides) if reference else None
    settings = engine.settings() if engine is not None else {}
    tokenizer_spec = opts.tokenizer or (settings.get("model") if engine else opts.launch_model)
    tokenizer = _resolve_tokenizer(opts, tokenizer_spec, adapter)

    started_wall = datetime.now(UTC)
    t_launch = time.monotonic()
    nsys_output: Path | None = None
    if external:
        try:
            plan = launch_plan(adapter, opts.launch, opts.launch_model)
            print_info(
                console, f"starting {adapter.name}: {' '.join(redact_command(plan.command))}"
            )
            launched = start_engine(adapter, plan)
        except (LaunchError, EngineStartError) as e:
            raise RunError(str(e)) from e
        base_url = launched.base_url
        print_info(console, f"engine ready at {base_url} in {time.monotonic() - t_launch:.1f} s")
    elif engine is not None:
        print_info(console, f"starting the reference engine ({engine.config.model.model}) ...")
        try:
            launched, nsys_output = launch_reference(engine, opts.nsys, opts.runs_dir, console)
        except EngineStartError as e:
            raise RunError(str(e)) from e
        base_url = launched.base_url
        print_info(console, f"engine ready at {base_url} in {time.monotonic() - t_launch:.1f} s")
    else:
        base_url = opts.url
        if opts.nsys:
            console.print(
                "[yellow]--nsys wraps an engine that bench starts; run the engine at --url under "
                "`nsys profile -t cuda,nvtx` yourself[/yellow]"
            )
    engine_info = EngineSection(
        adapter=adapter.name,
        url=base_url,
        launched=launched is not None,
        launch_command=redact_command(launched.command) if launched else None,
        settings=settings or None,
        startup_s=time.monotonic() - t_launch if launched else None,
        **fleet_engine_fields(opts.endpoints, opts.route),
    )
    pid = launched.process.pid if launched else None
    try:
        folder, summary = _run_against(
            opts, console, adapter, base_url, tokenizer, started_wall, engine_info, pid,
            launched.process if launched else None,
        )  # fmt: skip
    finally:
        if launched is not None:
            with interrupts.shielded():
                launched.stop(nsys.STOP_TIMEOUT_S if nsys_output else 10.0)
    if nsys_output is not None:
        collect_nsys_report(folder, nsys_output, console)
    interrupts.raise_if_interrupted(folder, summary)
    return folder, summary


def run_and_report(opts: RunOptions, console: Console) -> tuple[Path, SummaryJson]:
    """:func:`run_benchmark`, then the folder's report.html (bench.run.end.run_writer): the
    runs of a sweep, an ablation and an A/B each get the dashboard every `bench run` gets.

    A run a signal cut short raises RunInterrupted as run_benchmark does, with no report: the
    command that ends on it draws the partial run's (bench.cli.interrupted).
    """
    folder, summary = run_benchmark(opts, console)
    write_report(folder, console)
    return folder, summary


@dataclass(frozen=True)
class _Prepared:
    """What the run knows before the load: its plan, the endpoint's checks, and its engine."""

    plan: LoadPlan
    checked: Preflight
    cache: PrefixCacheRun
    # The engine's /debug/engine before the load (None when it has none).
    description: Any
    # Whether every endpoint runs on this host (bench.run.endpoint's same_host).
    local: bool
    calibration_notes: list[str]
    # The request fields and ignore_eos as the endpoint took them (None: none to check).
    fields_check: FieldCheck | None = None


@dataclass(frozen=True)
class _Measured:
    """What the load left behind, before anything is written."""

    result: LoadResult
    clock: ClientClock
    probe_result: ProbeResult | None
    probe_messages: list[str]
    fingerprint: dict[str, Any]
    watch: EngineWatch
    stop: LoadStop


def _run_against(
    opts: RunOptions,
    console: Console,
    adapter: EngineAdapter,
    base_url: str,
    tokenizer: ResolvedTokenizer,
    started_wall: datetime,
    engine_info: EngineSection,
    engine_pid: int | None = None,
    engine_process: subprocess.Popen[bytes] | None = None,
) -> tuple[Path, SummaryJson]:
    prepared = _prepare(opts, console, adapter, base_url, tokenizer)
    engine_name = engine_folder_name(adapter.name, prepared.description)
    writer = RunWriter.create(opts.runs_dir, opts.scenario.name, engine_name)
    follower = (
        StepFollower(
            base_url, writer.path, opts.headers.as_dict(), steps_taken(prepared.description)
        )
        if _follows_steps(opts, prepared)
        else None
    )

    def begin(clock: ClientClock) -> RecordStream:
        # The first run.json: what a killed run's folder is read with (bench.run.end.run_writer).
        stream = writer.begin(
            scenario=opts.scenario.to_dict(),
            engine=EngineSection(
                **engine_info, model=prepared.checked.model, description=prepared.description
            ),
            tokenizer=tokenizer.to_json(),
            hardware=hardware(),
            versions=package_versions(),
            git_commit=git_commit(),
            started_utc=started_wall.isoformat(),
            ended_utc=started_wall.isoformat(),
            client=clock,
        )
        if follower is not None:
            follower.start(clock["t0_ns"])  # the engine's steps streamed to the folder too
        return stream

    try:
        measured = _measure(
            opts, console, adapter, base_url, tokenizer, prepared, engine_pid, engine_process,
            begin, writer.path,
        )  # fmt: skip
    except BaseException:
        if follower is not None:
            follower.abandon()
        writer.discard_if_empty()
        raise
    try:
        return _write_folder(
            opts, adapter, base_url, tokenizer, started_wall, engine_info, prepared, measured,
            writer, follower,
        )  # fmt: skip
    finally:
        if follower is not None:
            follower.abandon()  # nothing once _write_folder stopped it; else its thread ends


def _follows_steps(opts: RunOptions, prepared: _Prepared) -> bool:
    """Whether the run records the engine's steps (bench.run.step_follower): only an engine on
    this host shares the run's clock, and a fleet's replicas each step on their own, so one
    steps.parquet (and one set of counters) would mix them (bench.run.fleet)."""
    return prepared.local and len(opts.endpoints) <= 1


def _prepare(
    opts: RunOptions,
    console: Console,
    adapter: EngineAdapter,
    base_url: str,
    tokenizer: ResolvedTokenizer,
) -> _Prepared:
    """The load plan, checked against the endpoint(s); the prefix cache set as the scenario
    says; the engine's description; this CPU's roofs measured where a CPU run has none."""
    scenario = opts.scenario
    print_info(console, f"tokenizer: {tokenizer.describe()}")
    headers = opts.headers.as_dict()
    try:
        # A file's rows over the served context are refused one by one, so it is read first.
        context = (
            served_context(base_url, adapter, opts.model or first_model(scenario), headers)[1]
            if reads_rows(scenario)
            else None
        )
        plan = prepare_load(scenario, tokenizer.tokenizer, adapter, console, context)
    except (PreflightError, WorkloadError) as e:
        raise RunRefused(str(e)) from e
    if isinstance(tokenizer.tokenizer, ServerTokenizer):
        print_info(
            console, f"prompt lengths checked by the server: {tokenizer.tokenizer.calls} calls"
        )
        tokenizer.tokenizer.close()
    try:
        if len(opts.endpoints) > 1:
            checked = preflight_fleet(scenario, plan, opts.endpoints, adapter, opts.model, headers)
        else:
            checked = preflight(scenario, plan, base_url, adapter, opts.model, headers)
        fields_check = check_request_fields(
            plan, base_url, checked.model, headers, adapter.accepts_ignore_eos is None
        )
    except PreflightError as e:
        raise RunRefused(str(e)) from e
    if fields_check is not None and fields_check.ignore_eos == "rejected":
        plan = without_ignore_eos(plan)
    for note in checked.notes + (fields_check.notes if fields_check else []):
        print_note(console, note)
    cache = prepare_prefix_cache(
        scenario.prefix_cache, adapter, base_url, opts.headers, plan, checked.model
    )
    if (line := cache.describe()) is not None:
        print_info(console, line)
    # A fleet's description (the analytic section's model and roofs) is its first replica's.
    description = fetch_json(base_url, "/debug/engine", headers=headers)
    # Engine steps share the run's clock, and the GPUs and processes here are the engine's, only
    # when the engine runs on this host.
    local = all(same_host(url) for url in opts.endpoints or (base_url,))
    notes = calibrate_before_load(opts.calibrate, description, local, console)
    return _Prepared(plan, checked, cache, description, local, notes, fields_check)


def _measure(
    opts: RunOptions,
    console: Console,
    adapter: EngineAdapter,
    base_url: str,
    tokenizer: ResolvedTokenizer,
    prepared: _Prepared,
    engine_pid: int | None,
    engine_process: subprocess.Popen[bytes] | None,
    begin: Callable[[ClientClock], RecordStream],
    folder: Path,
) -> _Measured:
    """The load, between the probes' start and stop and the fingerprint's two snapshots; the
    probes stream their readings into ``folder``.

    Raises RunInterrupted when a signal came before the first request went out.
    """
    headers = opts.headers.as_dict()
    probes, probe_messages = (
        start_probes(
            console,
            adapter,
            base_url,
            engine_pid,
            prepared.local,
            headers,
            opts.gpus,
            opts.endpoints,
            opts.metrics_urls,
            folder,
        )
        if opts.probes
        else (None, ["probes disabled"])
    )
    served = fetch_json(base_url, "/v1/models", headers=headers)
    identity = engine_identity(base_url, adapter, headers, served)
    fingerprint = RunFingerprint(prepared.local).begin()
    probe_result: ProbeResult | None = None
    # Set by a signal (bench.run.end.interrupt) or the engine's death
    # (bench.run.launch.engine_watch).
    stop = LoadStop()
    model = prepared.checked.model
    try:
        with active_interrupts().load(stop), EngineWatch(engine_process, stop) as watch:
            result, clock_info = asyncio.run(
                _drive(
                    opts,
                    console,
                    base_url,
                    tokenizer.load_tokenizer,
                    prepared.plan,
                    model,
                    stop,
                    begin,
                )
            )
    finally:
        if probes is not None:
            probe_result = probes.stop()
        fingerprint.stop_watch()
    section = fingerprint.end(clock_info["t0_ns"], identity)
    if result.recorded == 0 and (got := active_interrupts().first) is not None:
        raise RunInterrupted(got)  # signalled before the first request went out: nothing to keep
    return _Measured(result, clock_info, probe_result, probe_messages, section, watch, stop)


def _probes_section(measured: _Measured, follower: StepFollower | None) -> dict[str, Any]:
    """run.json's "probes": the probes' own section, and every line the probes and the step
    follower had to say."""
    probe_result = measured.probe_result
    return {
        **(probe_result.to_json() if probe_result else {}),
        "messages": measured.probe_messages
        + (probe_result.messages() if probe_result else [])
        + (follower.notes if follower is not None else []),
    }


def _write_folder(
    opts: RunOptions,
    adapter: EngineAdapter,
    base_url: str,
    tokenizer: ResolvedTokenizer,
    started_wall: datetime,
    engine_info: EngineSection,
    prepared: _Prepared,
    measured: _Measured,
    writer: RunWriter,
    follower: StepFollower | None,
) -> tuple[Path, SummaryJson]:
    """The run folder (bench.run.end.run_writer): the tables, run.json and the summary;
    steps.parquet sealed from what ``follower`` streamed."""
    scenario, result, t0_ns = opts.scenario, measured.result, measured.clock["t0_ns"]
    headers = opts.headers.as_dict()
    fleet = len(opts.endpoints) > 1
    prefix_cache = prepared.cache.finish()
    steps_parts = follower.stop() if follower is not None else None
    engine_end = None if fleet else fetch_json(base_url, "/debug/engine", headers=headers)
    probe_result = measured.probe_result
    writer.write_tables(None)
    writer.seal_samples(t0_ns)  # streamed by the probes, stopped by now
    if steps_parts is not None:
        writer.seal_steps(steps_parts)
    load_info = record_load(
        writer.path, result, prepared.plan, opts.driver, opts.workers, opts.remote_workers,
        scenario,
    )  # fmt: skip
    load_info["request_fields"] = fields_section(prepared.plan)
    if prepared.fields_check is not None:
        load_info["request_check"] = prepared.fields_check.to_json()
    scenario_json = scenario.to_dict()
    if scenario.request:
        scenario_json["request"] = redact_fields(scenario.request)
    machine = hardware()
    planned = len(prepared.plan.requests) if total_known(scenario) else None
    ended = run_end_sections(
        active_interrupts(), measured.watch, measured.stop, base_url, adapter.health_path,
        read_outcomes(writer.path), t0_ns, planned,
    )  # fmt: skip
    summary = writer.finish(
        scenario=scenario_json,
        engine=EngineSection(
            **engine_info,
            model=prepared.checked.model,
            description=prepared.description,
            # Cumulative engine counters after the load; minus description["stats"] they
            # are this run's (prefix cache hits, speculative acceptance, preemptions).
            stats_end=engine_end.get("stats") if isinstance(engine_end, dict) else None,
        ),
        recorded=writer.recorded(),
        load=load_info,
        tokenizer=tokenizer.to_json(),
        hardware=machine,
        analytic=analytic_section(
            prepared.description,
            tokenizer.shape_spec or (engine_info.get("settings") or {}).get("model"),
            prepared.local,
            machine["gpus"],
            cpu_name(),
            notes=prepared.calibration_notes,
            gpu_scope=gpu_scope_of(probe_result),
        ),
        probes=_probes_section(measured, follower),
        versions=package_versions(),
        git_commit=git_commit(),
        started_utc=started_wall.isoformat(),
        ended_utc=datetime.now(UTC).isoformat(),
        client=measured.clock,
        max_error_rate=opts.max_error_rate,
        fingerprint=measured.fingerprint,
        prefix_cache=prefix_cache,
        **ended,
    )
    return writer.path, summary


async def _drive(
    opts: RunOptions,
    console: Console,
    base_url: str,
    tokenizer: TokenizerLike | None,
    plan: LoadPlan,
    model: str,
    stop: LoadStop | None = None,
    begin: Callable[[ClientClock], RecordStream] | None = None,
) -> tuple[LoadResult, ClientClock]:
    """The load; ``begin`` (given the run's clock) opens the stream every finished record is
    appended to as it comes (bench.run.end.run_writer.RunWriter.begin)."""
    scenario = opts.scenario
    # Objects alive now (prompts, tokenizer, imported modules) never become garbage during the
    # load; freezing them keeps full collections, which pause the event loop, short.
    gc.collect()
    gc.freeze()
    clock = RunClock()
    info = ClientClock(clock="time.perf_counter_ns", t0_ns=clock.t0_ns)
    total = len(plan.requests) if total_known(scenario) else None
    display = LiveDisplay(console, total=total, duration_s=scenario.duration_s, enabled=opts.live)
    on_record = display.on_record
    if begin is not None:
        stream = begin(info)

        def on_record(record: RequestRecord) -> None:
            display.on_record(record)
            stream.add(record)

    with display:
        try:
            result = await drive_load(
                plan, base_url, model, tokenizer, clock, driver=opts.driver,
                workers=opts.workers, headers=opts.headers, on_record=on_record,
                counters=display.counters, remote=opts.remote_workers, console=console,
                stop=stop, endpoints=opts.endpoints, route=opts.route,
                request_timeout_s=scenario.request_timeout_s,
                read_timeout_s=scenario.read_timeout_s,
                # Streamed to the folder, the records are not also held for the run's length.
                keep_records=begin is None,
            )  # fmt: skip
        except LoadError as e:
            raise RunError(str(e)) from e
    if not (stop is not None and stop.is_set()):
        elapsed_s = clock.now_s()
        if short := plan_ran_out(scenario, len(plan.requests), result.recorded, elapsed_s):
            print_warning(console, short)
    return result, info
