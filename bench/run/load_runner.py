"""The load part of `bench run`, as three calls for bench.run.orchestrate.

    plan = prepare_load(scenario, tokenizer, adapter, console)        # before the probes start
    result = await drive_load(plan, base_url, model, tokenizer, clock, driver=..., workers=...,
                              on_record=display.on_record, counters=display.counters)
    run_json["load"] = record_load(folder.path, result, plan, driver, workers)  # client.parquet
                                          # (and arrival_plan.parquet for a trace scenario)

Drivers: ``asyncio`` (this process, or ``workers`` processes sharing the users, see
loadgen.drivers.workers) and ``locust`` (a Locust master with ``workers`` local workers, or
workers joining from other machines: loadgen.drivers.locust.driver, bench.run.remote_workers).
Every driver returns the same records and self-check samples.
"""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path
from typing import Any

from rich.console import Console

from bench.run.load_plan import arrival_rows, build_plan, load_section
from bench.run.messages import print_warning
from bench.run.remote_workers import RemoteWorkers, print_locust_event, print_loopback_note
from bench.scenario.scenario import Scenario
from engine_adapters.base import EngineAdapter
from loadgen.client.auth import RequestHeaders
from loadgen.client.limits import DEFAULT_READ_TIMEOUT_S, DEFAULT_REQUEST_TIMEOUT_S
from loadgen.client.routing import DEFAULT_ROUTE
from loadgen.client.transport.kernel_clock import run_stamps
from loadgen.clock import RunClock
from loadgen.drivers.driver import ClientConfig, LoadPlan, LoadResult
from loadgen.drivers.locust.driver import LocustError, run_locust
from loadgen.drivers.sending import LiveCounters, RecordCallback
from loadgen.drivers.stop import LoadStop
from loadgen.drivers.workers import run_load
from loadgen.protocols import TokenizerLike
from results.figures.client_check import write_client_table
from results.folder.arrival_plan import ARRIVAL_PLAN_PARQUET, write_arrival_plan
from results.folder.records import RequestRecord

__all__ = [
    "DRIVERS",
    "LOCUST_REFUSES_SESSIONS",
    "LoadError",
    "drive_load",
    "prepare_load",
    "record_load",
]

DRIVERS = ("asyncio", "locust")
# Locust's users send planned turns: no per-turn delay, no history rebuilt from tool calls.
LOCUST_REFUSES_SESSIONS = (
    "--driver locust does not run agent sessions (their delays and tool results); use the "
    "asyncio driver (the default)"
)


class LoadError(RuntimeError):
    """The load cannot run as asked (driver, workers); the message says why."""


def prepare_load(
    scenario: Scenario, tokenizer: TokenizerLike, adapter: EngineAdapter, console: Console,
    context_tokens: int | None = None,
) -> LoadPlan:  # fmt: skip
    """The scenario's load plan; ``ignore_eos`` is dropped (and said) for an engine known to
    reject it, rather than failing every request (where that is not known, the pre-flight asks
    the server: bench.run.endpoint.preflight_fields). The rows of a file of prompts refused (over
    ``context_tokens``, the served context, among other reasons) or reused are said, a line
    each (bench.run.load_plan).

    Raises:
        loadgen.workloads.spec.WorkloadError: the file does not parse, or no row can be sent.
    """
    if scenario.ignore_eos and adapter.accepts_ignore_eos is False:
        console.print(
            f"[yellow]engine {adapter.name!r} does not take ignore_eos: requests are sent "
            "without it, so outputs may end before max_tokens[/yellow]"
        )
        scenario = dataclasses.replace(scenario, ignore_eos=False)
    plan = build_plan(scenario, tokenizer, context_tokens)
    for line in (plan.rows or {}).get("lines", []):
        print_warning(console, line)
    return plan


def refuse_for_locust(plan: LoadPlan) -> None:
    """Raise LoadError naming what of ``plan`` Locust's workers cannot send."""
    apis = {spec.api for spec in plan.requests if not spec.kind.openai_chunks}
    if apis:
        # Locust's workers speak the OpenAI streams alone (loadgen.drivers.locust.worker).
        raise LoadError(
            f"--driver locust sends completions and chat only, not {sorted(apis)[0]!r}; use "
            "the asyncio driver (the default)"
        )
    # A multi-turn chat's turns follow one another as Locust's users send them; an agent
    # session's delays and tool results need the session runner.
    if any(
        s.session is not None and (s.session.delay_s is not None or s.session.tool_results)
        for s in plan.requests
    ):
        raise LoadError(LOCUST_REFUSES_SESSIONS)


async def drive_load(
    plan: LoadPlan,
    base_url: str,
    model: str,
    tokenizer: TokenizerLike | None,
    clock: RunClock,
    *,
    driver: str = "asyncio",
    workers: int = 1,
    headers: RequestHeaders | None = None,
    on_record: RecordCallback | None = None,
    counters: LiveCounters | None = None,
    remote: RemoteWorkers | None = None,
    console: Console | None = None,
    stop: LoadStop | None = None,
    endpoints: tuple[str, ...] = (),
    route: str = DEFAULT_ROUTE,
    request_timeout_s: float | None = None,
    read_timeout_s: float | None = None,
    keep_records: bool = True,
) -> LoadResult:
    """Run ``plan`` with ``driver`` over ``workers`` processes (module docstring); ``stop`` ends
    it early when set (an interrupt, a dead engine: loadgen.drivers.stop). ``endpoints``: a
    fleet's replicas (``base_url`` the first), each request sent to one by ``route``
    (loadgen.client.routing; every client process routes its own requests).
    ``request_timeout_s``, ``read_timeout_s``: the client's limits (loadgen.client.limits;
    None: their defaults), for every driver and worker. ``keep_records`` False: ``on_record``
    keeps the records (a stream to the run folder) and the result holds none.

    Locust only: ``remote`` says where the master listens and how many workers join from
    `bench worker` (then no local one starts); what they must run, who joined and who was
    lost is said on ``console``.

    Raises:
        LoadError: an unknown driver, workers < 1, or a Locust failure.
    """
    if driver not in DRIVERS:
        raise LoadError(f"--driver {driver!r}: expected one of {', '.join(DRIVERS)}")
    if workers < 1:
        raise LoadError(f"--workers {workers}: expected >= 1")
    limits = {
        "request_timeout_s": request_timeout_s or DEFAULT_REQUEST_TIMEOUT_S,
        "timeout_s": read_timeout_s or DEFAULT_READ_TIMEOUT_S,
    }
    config = ClientConfig(
        base_url, model, headers=headers or RequestHeaders(), endpoints=endpoints, route=route,
        **limits,
    )  # fmt: skip
    if driver == "asyncio":
        return await run_load(
            plan, config, clock, tokenizer, workers, on_record=on_record, counters=counters,
            stop=stop, keep_records=keep_records,
        )  # fmt: skip
    return await _drive_locust(
        plan, config, clock, workers, on_record=on_record, counters=counters,
        remote=remote or RemoteWorkers(), console=console, stop=stop, keep_records=keep_records,
    )  # fmt: skip


async def _drive_locust(
    plan: LoadPlan,
    config: ClientConfig,
    clock: RunClock,
    workers: int,
    *,
    on_record: RecordCallback | None,
    counters: LiveCounters | None,
    remote: RemoteWorkers,
    console: Console | None,
    stop: LoadStop | None,
    keep_records: bool = True,
) -> LoadResult:
    """drive_load's Locust path: ``plan`` refused where Locust cannot send it, else run by a
    Locust master and its workers (``remote``'s or ``workers`` local ones)."""
    refuse_for_locust(plan)
    if console is not None:
        for url in config.urls:
            print_loopback_note(console, url, remote)

    if stop is not None and on_record is not None:
        # Locust's workers know only that their users were stopped; the reason is ours, given
        # before the record is streamed to disk (and again below, for the records returned).
        take = on_record

        def on_record(record: RequestRecord) -> None:
            if record.status == "cancelled" and stop.is_set():
                record.error = stop.message()
            take(record)

    def tell(event: dict[str, Any]) -> None:
        if console is not None:
            print_locust_event(console, event, remote.expected)

    try:
        result = await asyncio.to_thread(
            run_locust, plan, config, clock, remote.local_workers(workers),
            on_record=on_record, counters=counters, on_event=tell, stop=stop,
            keep_records=keep_records, **remote.run_locust_arguments(),
        )  # fmt: skip
    except LocustError as exc:
        raise LoadError(str(exc)) from exc
    if stop is not None and stop.is_set():
        # Locust's workers know only that their users were stopped; the reason is ours.
        for record in result.records:
            if record.status == "cancelled":
                record.error = stop.message()
    return result


def record_load(
    folder: Path, result: LoadResult, plan: LoadPlan, driver: str, workers: int,
    remote: RemoteWorkers | None = None, scenario: Scenario | None = None,
) -> dict[str, Any]:  # fmt: skip
    """Write the client table (client.parquet) and, for a trace ``scenario``, the arrival plan
    (arrival_plan.parquet, results.folder.arrival_plan); return run.json's "load" section: with
    Locust, ``locust_workers`` lists each worker's host, status and measured clock offset."""
    write_client_table(folder, result.client)
    section = load_section(plan, driver, result.workers)
    section["workers_asked"] = workers
    section["client_table"] = "client.parquet"
    rows = arrival_rows(scenario, plan) if scenario is not None else None
    if rows is not None:
        write_arrival_plan(folder, rows)
        section["arrival_plan"] = ARRIVAL_PLAN_PARQUET
    if remote is not None and driver == "locust":
        section.update(remote.to_json())
        section["workers_asked"] = remote.local_workers(workers) + remote.expected
    if result.worker_info is not None:
        section["locust_workers"] = result.worker_info
    section["receive_stamps"] = run_stamps(
        result.stamps,
        "no client reported its connections (every Locust worker was lost before its end)",
    )
    return section
