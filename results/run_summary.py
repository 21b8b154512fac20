"""summary.json of a run folder, from its files alone.

One function for `bench run` (after the tables and run.json are written) and for anything that
recomputes a summary from a folder (`bench report` when summary.json is missing, tests), so the
two can never disagree:
- the request figures (results.figures.summary.compute_summary, with the scenario's window and
  SLOs),
- "per_user_tps_by_phase" and "attribution" (results.figures.attribution: prefill vs decode,
  memory- vs
  compute-bound, MFU and MBU, from steps.parquet and run.json's "analytic"),
- "probes" (results.figures.samples_summary: energy per output token, GPU, CPU and engine gauges),
- "machine_load": whether other processes loaded the machine (results.figures.machine_load),
- "engine_estimates": the engine's own FLOP counter beside the analytic count, when exported,
- "usability": whether the run can be used (results.validity.usability, with run.json's threshold; a
  run whose engine died is not),
- "token_reconciliation": the client's, the server's and the engine's token counts side by side
  (results.validity.token_reconciliation),
- "energy_by_phase": joules split into prefill and decode by the steps, goodput per watt
  (results.figures.energy_phase),
- "validity": what makes the run not comparable (results.validity.run_validity: throttling,
  powersave,
  XID, ECC, a busy machine, token counts apart), from run.json's fingerprint and the above,
- "simulated" and "prefix_cache" (results.figures.engine_facts: the simulated device, and the prompt
  tokens the prefix cache spared from prefill), from run.json's engine section,
- "abandoned": the requests the workload abandoned mid-stream, when any (results.figures.abandoned),
- "tool_calls": the tool calls the answers made, when tools were offered or called
  (results.figures.workloads.tool_calls),
- "images": the images the requests sent, their tokens as the server counted them, TTFT by
  image count, when any were sent (results.figures.workloads.images),
- "sessions": agent sessions' and multi-turn chats' figures per turn and per session, when the
  requests belong to sessions (results.figures.workloads.sessions),
- "partial", "interrupted", "engine_died" for a run that ended early (results.validity.run_end),
- "endpoints": the request figures per replica of a fleet run (results.figures.fleet),
- "models": the request figures per model of a run that sent several (results.figures.models).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import cast

from perfmodel.files import JSONView, json_safe
from results.figures.abandoned import abandoned_summary
from results.figures.attribution import (
    engine_estimate_check,
    per_user_tps_by_phase,
    step_attribution,
)
from results.figures.client_check import client_health, read_client_table, read_delay
from results.figures.energy_phase import energy_by_phase
from results.figures.engine_facts import prefix_cache_reuse, simulated_device
from results.figures.fleet import endpoint_section
from results.figures.machine_load import machine_load
from results.figures.models import model_section
from results.figures.samples_summary import engine_flops_increase, gpu_scope, samples_summary
from results.figures.summary import compute_summary
from results.figures.workloads.images import images_summary
from results.figures.workloads.sessions import session_summary
from results.figures.workloads.tool_calls import tool_calls_summary
from results.folder.endpoints import fleet_endpoints
from results.folder.engine_steps import same_host
from results.folder.run_folder import RunData
from results.schema import SummaryJson
from results.validity.run_end import ended_early, engine_death_line, run_end_summary
from results.validity.run_validity import run_validity
from results.validity.token_reconciliation import token_reconciliation
from results.validity.usability import run_max_error_rate, usability


def request_summary(run: RunData) -> SummaryJson:
    """compute_summary of the run's requests and tokens, with the window and SLOs its scenario
    (run.json) set: the request figures of summary.json alone. Raises ValueError as it does."""
    scenario = run.run_json["scenario"]
    return compute_summary(
        run.requests,
        run.token_source,
        scenario.get("warmup_s") or 0.0,
        scenario.get("cooldown_s") or 0.0,
        scenario.get("slo"),
    )


def _remote_engine_url(run_json: JSONView) -> str | None:
    """The engine's base URL when run.json records one on another host, else None."""
    engine = run_json.get("engine")
    url = engine.get("url") if isinstance(engine, Mapping) else None
    return url if isinstance(url, str) and url and not same_host(url) else None


def summarize_run(run: RunData) -> SummaryJson:
    """The summary.json of ``run`` (module docstring); deterministic for the same files."""
    summary = request_summary(run)
    window = summary["window"]
    analytic = run.run_json.get("analytic")
    if "ttft_ms" in summary:  # a pooling run has no first token (results.figures.workloads.pooling)
        summary["per_user_tps_by_phase"] = per_user_tps_by_phase(run.requests, window)
    summary["attribution"] = step_attribution(run.steps, analytic, window)
    died = run.run_json.get("engine_died")
    if run.steps is None and died:
        # Its steps died with it: say so rather than that the engine records none.
        reason = f"no steps.parquet: {engine_death_line(died)}"
        summary["attribution"] = {"available": False, "reason": reason}
    elif run.steps is None and len(fleet_endpoints(run.run_json)) > 1:
        # One table would mix replicas that each step on their own (results.figures.fleet).
        reason = "no steps.parquet: a fleet run records no engine steps"
        summary["attribution"] = {"available": False, "reason": reason}
    elif run.steps is None and (remote := _remote_engine_url(run.run_json)):
        # Its steps are on another host's clock: they were never fetched.
        reason = f"no steps.parquet: the engine at {remote} runs on another host"
        summary["attribution"] = {"available": False, "reason": reason}
    summary["probes"] = samples_summary(run.samples, run.token_source, window)
    scope = gpu_scope(run.run_json)
    if scope is not None and summary["probes"].get("available"):
        # Which GPUs the GPU figures are over, and why those (run.json's probes).
        summary["probes"]["gpu"]["scope"] = scope
    load = machine_load(run.samples, window)
    if load["available"]:  # a folder recorded before the CPU counters keeps its summary
        summary["machine_load"] = load
    summary["engine_estimates"] = engine_estimate_check(
        run.requests, analytic, engine_flops_increase(run.samples)
    )
    # The load generator's self-check (client.parquet): lags, CPU, and the client-bound verdict.
    summary["client"] = client_health(
        read_client_table(run.path), summary["tokens"]["output_tokens"], summary["window"],
        delay=read_delay(run.requests, run.token_source, summary["window"]),
    )  # fmt: skip
    scenario = run.run_json.get("scenario") or {}
    engine = run.run_json.get("engine")
    simulated = simulated_device(engine.get("description") if isinstance(engine, Mapping) else None)
    summary["token_reconciliation"] = token_reconciliation(
        run.requests, run.samples, scenario.get("api"), simulated=simulated is not None
    )
    summary["energy_by_phase"] = energy_by_phase(
        run.samples, run.steps, analytic, window, summary["goodput"]["requests_per_s"]
    )
    summary["validity"] = run_validity(run.run_json, summary)
    summary["simulated"] = simulated
    summary["prefix_cache"] = prefix_cache_reuse(run)
    if (abandoned := abandoned_summary(run.requests)) is not None:
        summary["abandoned"] = abandoned
    offered = bool(scenario.get("tools"))
    if (tools := tool_calls_summary(run.requests, window, offered)) is not None:
        summary["tool_calls"] = tools
    if (images := images_summary(run.requests, window, bool(scenario.get("images")))) is not None:
        summary["images"] = images
    if (sessions := session_summary(run.requests)) is not None:
        summary["sessions"] = sessions
    fleet = endpoint_section(run.requests, run.token_source, run.run_json, window, run.samples)
    if fleet is not None:
        summary["endpoints"] = fleet
    if (models := model_section(run.requests, run.token_source, run.run_json, window)) is not None:
        summary["models"] = models
    summary.update(run_end_summary(run.run_json))
    summary["usability"] = usability(
        run.requests, run_max_error_rate(run.run_json), ended_early(run.run_json)
    )
    return cast(SummaryJson, json_safe(summary))
