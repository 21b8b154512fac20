"""From a scenario to a load plan: the requests (or sessions), and when they go out.

:func:`build_plan` reads the scenario's workload (synthetic, ShareGPT, multi-turn, trace,
dataset) and its load shape (closed-loop users, or open-loop arrivals), builds every request up
front (prompts of exact token lengths take about a millisecond each, which must not happen
during the load) and returns a :class:`loadgen.drivers.driver.LoadPlan`; every request carries
the scenario's ``[request]`` fields (a dataset row's own over them) and its ``[tools]`` and
``[images]`` (where a row brings none of its own), and the rows a file of prompts refused or
reused are counted in the plan's ``rows``. :func:`load_section` is run.json's
record of it.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from fractions import Fraction
from typing import Any

import numpy as np

from bench.scenario.models import ModelShare
from bench.scenario.scenario import Scenario
from loadgen.client.apportion import largest_remainder
from loadgen.drivers.driver import LoadPlan
from loadgen.protocols import TokenizerLike
from loadgen.request_spec import RequestSpec
from loadgen.request_tools import ToolOffer
from loadgen.workloads.dataset import DatasetSource, dataset_requests
from loadgen.workloads.multiturn import sharegpt_sessions, synthetic_sessions
from loadgen.workloads.pooling_inputs import group_inputs, prompts_needed
from loadgen.workloads.prompts import synthetic_requests
from loadgen.workloads.rows import RowReport
from loadgen.workloads.sessions.generate import agent_sessions
from loadgen.workloads.sharegpt import sharegpt_requests
from loadgen.workloads.trace import TraceEntry, TraceReplay, load_trace, replay_entries
from loadgen.workloads.trace_prompts import trace_requests
from perfmodel.files import JSONObject
from results.folder.arrival_plan import ArrivalRow
from results.schema.api_kinds import POOLING_APIS

__all__ = [
    "DURATION_REQUESTS_CAP",
    "arrival_rows",
    "assign_models",
    "build_plan",
    "load_section",
    "model_counts",
    "plan_ran_out",
    "planned_requests",
    "reads_rows",
    "trace_entries",
    "without_ignore_eos",
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


def plan_ran_out(scenario: Scenario, planned: int, recorded: int, elapsed_s: float) -> str | None:
    """The line to print when a duration-bound run without ``num_requests`` sent every request
    :func:`planned_requests` prepared (``planned``; ``recorded`` started) before ``duration_s``
    ran out (``elapsed_s`` seconds of load), since its load then ended early; else None."""
    duration = scenario.duration_s
    if duration is None or scenario.num_requests is not None or recorded < planned:
        return None
    if elapsed_s >= duration * 0.99:  # the duration, not the plan, ended it
        return None
    return (
        f"the load ran out of requests after {elapsed_s:.0f} s of duration_s = {duration:g} s: "
        f"without num_requests a duration-bound plan prepares {planned:,} requests (at most "
        f"{DURATION_REQUESTS_CAP:,}); set num_requests to send more"
    )


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


def reads_rows(scenario: Scenario) -> bool:
    """Whether the workload's requests are rows of a file of prompts, whose rows over the
    served context are refused one by one (a dataset, ShareGPT, multi-turn from a file)."""
    workload = scenario.workload
    return workload.kind == "dataset" or (
        workload.kind in ("sharegpt", "multiturn") and workload.path is not None
    )


def _file_sessions(
    scenario: Scenario, tokenizer: TokenizerLike, context_tokens: int | None, report: RowReport
) -> list[list[RequestSpec]]:
    """The sessions of a workload read from a file of prompts (:func:`reads_rows`)."""
    workload, common, n = scenario.workload, _common(scenario), planned_requests(scenario)
    assert workload.path is not None or workload.hub is not None
    if workload.kind == "dataset":
        specs = dataset_requests(
            workload, scenario.dataset or DatasetSource(), tokenizer, n, scenario.seed,
            **common, output_len=scenario.output_len, fields=scenario.request,
            context_tokens=context_tokens, report=report,
        )  # fmt: skip
    elif workload.kind == "multiturn":
        return sharegpt_sessions(
            workload.path, tokenizer, n, scenario.seed, **common,  # type: ignore[arg-type]
            max_turns=workload.turns, max_context_tokens=workload.max_context_tokens,
            context_tokens=context_tokens, report=report,
        )  # fmt: skip
    else:
        specs = sharegpt_requests(
            workload.path, tokenizer, n, scenario.seed, **common,  # type: ignore[arg-type]
            output_len=scenario.output_len, max_input_tokens=workload.max_input_tokens,
            max_output_tokens=workload.max_output_tokens, context_tokens=context_tokens,
            report=report,
        )  # fmt: skip
    return [[spec] for spec in specs]


def _with_fields(
    sessions: list[list[RequestSpec]], fields: dict[str, Any] | None
) -> list[list[RequestSpec]]:
    """Every request with the scenario's ``[request]`` fields (a dataset's carry them already,
    its rows' own over them)."""
    if not fields:
        return sessions
    return [[dataclasses.replace(spec, fields=dict(fields)) for spec in s] for s in sessions]


def _with_tools(
    sessions: list[list[RequestSpec]], offer: ToolOffer | None
) -> list[list[RequestSpec]]:
    """Every request that brings no tools of its own with the scenario's ``[tools]``."""
    if offer is None:
        return sessions
    choice = offer.tool_choice()
    return [
        [s if s.tools else dataclasses.replace(s, tools=offer.tools, tool_choice=choice)
         for s in session]
        for session in sessions
    ]  # fmt: skip


def build_plan(
    scenario: Scenario, tokenizer: TokenizerLike, context_tokens: int | None = None
) -> LoadPlan:
    """The load plan of ``scenario``, its prompts built with ``tokenizer`` (module docstring);
    ``context_tokens``, the served context where known, refuses the rows of a file of prompts
    that do not fit it (the others' longest request is checked by the pre-flight)."""
    workload = scenario.workload
    common = _common(scenario)
    schedule = None
    rows: dict[str, Any] | None = None
    if workload.kind == "trace":
        specs, schedule = trace_requests(
            trace_entries(scenario), tokenizer, scenario.seed, **common,
            block_tokens=(scenario.trace or TraceReplay()).block_tokens,
        )  # fmt: skip
        sessions: list[list[Any]] = [[spec] for spec in specs]
    elif reads_rows(scenario):
        report = RowReport(str(workload.hub or workload.path))
        sessions = _file_sessions(scenario, tokenizer, context_tokens, report)
        rows = report.to_json()
        rows["lines"] = report.lines()
    elif workload.kind == "sessions":
        sessions, starts = agent_sessions(
            workload, scenario.sessions, tokenizer,
            scenario.num_requests if workload.path else planned_requests(scenario),
            scenario.seed, input_len=scenario.input_len, output_len=scenario.output_len,
            ignore_eos=scenario.ignore_eos, temperature=scenario.temperature,
            fields=scenario.request,
        )  # fmt: skip
        schedule = None if starts is None else np.asarray(starts, dtype=np.float64)
    elif workload.kind == "multiturn":
        assert scenario.input_len and scenario.output_len and workload.turns
        sessions = synthetic_sessions(
            tokenizer, planned_requests(scenario), workload.turns, scenario.input_len,
            scenario.output_len, scenario.seed, **common,
            system_prompt_tokens=workload.system_prompt_tokens or 0,
        )  # fmt: skip
    else:
        assert scenario.input_len and scenario.output_len
        n = planned_requests(scenario)
        pooling = scenario.api in POOLING_APIS
        per_request = scenario.inputs_per_request or 1
        if pooling:  # several prompts per request (loadgen.workloads.pooling_inputs)
            n = prompts_needed(scenario.api, n, per_request)
        specs = synthetic_requests(
            tokenizer, n, scenario.input_len, scenario.output_len, seed=scenario.seed,
            **common, shared_prefix=scenario.shared_prefix,
        )  # fmt: skip
        if pooling:
            specs = group_inputs(specs, scenario.api, per_request)
        sessions = [[spec] for spec in specs]
    if workload.kind not in ("dataset", "sessions"):  # they carry the fields already
        sessions = _with_fields(sessions, scenario.request)
    sessions = _with_tools(sessions, scenario.tools)
    if scenario.images is not None:  # after the fields and tools: a row's own images win
        sessions = scenario.images.apply(sessions, scenario.seed)
    if scenario.arrival is not None and workload.kind != "multiturn":
        schedule = scenario.arrival.schedule(len(sessions), scenario.seed, scenario.ramp_up_s)
    if scenario.abandon is not None:
        sessions = scenario.abandon.apply(sessions, scenario.seed)
    if scenario.models:
        sessions = assign_models(sessions, scenario.models, scenario.seed)
    return LoadPlan(
        mode="open" if schedule is not None else "closed",
        sessions=sessions,
        users=scenario.users,
        schedule_s=schedule,
        duration_s=scenario.duration_s,
        think_time_s=scenario.think_time_s,
        ramp_up_s=0.0 if schedule is not None else scenario.ramp_up_s,
        rows=rows,
    )


def without_ignore_eos(plan: LoadPlan) -> LoadPlan:
    """``plan`` with every request sent without ignore_eos (a server that refuses it)."""
    sessions = [[dataclasses.replace(spec, ignore_eos=False) for spec in s] for s in plan.sessions]
    return dataclasses.replace(plan, sessions=sessions)


def model_counts(total: int, models: Sequence[ModelShare]) -> list[int]:
    """How many of ``total`` requests (or sessions) each of ``models`` gets: exact counts in
    proportion to the shares, summing to ``total`` (loadgen.client.apportion.largest_remainder
    over the shares made integers: 0.5/0.3/0.2 are 5/3/2)."""
    fractions = [Fraction(m.share).limit_denominator(10**6) for m in models]
    scale = math.lcm(*(f.denominator for f in fractions))
    return largest_remainder(total, [int(f * scale) for f in fractions])


def assign_models(
    sessions: Sequence[Sequence[RequestSpec]], models: Sequence[ModelShare], seed: int
) -> list[list[RequestSpec]]:
    """``sessions`` with a model of ``models`` (a scenario's ``[[models]]``) on every request.

    Each session takes one model for all its turns (a conversation stays with its model); a
    session whose requests already name one (a workload's per-row model) keeps it. The others
    are split in the exact counts of :func:`model_counts`, which session gets which model drawn
    by ``seed``: the same scenario sends the same requests to the same models.
    """
    free = [i for i, session in enumerate(sessions) if all(s.model is None for s in session)]
    labels = [
        m.name for m, n in zip(models, model_counts(len(free), models), strict=True)
        for _ in range(n)
    ]  # fmt: skip
    # Its own stream of the seed, so that the split draws nothing from the prompts' generator.
    np.random.default_rng([seed, 0x6D6F64656C]).shuffle(labels)
    chosen = dict(zip(free, labels, strict=True))
    return [
        [dataclasses.replace(s, model=chosen[i]) for s in session] if i in chosen else list(session)
        for i, session in enumerate(sessions)
    ]


def load_section(plan: LoadPlan, driver: str, workers: int) -> JSONObject:
    """run.json's "load": how the load ran (the scenario has the rest)."""
    requests = plan.requests
    section: JSONObject = {
        "mode": plan.mode,
        "driver": driver,
        "workers": workers,
        "requests_planned": len(requests),
        "sessions": len(plan.sessions),
        "max_in_flight": plan.cap,
    }
    if plan.rows is not None:
        section["rows"] = {k: v for k, v in plan.rows.items() if k != "lines"}
    if plan.schedule_s is not None and len(plan.schedule_s):
        span = float(plan.schedule_s[-1] - plan.schedule_s[0])
        section["schedule_span_s"] = span
        section["planned_rate_rps"] = (len(requests) - 1) / span if span > 0 else None
    return section
