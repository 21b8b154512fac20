"""The options only `bench run` takes (bench.cli.flags.shared holds those it shares), declared once,
and what turns them into RunOptions (bench.run.orchestrate): the load overrides applied over the
scenario and the settings checked before any engine starts.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from bench.cli.flags.shared import BenchOption
from bench.scenario.request_tables import parse_extra_body
from bench.scenario.scenario import Scenario, scenario_from_dict
from loadgen.client.limits import DEFAULT_READ_TIMEOUT_S, DEFAULT_REQUEST_TIMEOUT_S
from loadgen.drivers.locust.driver import DEFAULT_JOIN_TIMEOUT_S, DEFAULT_WORKER_TIMEOUT_S

__all__ = ["LOAD_OVERRIDES", "override_load", "override_request"]

Nsys = BenchOption(
    bool,
    False,
    "Run the launched engine under `nsys profile -t cuda,nvtx`; the report goes to the run "
    "folder as engine.nsys-rep (says so when nsys is not on PATH).",
).annotated()
Gpus = BenchOption(
    str | None,
    None,
    "The engine's GPUs for the probes when neither its processes nor its CUDA_VISIBLE_DEVICES "
    "show them (a --url engine): NVML indices or GPU-/MIG- UUIDs, comma-separated. Without "
    "either, every GPU is sampled and the run says so.",
    metavar="IDS",
).annotated()
MetricsUrl = BenchOption(
    list[str] | None,
    None,
    "[LABEL=]URL of a /metrics the probes scrape instead of the --url's (a router's, a "
    "gateway's, a prefill or decode server's); repeat for more, each series labelled scrape="
    "LABEL (default: the URL). A URL without a path gets the engine's metrics path.",
    metavar="[LABEL=]URL",
).annotated()
Repeat = BenchOption(
    int,
    1,
    "Run the scenario N times (a fresh engine each), one run folder each, grouped in one "
    "folder with group.json: what `bench baseline save` and `bench gate` take.",
    metavar="N",
    minimum=1,
).annotated()
Driver = BenchOption(
    str, "asyncio", "asyncio (this process, or --workers processes) or locust.", metavar="NAME"
).annotated()
ExpectWorkers = BenchOption(
    int,
    0,
    "Locust: start no local worker; wait for N that join with `bench worker --master "
    "HOST:PORT` (printed), from other machines or this one.",
    metavar="N",
    minimum=0,
).annotated()
MasterBind = BenchOption(
    str | None,
    None,
    "Locust: HOST:PORT the master listens on for workers (e.g. 0.0.0.0:5557).",
    metavar="HOST:PORT",
).annotated()
WorkerJoinTimeout = BenchOption(
    float,
    DEFAULT_JOIN_TIMEOUT_S,
    "Locust: seconds to wait for every worker to join.",
    metavar="SECONDS",
).annotated()
WorkerTimeout = BenchOption(
    float,
    DEFAULT_WORKER_TIMEOUT_S,
    "Locust: a worker silent this many seconds is lost (its requests fail).",
    metavar="SECONDS",
).annotated()
Launch = BenchOption(
    str | None,
    None,
    "Start the --engine with this command line ({port}, {model}, {host}, {exe} filled in), "
    "wait for it, and stop it after the run.",
    metavar="COMMAND",
).annotated()
LaunchModel = BenchOption(
    str | None,
    None,
    "Start the --engine's usual command line for this model (a HF dir; a .gguf for llamacpp); "
    "also the default --tokenizer.",
    metavar="MODEL",
).annotated()
# Overrides of the scenario's load, so that a small run needs no TOML file of its own.
Users = BenchOption(
    int | None,
    None,
    "The scenario's users, overridden (closed loop: concurrent users; open loop: the most in "
    "flight).",
    metavar="N",
    minimum=1,
).annotated()
NumRequests = BenchOption(
    int | None, None, "The scenario's num_requests, overridden.", metavar="N", minimum=1
).annotated()
InputLen = BenchOption(
    int | None,
    None,
    "Every prompt this many tokens: the scenario's [input_len], overridden by a fixed length.",
    metavar="TOKENS",
    minimum=1,
).annotated()
OutputLen = BenchOption(
    int | None,
    None,
    "Every answer this many tokens: the scenario's [output_len], overridden by a fixed length.",
    metavar="TOKENS",
    minimum=1,
).annotated()
# The client's limits (loadgen.client.limits), over the scenario's keys of the same name.
RequestTimeout = BenchOption(
    float | None,
    None,
    "The longest one request may take, sent to last byte (scenario request_timeout_s; "
    f"default {DEFAULT_REQUEST_TIMEOUT_S:g}); a request past it fails, saying so.",
    metavar="SECONDS",
    minimum=0.001,
).annotated()
ReadTimeout = BenchOption(
    float | None,
    None,
    "The longest silence within one answer, its headers included (scenario read_timeout_s; "
    f"default {DEFAULT_READ_TIMEOUT_S:g}); a request silent that long fails, saying so.",
    metavar="SECONDS",
    minimum=0.001,
).annotated()
ExtraBody = BenchOption(
    str | None,
    None,
    "A JSON object of request fields merged into every request (over the scenario's "
    "[request] table; a dataset row's own fields win over both), e.g. "
    '\'{"chat_template_kwargs": {"enable_thinking": false}, "top_k": 20}\'.',
    metavar="JSON",
).annotated()

# The scenario keys the load overrides replace, by option.
LOAD_OVERRIDES = {
    "--users": "users",
    "--num-requests": "num_requests",
    "--input-len": "input_len",
    "--output-len": "output_len",
    "--request-timeout": "request_timeout_s",
    "--read-timeout": "read_timeout_s",
}


def override_load(scenario: Scenario, overrides: Mapping[str, float | None]) -> Scenario:
    """``scenario`` with the given load overrides (by scenario key; None: keep the scenario's),
    validated as the scenario file is, so run.json's scenario records them as if the file had
    said so. A fixed length replaces an [input_len]/[output_len] table.

    Raises bench.scenario.scenario.ScenarioError: an override the scenario cannot take (a
    length for a workload that reads its lengths from a file).
    """
    given = {key: value for key, value in overrides.items() if value is not None}
    if not given:
        return scenario
    data: dict[str, Any] = scenario.to_dict()
    for key, value in given.items():
        data[key] = {"kind": "fixed", "value": value} if key.endswith("_len") else value
    named = [f"{flag} {given[key]}" for flag, key in LOAD_OVERRIDES.items() if key in given]
    options = ", ".join(named)
    return scenario_from_dict(data, source=f"{scenario.source} with {options}")


def override_request(scenario: Scenario, extra_body: str | None) -> Scenario:
    """``scenario`` with ``--extra-body``'s fields over its ``[request]`` table, validated as
    the file is, so that run.json's scenario records every field sent.

    Raises bench.scenario.scenario.ScenarioError: not a JSON object, or a reserved field.
    """
    if extra_body is None:
        return scenario
    data: dict[str, Any] = scenario.to_dict()
    data["request"] = {**(scenario.request or {}), **parse_extra_body(extra_body)}
    return scenario_from_dict(data, source=f"{scenario.source} with --extra-body")
