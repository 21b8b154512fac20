"""`bench simulate`: a scenario on a simulated device, in virtual time, written as a run folder.

The scenario's [engine] table (and its options) configures the reference engine as for `bench
run`, with ``device = "sim"`` and the virtual clock forced; ``gpu`` (and ``tp``) come from the
options or the command line. The engine runs its real scheduler, KV cache manager, prefix cache
and speculation bookkeeping on engine.sim.executor; bench.sim.loop plays the load plan against
it. The folder holds requests.parquet, tokens.parquet, steps.parquet, run.json (with
``"simulated": true`` in its hardware, the simulated device in engine.description.simulated, and
the analytic section built from it) and summary.json from results.run_summary.summarize_run,
written by the writer of every run folder (bench.run.end.run_writer), so `bench report`,
`bench compare` and the dashboards read it as any run.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.run.end.run_writer import RunWriter
from bench.run.endpoint.environment import git_commit, hardware, package_versions
from bench.run.load_plan import build_plan, load_section
from bench.scenario.scenario import Scenario
from bench.sim.loop import run_plan_virtual
from engine.config import EngineConfig
from engine.llm_engine import LLMEngine
from loadgen.drivers.driver import LoadPlan
from results.figures.analytic import simulated_analytic
from results.figures.engine_facts import engine_folder_name
from results.folder.parts.step_parts import STEPS_PART_STEPS, StepParts
from results.schema import (
    ClientClock,
    EngineSection,
    Simulation,
    SummaryJson,
    TokenizerSection,
)
from results.schema.api_kinds import POOLING_APIS


class SimulateError(RuntimeError):
    """A simulation that cannot start; the message names the setting to change."""


def simulate_settings(scenario: Scenario, overrides: Mapping[str, Any]) -> dict[str, Any]:
    """EngineConfig fields: the scenario's engine table, then ``overrides``, on the simulated
    device in virtual time. Unset (None) values are left to the engine's defaults."""
    settings = {**scenario.engine.engine_settings(), **overrides}
    settings.update(device="sim", sim_speedup=0.0)
    settings = {k: v for k, v in settings.items() if v is not None}
    if "gpu" not in settings:
        raise SimulateError(
            "which device? pass --gpu (a100-80gb, h100-sxm, ..., or cpu) or set gpu in the "
            "scenario's [engine.options]"
        )
    return settings


def refuse_unmodelled(scenario: Scenario) -> None:
    """SimulateError for what the virtual loop does not model, naming the key and the fix: a
    silent ignore would mislead."""
    if scenario.abandon is not None:
        # The virtual loop reads every answer to its end.
        raise SimulateError(
            f"{scenario.source}: [abandon]: bench simulate does not model abandoned requests; "
            "drop the table, or run it with bench run"
        )
    if scenario.api in POOLING_APIS:
        # The virtual loop generates tokens; a pooling request generates none.
        raise SimulateError(
            f"{scenario.source}: key 'api': bench simulate models generation, not "
            f"{scenario.api!r}; run it with bench run"
        )
    if scenario.images is not None:
        # The simulated engine is the reference engine's text model: it has no vision encoder.
        raise SimulateError(
            f"{scenario.source}: [images]: bench simulate models text only, not images; drop "
            "the table, or run it with bench run against a vision-language model's server"
        )


def simulate(
    scenario: Scenario, runs_dir: Path, overrides: Mapping[str, Any] | None = None
) -> tuple[Path, SummaryJson]:
    """Simulate ``scenario`` (module docstring); returns the run folder and its summary."""
    settings = simulate_settings(scenario, overrides or {})
    refuse_unmodelled(scenario)
    started = datetime.now(UTC)
    t_wall = time.perf_counter()
    try:
        engine = LLMEngine(EngineConfig.from_flat(settings))
    except (TypeError, ValueError) as e:
        raise SimulateError(f"engine settings {settings}: {e}") from e
    description = engine.describe()
    plan = build_plan(scenario, engine.tokenizer)
    writer = RunWriter.create(runs_dir, scenario.name, engine_folder_name("reference", description))
    early = _run_sections(writer, scenario, settings, engine, description, plan, 0.0, started)
    del early["simulation"], early["recorded"]
    # Every record goes to disk as it ends (bench.run.end.run_writer): a long simulation holds
    # no chunks, and a killed one keeps what was flushed.
    stream = writer.begin(**early)
    # The engine's steps too, every STEPS_PART_STEPS of them: memory holds at most that many.
    steps = StepParts(writer.path)
    engine.steps.drain_to(steps, STEPS_PART_STEPS)
    try:
        run_plan_virtual(engine, plan, on_record=stream.add)
    except BaseException:
        writer.discard_if_empty()
        raise
    engine.steps.drain()
    wall_s = time.perf_counter() - t_wall
    writer.write_tables(None)
    writer.seal_steps(steps)
    sections = _run_sections(writer, scenario, settings, engine, description, plan, wall_s, started)
    return writer.path, writer.finish(**sections)


def _run_sections(
    writer: RunWriter,
    scenario: Scenario,
    settings: dict[str, Any],
    engine: LLMEngine,
    description: dict[str, Any],
    plan: LoadPlan,
    wall_s: float,
    started: datetime,
) -> dict[str, Any]:
    """run.json's sections of a simulated run (bench.run.end.run_writer.RunWriter.finish);
    ``description`` is the engine's before the load."""
    sim = description["simulated"]
    machine = hardware()
    machine.update(gpus=[f"simulated {sim['gpu']}"] * sim["tp"], simulated=True)
    analytic = simulated_analytic(description)
    assert analytic is not None  # the engine runs on the simulated device
    return dict(
        scenario=scenario.to_dict(),
        engine=EngineSection(
            adapter="reference",
            url=None,
            launched=False,
            launch_command=None,
            settings=settings,
            startup_s=None,
            model=engine.served_model_name,
            description=description,
            stats_end=engine.stats(),
        ),
        recorded=writer.recorded(),
        tokenizer=TokenizerSection(
            source="folder" if Path(engine.config.model.model).is_dir() else "preset",
            name=engine.config.model.model,
            prompt_lengths="client tokenizer",
        ),
        hardware=machine,
        analytic=analytic,
        probes={"messages": ["simulated run: no probes"]},
        load=load_section(plan, "virtual", 1),
        simulation=Simulation(
            wall_s=wall_s,
            simulated_s=engine.clock_ns() / 1e9,
            steps=engine.steps.num_steps,
        ),
        versions=package_versions(),
        git_commit=git_commit(),
        started_utc=started.isoformat(),
        ended_utc=datetime.now(UTC).isoformat(),
        client=ClientClock(clock="virtual", t0_ns=0),
    )
