"""run.json: what a run was (scenario, engine, machine, code, clock), declared once.

Written by `bench run` (bench.run.orchestrate) and `bench simulate` (bench.sim.simulate) through
results.folder.run_folder.RunFolder.write_run_json, which checks the document against
:class:`RunJson`
and refuses an undeclared top-level key; read by results.folder.run_folder.load_run through
:func:`upgrade_run_json`, the one place that knows older versions.

Versions:
- 0: run folders written before run.json carried a ``schema_version``. The same keys as
  version 1; the sections marked "since" below are absent in the oldest of them.
- 1: ``schema_version`` first, then the keys below, ``tokenizer`` a plain name (or null);
  ``interrupted`` and ``engine_died`` for a run ended early, since interrupted runs were kept.
- 2: ``tokenizer`` says where the tokenizer came from and how prompt lengths were made
  (:class:`TokenizerSection`); a version 0 or 1 name is read as source ``"unrecorded"``.

Sections owned by another package stay opaque here (``JSONObject``): the scenario
(bench.scenario's resolved form), the engine's settings and its /debug/engine description
(engine.config), the probes' health (probes.session) and the load plan (bench.run.load_plan).
"""

# No `from __future__ import annotations`: TypedDict reads NotRequired from evaluated annotations
# only (Python 3.11 takes every string annotation as required).
from typing import Any, Literal, NotRequired, TypedDict, cast

from perfmodel.files import JSONObject, JSONView
from results.schema.check import check_document, check_for_writing, schema_version_of, stamped

__all__ = [
    "RUN_JSON_VERSION",
    "Analytic",
    "ClientClock",
    "EngineDeath",
    "EngineSection",
    "Hardware",
    "Interruption",
    "Precision",
    "Recorded",
    "Roofs",
    "RunJson",
    "Simulation",
    "TokenizerSection",
    "TokenizerSourceKind",
    "check_run_json",
    "upgrade_run_json",
]

RUN_JSON_VERSION = 2

# Where a run's tokenizer came from (bench.run.endpoint.tokenizer_source): a local folder, a
# preset, a
# Hugging Face Hub id, the endpoint's /tokenize; "unrecorded" for a run.json before version 2.
TokenizerSourceKind = Literal["folder", "preset", "hub", "server", "unrecorded"]


class EngineSection(TypedDict, total=False):
    """The engine the load ran against.

    adapter: the engine_adapters name ("reference", "vllm", ...). url: the base URL the load
    was sent to (None when simulated). launched: whether bench started the engine.
    launch_command: its command line when it did. settings: the EngineConfig fields asked of
    the reference engine (None for another engine). startup_s: seconds until it was healthy.
    model: the served model name the requests named. description: the engine's /debug/engine at
    the start, as it returned it (None when it offers none). stats_end: its cumulative counters
    after the load (minus description["stats"]: this run's). A fleet run (several ``--url``,
    results.figures.fleet) adds endpoints: every replica's base URL in ``--url`` order (url is the
    first), and route: the routing policy that spread the requests over them.
    """

    adapter: str
    url: str | None
    launched: bool
    launch_command: list[str] | None
    settings: JSONObject | None
    startup_s: float | None
    model: str | None
    description: Any
    stats_end: Any
    endpoints: list[str]
    route: str


class Recorded(TypedDict, total=False):
    """Which optional files the run wrote: steps.parquet, samples.parquet, client.parquet, and
    the nsys report's file name (``bench run --nsys``). Since probes and step telemetry."""

    steps: bool
    samples: bool
    client: bool
    nsys: str


class Hardware(TypedDict, total=False):
    """The machine the run ran on (for a simulated run, ``gpus`` names the simulated parts and
    ``simulated`` is true). memory_bytes: physical RAM."""

    cpu: str
    cpu_count_logical: int | None
    cpu_count_physical: int | None
    memory_bytes: int
    gpus: list[str]
    platform: str
    simulated: bool


class Precision(TypedDict):
    """Short dtype names ("bf16", "fp8", "int4") the analytic model assumes."""

    weight_dtype: str
    kv_dtype: str
    activation_dtype: str


class Roofs(TypedDict):
    """The peaks MFU and MBU are measured against.

    name: the hardware ("NVIDIA H100 80GB HBM3"); source: where the figures come from (the
    hardware table's citation, `bench calibrate`, the simulated part); compute_dtype: the
    tensor-core dtype of ``flops_per_s``; flops_per_s: peak FLOP/s; bytes_per_s: peak memory
    bytes/s; ridge_flop_per_byte: flops_per_s / bytes_per_s, written for readers' convenience.
    """

    name: str
    source: str
    compute_dtype: str
    flops_per_s: float
    bytes_per_s: float
    ridge_flop_per_byte: NotRequired[float]


class Analytic(TypedDict, total=False):
    """The analytic model's inputs, so the attribution can be recomputed from the folder alone:
    the model shape (perfmodel.model_config.ModelConfig.to_dict, None when unknown), dtypes,
    tensor-parallel degree, roofs (None with the reason in ``roofs_reason`` and ``notes``)."""

    model_config: JSONObject | None
    precision: Precision
    tp: int
    roofs: Roofs | None
    roofs_reason: str | None
    notes: list[str]


class ClientClock(TypedDict):
    """The run clock: the clock's name ("time.perf_counter_ns", or "virtual" when simulated) and
    its reading at the run's start (every time in the tables is seconds since ``t0_ns``)."""

    clock: str
    t0_ns: int


class Simulation(TypedDict):
    """A simulated run's cost: wall seconds it took, virtual seconds it covered, engine steps."""

    wall_s: float
    simulated_s: float
    steps: int


class TokenizerSection(TypedDict):
    """The tokenizer the prompts were built with.

    source: TokenizerSourceKind. name: the folder, preset, Hub id (``org/name``), or for
    ``server`` the served model. revision: the Hub commit of the snapshot (Hub only).
    prompt_lengths: how prompts of exact token lengths were made, "client tokenizer" (this
    tokenizer, in the client) or "server /tokenize" (the endpoint's own tokenizer).
    """

    source: TokenizerSourceKind
    name: str
    revision: NotRequired[str]
    prompt_lengths: Literal["client tokenizer", "server /tokenize"]


class Interruption(TypedDict):
    """A run ended early by a signal (bench.run.end.interrupt). signal: the first one's name
    ("SIGINT", "SIGTERM"); signals: how many arrived (2 or more: report.html was skipped); t_s:
    the first one's time on the run clock, s; utc: its UTC ISO 8601 time; phase: "load" (the load
    was cut) or "after the load" (it had finished); requests_recorded: rows in requests.parquet;
    cancelled_in_flight: those cut in flight (status "cancelled"); requests_planned: requests the
    load would have sent (None for a load bounded by its duration); not_sent: planned requests
    that never went out (they have no row; None when nothing was planned)."""

    signal: str
    signals: int
    t_s: float
    utc: str
    phase: Literal["load", "after the load"]
    requests_recorded: int
    cancelled_in_flight: int
    requests_planned: int | None
    not_sent: int | None


class EngineDeath(TypedDict):
    """The engine died during the run (bench.run.launch.engine_watch). t_s: when, on the run clock,
    s
    (the first failure of the final run of failures, or the launched process's exit as seen if
    earlier; None when no request failed); detected_by: "process exit" or "health check"
    (unreachable after the load); exit_code: the process's exit status (None when not launched
    by bench or killed by a signal); signal: the signal that killed it ("SIGKILL"), else None;
    failed_in_flight: requests sent before t_s that did not succeed (failed, or cut when the load
    stopped); refused: requests sent after t_s, which failed without reaching it; not_sent:
    planned requests the load then never sent (None for a load bounded by its duration)."""

    t_s: float | None
    detected_by: Literal["process exit", "health check"]
    exit_code: int | None
    signal: str | None
    failed_in_flight: int
    refused: int
    not_sent: int | None


class RunJson(TypedDict):
    """run.json (module docstring). Times are UTC ISO 8601 strings; git_commit is the checkout's
    HEAD ("+dirty" with uncommitted changes) or None outside a checkout; versions maps a package
    to its installed version."""

    schema_version: int
    run_id: str
    scenario: JSONObject
    engine: EngineSection
    tokenizer: TokenizerSection | None
    hardware: Hardware
    versions: dict[str, str]
    git_commit: str | None
    started_utc: str
    ended_utc: str
    client: ClientClock
    # Since step telemetry and the probes.
    recorded: NotRequired[Recorded]
    analytic: NotRequired[Analytic]
    probes: NotRequired[JSONObject]
    # Since the load generator's drivers and client self-check.
    load: NotRequired[JSONObject]
    # `bench simulate` only.
    simulation: NotRequired[Simulation]
    # Since the exit codes: the share of failed requests (0..1) above which the run is not usable
    # (`bench run --max-error-rate`; results.validity.usability, whose default applies where
    # absent).
    max_error_rate: NotRequired[float]
    # Since run validity: bench.run.endpoint.run_fingerprint's snapshots, XID watch and engine
    # identity,
    # judged by results.validity.run_validity.
    fingerprint: NotRequired[JSONObject]
    # Since [prefix_cache]: the state asked (flush, prime, leave), the reset endpoint's answer
    # or "not supported by <engine>", the priming pass, and the load's prefix-cache hit rate
    # (bench.run.endpoint.cache_state).
    prefix_cache: NotRequired[JSONObject]
    # A run ended early: by a signal, or by its engine's death.
    interrupted: NotRequired[Interruption]
    engine_died: NotRequired[EngineDeath]
    # Since records are streamed to disk: the run.json written as the load begins says how
    # records are flushed (``flush_s``, ``flush_rows``); the final one has no such key, so a
    # folder that keeps it is of a run killed before its end (results.folder.parts.record_stream).
    incomplete: NotRequired[JSONObject]


def check_run_json(data: JSONView, source: str) -> RunJson:
    """``data`` as a RunJson to write: the current version, every key declared and of its type.

    Raises results.schema.SchemaError naming ``source``, the key and the fix.
    """
    check_for_writing(data, RunJson, RUN_JSON_VERSION, source, "run.json", "RUN_JSON_VERSION")
    return cast(RunJson, data)


def upgrade_run_json(raw: JSONView, source: str) -> RunJson:
    """run.json as read from ``source``, upgraded to :data:`RUN_JSON_VERSION` and checked.

    Raises results.schema.SchemaError for a version newer than this code reads, or a document
    that does not fit :class:`RunJson`; keys it does not declare are kept as they are.
    """
    # Version 0 (before versions existed) differs from 1 only by lacking the version; 1 from 2
    # by its tokenizer, a plain name.
    version = schema_version_of(raw, source, RUN_JSON_VERSION, unversioned=0)
    data = stamped(raw, RUN_JSON_VERSION)
    if version < 2 and isinstance(data.get("tokenizer"), str):
        data["tokenizer"] = TokenizerSection(
            source="unrecorded", name=data["tokenizer"], prompt_lengths="client tokenizer"
        )
    check_document(data, RunJson, source)
    return cast(RunJson, data)
