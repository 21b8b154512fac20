"""From a scenario to a load plan: the requests (or sessions), and when they go out.

:func:`build_plan` reads the scenario's workload (synthetic, ShareGPT, multi-turn, trace) and its
load shape (closed-loop users, or open-loop arrivals), builds every request up front (prompts of
exact token lengths take about a millisecond each, which must not happen during the load) and
returns a :class:`loadgen.drivers.driver.LoadPlan`. :func:`load_section` is run.json's record of it.
"""

from __future__ import annotations

import math
from typing import Any

from bench.scenario.scenario import Scenario
from loadgen.drivers.driver import LoadPlan
from loadgen.protocols import TokenizerLike
from loadgen.request_spec import POOLING_APIS
from loadgen.workloads.multiturn import sharegpt_sessions, synthetic_sessions
from loadgen.workloads.pooling_inputs import group_inputs, prompts_needed
from loadgen.workloads.prompts import synthetic_requests
from loadgen.workloads.sharegpt import sharegpt_requests
from loadgen.workloads.trace import TraceEntry, TraceReplay, load_trace, replay_entries
from loadgen.workloads.trace_prompts import trace_requests
from results.folder.arrival_plan import ArrivalRow

__all__ = [
    "DURATION_REQUESTS_CAP",
    "arrival_rows",
    "build_plan",
    "load_section",
    "planned_requests",
    "trace_entries",
]

# A duration-bound run without num_requests prepares this many requests at most; set
# num_requests to go beyond.
DURATION_REQUESTS_CAP = 5000


def planned_requests(scenario: Scenario) -> int:
    """How many requests to prepare: ``num_requests``, else enough to outlast ``duration_s``.

    Closed loop: ``users * max(20, duration_s)``; open loop: the expected arrivals in the
    duration plus 20 % and 10; both capped at :data:`DURATION_REQUESTS_CAP`.
    """
    if scenario.num_requests is not None:
        return scenario.num_requests
    assert scenario.duration_s is not None, "a scenario without num_requests has a duration"
    if scenario.arrival is not None:
        expected = scenario.arrival.rate_rps * scenario.duration_s
        return min(DURATION_REQUESTS_CAP, math.ceil(expected * 1.2) + 10)
    per_user = max(20, int(scenario.duration_s))
    return min(DURATION_REQUESTS_CAP, scenario.users * per_user)


def _common(scenario: Scenario) -> dict[str, Any]:
    return {
        "api": scenario.api,
        "ignore_eos": scenario.ignore_eos,
        "temperature": scenario.temperature,
    }


def trace_entries(scenario: Scenario) -> list[TraceEntry]:
    """The trace entries a trace scenario sends, in order: read, windowed and rescaled by its
    ``[trace]`` table (loadgen.workloads.trace.replay_entries), times in s from 0."""
    workload = scenario.workload
    assert workload.kind == "trace" and workload.path is not None
    replay = scenario.trace or TraceReplay()
    entries = load_trace(workload.path, workload.time_scale or 1.0, replay.format)
    return replay_entries(entries, replay, scenario.num_requests)


def arrival_rows(scenario: Scenario, plan: LoadPlan) -> list[ArrivalRow] | None:
    """The arrival plan of a trace run (results.folder.arrival_plan), one row per planned request;
    None for other workloads."""
    if scenario.workload.kind != "trace" or plan.schedule_s is None:
        return None
    entries = trace_entries(scenario)
    return [
        ArrivalRow(
            request_id=spec.request_id, planned_offset_s=float(t), input_length=e.input_length,
            prompt_tokens=spec.prompt_tokens, output_length=e.output_length,
            num_hash_ids=len(e.hash_ids),
        )
        for spec, t, e in zip(plan.requests, plan.schedule_s, entries, strict=True)
    ]  # fmt: skip


def build_plan(scenario: Scenario, tokenizer: TokenizerLike) -> LoadPlan:
    """The load plan of ``scenario``, its prompts built with ``tokenizer`` (module docstring)."""
    workload = scenario.workload
    common = _common(scenario)
    schedule = None
    if workload.kind == "trace":
        specs, schedule = trace_requests(
            trace_entries(scenario), tokenizer, scenario.seed, **common,
            block_tokens=(scenario.trace or TraceReplay()).block_tokens,
        )  # fmt: skip
        sessions: list[list[Any]] = [[spec] for spec in specs]
    elif workload.kind == "multiturn":
        n = planned_requests(scenario)
        if workload.path is not None:
            sessions = sharegpt_sessions(
                workload.path, tokenizer, n, scenario.seed, **common,
                max_turns=workload.turns, max_context_tokens=workload.max_context_tokens,
            )  # fmt: skip
        else:
            assert scenario.input_len and scenario.output_len and workload.turns
            sessions = synthetic_sessions(
                tokenizer, n, workload.turns, scenario.input_len, scenario.output_len,
                scenario.seed, **common,
                system_prompt_tokens=workload.system_prompt_tokens or 0,
            )  # fmt: skip
    else:
        n = planned_requests(scenario)
        pooling = scenario.api in POOLING_APIS
        per_request = scenario.inputs_per_request or 1
        if pooling:  # several prompts per request (loadgen.workloads.pooling_inputs)
            n = prompts_needed(scenario.api, n, per_request)
        if workload.kind == "sharegpt":
            assert workload.path is not None
            specs = sharegpt_requests(
                workload.path, tokenizer, n, scenario.seed, **common,
                output_len=scenario.output_len,
                max_input_tokens=workload.max_input_tokens,
                max_output_tokens=workload.max_output_tokens,
            )  # fmt: skip
        else:
            assert scenario.input_len and scenario.output_len
            specs = synthetic_requests(
                tokenizer, n, scenario.input_len, scenario.output_len, seed=scenario.seed,
                **common, shared_prefix=scenario.shared_prefix,
            )  # fmt: skip
        if pooling:
            specs = group_inputs(specs, scenario.api, per_request)
        sessions = [[spec] for spec in specs]
        if scenario.arrival is not None:
            schedule = scenario.arrival.schedule(len(sessions), scenario.seed, scenario.ramp_up_s)
    if scenario.abandon is not None:
        sessions = scenario.abandon.apply(sessions, scenario.seed)
    return LoadPlan(
        mode="open" if schedule is not None else "closed",
        sessions=sessions,
        users=scenario.users,
        schedule_s=schedule,
        duration_s=scenario.duration_s,
        think_time_s=scenario.think_time_s,
        ramp_up_s=0.0 if schedule is not None else scenario.ramp_up_s,
    )


def load_section(plan: LoadPlan, driver: str, workers: int) -> dict[str, Any]:
    """run.json's "load": how the load ran (the scenario has the rest)."""
    requests = plan.requests
    section: dict[str, Any] = {
        "mode": plan.mode,
        "driver": driver,
        "workers": workers,
        "requests_planned": len(requests),
        "sessions": len(plan.sessions),
        "max_in_flight": plan.cap,
    }
    if plan.schedule_s is not None and len(plan.schedule_s):
        span = float(plan.schedule_s[-1] - plan.schedule_s[0])
        section["schedule_span_s"] = span
        section["planned_rate_rps"] = (len(requests) - 1) / span if span > 0 else None
    return section
