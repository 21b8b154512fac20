"""Scenarios: the workload, measurement window, SLOs and engine settings of one benchmark run.

A scenario is a TOML file whose top-level keys mirror :class:`Scenario`'s fields; ``input_len``,
``output_len``, ``slo`` and ``engine`` are tables. Shipped scenarios live in
``bench/scenario/scenarios`` and are loaded by name (``load_scenario("100-users")``); anything
else is read as a path.

Validation is strict because a typo in a benchmark definition silently changes what is measured:
an unknown key, a wrong type or an out-of-range value raises :class:`ScenarioError` naming the
file, the dotted key, what was expected and what was found (with close key names suggested).
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from importlib import resources
from typing import Any

from bench.scenario.api_choice import check_api, read_api
from bench.scenario.images_table import read_images
from bench.scenario.load import (
    check_combination,
    construct,
    read_abandon,
    read_arrival,
    read_sessions,
    read_trace,
    read_workload,
)
from bench.scenario.models import ModelShare, read_models
from bench.scenario.prefix_cache import PrefixCacheSection, read_prefix_cache
from bench.scenario.request_tables import read_dataset, read_request
from bench.scenario.toml_table import ScenarioError, Table, suggest
from bench.scenario.tools_table import read_tools
from engine.config import SETTINGS, SettingError, SettingValue
from loadgen.request_tools import ToolOffer
from loadgen.workloads.abandon import AbandonShare
from loadgen.workloads.arrivals import ArrivalProcess
from loadgen.workloads.dataset import DatasetSource
from loadgen.workloads.images import ImageShape
from loadgen.workloads.sessions.generate import SessionShape
from loadgen.workloads.spec import (
    LENGTH_BOUNDS,
    LENGTH_KINDS,
    LENGTH_PARAMS,
    LengthDist,
    SharedPrefix,
    WorkloadSpec,
)
from loadgen.workloads.trace import TraceReplay
from results.schema.api_kinds import Api

__all__ = [
    "OPEN_LOOP_USERS",
    "SLO",
    "EngineSection",
    "Scenario",
    "ScenarioError",
    "list_scenarios",
    "load_scenario",
    "scenario_from_dict",
]

# Open loop: the connection pool, hence the most requests in flight, when `users` is not given.
OPEN_LOOP_USERS = 512


@dataclass(frozen=True)
class SLO:
    """Service-level objectives for goodput, in milliseconds; None means "no objective"."""

    ttft_ms: float | None = None
    tpot_ms: float | None = None
    e2el_ms: float | None = None

    def to_dict(self) -> dict[str, float | None]:
        """All three targets (None where unset); ``results.figures.summary.compute_summary`` accepts
        this."""
        return asdict(self)


@dataclass(frozen=True)
class EngineSection:
    """``[engine]``: the reference engine's settings; those not given are the engine's defaults.

    ``model_dir`` (a Hugging Face directory), when set, is the model instead of ``preset``.
    Every other key is an EngineConfig setting (`bench serve --help` lists them), checked when
    the scenario loads: ``settings`` holds those given in ``[engine]`` itself, ``options``
    those given in ``[engine.options]`` (the same keys; kept apart so that :meth:`to_dict`
    gives back the file's own shape). Whether they go together is checked where they meet the
    command line's (bench.run.orchestrate, bench.experiments.ablate).
    """

    preset: str = "tiny"
    model_dir: str | None = None
    settings: dict[str, SettingValue] = field(default_factory=dict)
    options: dict[str, SettingValue] = field(default_factory=dict)

    def engine_settings(self) -> dict[str, SettingValue]:
        """EngineConfig settings by name (engine.config.EngineConfig.from_flat takes them)."""
        return {"model": self.model_dir or self.preset, **self.settings, **self.options}

    def to_dict(self) -> dict[str, Any]:
        return {
            "preset": self.preset,
            "model_dir": self.model_dir,
            **self.settings,
            "options": dict(self.options),
        }


@dataclass(frozen=True)
class Scenario:
    """One benchmark run's definition. Times in seconds unless the name says otherwise.

    Closed loop (no ``arrival``): ``users`` concurrent users each send a request, read the whole
    answer, wait ``think_time_s`` and send the next. Open loop (``arrival`` set, or a trace
    workload): requests go out at planned times, and ``users`` is the most in flight at once
    (the connection pool). ``ramp_up_s`` spreads the users' starts (closed) or ramps the
    arrival rate up from 0 (open). The run stops after ``num_requests`` requests or
    ``duration_s`` seconds, whichever comes first (at least one is set, except for a trace,
    which ends with its last line). ``warmup_s`` and ``cooldown_s`` are cut from the start and
    the end of the run for the summary's figures. ``input_len``/``output_len`` are None for
    workloads that take lengths from a file. ``trace`` (a ``[trace]`` table) says how a trace
    workload is replayed: its format, pace and window. ``prefix_cache`` (a ``[prefix_cache]``
    table) says what to do with the engine's prefix cache before the load; ``abandon`` (an
    ``[abandon]`` table) which requests the client abandons mid-stream. ``dataset`` (a
    ``[dataset]`` table) how a dataset workload's rows are read; ``request`` (a ``[request]``
    table) body fields sent with every request (bench.scenario.request_tables); ``models`` (a
    ``[[models]]`` array, bench.scenario.models) which models the requests go to; ``tools``
    (a ``[tools]`` table, bench.scenario.tools_table) the tools every request offers;
    ``images`` (an ``[images]`` table, bench.scenario.images_table) the images they send.
    ``request_timeout_s`` and ``read_timeout_s`` bound each request as a whole and each
    silence in it (None: loadgen.client.limits's defaults; `bench run --request-timeout` and
    ``--read-timeout`` override them). ``source`` says where the scenario was read from and is
    not part of :meth:`to_dict`.
    """

    name: str
    users: int
    input_len: LengthDist | None
    output_len: LengthDist | None
    num_requests: int | None = None
    duration_s: float | None = None
    description: str = ""
    seed: int = 0
    think_time_s: float = 0.0
    api: Api = "completions"
    inputs_per_request: int | None = None  # embeddings and rerank only (bench.scenario.api_choice)
    ignore_eos: bool = False
    temperature: float = 0.0
    warmup_s: float = 0.0
    cooldown_s: float = 0.0
    slo: SLO = field(default_factory=SLO)
    engine: EngineSection = field(default_factory=EngineSection)
    shared_prefix: SharedPrefix | None = None
    workload: WorkloadSpec = field(default_factory=WorkloadSpec)
    arrival: ArrivalProcess | None = None
    ramp_up_s: float = 0.0
    trace: TraceReplay | None = None
    prefix_cache: PrefixCacheSection | None = None
    abandon: AbandonShare | None = None
    request_timeout_s: float | None = None
    read_timeout_s: float | None = None
    dataset: DatasetSource | None = None
    request: dict[str, Any] | None = None
    models: tuple[ModelShare, ...] = ()
    tools: ToolOffer | None = None
    images: ImageShape | None = None
    sessions: SessionShape | None = None
    source: str = field(default="<dict>", compare=False)

    @property
    def open_loop(self) -> bool:
        """Requests at planned times ([arrival], or a trace) rather than closed-loop users."""
        return self.arrival is not None or self.workload.open_loop

    def to_dict(self) -> dict[str, Any]:
        """The fully resolved scenario (defaults filled in) for run.json.

        Unset optional values are None. ``scenario_from_dict(s.to_dict())`` gives back ``s``.
        """
        data = asdict(self)
        data["input_len"] = self.input_len.to_dict() if self.input_len else None
        data["output_len"] = self.output_len.to_dict() if self.output_len else None
        data["shared_prefix"] = self.shared_prefix.to_dict() if self.shared_prefix else None
        data["workload"] = self.workload.to_dict()
        data["arrival"] = self.arrival.to_dict() if self.arrival else None
        data["trace"] = self.trace.to_dict() if self.trace else None
        data["prefix_cache"] = self.prefix_cache.to_dict() if self.prefix_cache else None
        data["abandon"] = self.abandon.to_dict() if self.abandon else None
        data["dataset"] = self.dataset.to_dict() if self.dataset else None
        data["engine"] = self.engine.to_dict()
        data["models"] = [m.to_dict() for m in self.models] if self.models else None
        data["tools"] = self.tools.to_dict() if self.tools else None
        data["images"] = self.images.to_dict() if self.images else None
        data["sessions"] = self.sessions.to_dict() if self.sessions else None
        return {
            key: data[key]
            for key in _DICT_ORDER
            if not (key in _OMITTED_WHEN_UNSET and data[key] is None)
        }


# The order of run.json's scenario: identity, load shape, requests, measurement, engine.
_DICT_ORDER = (
    "name",
    "description",
    "seed",
    "users",
    "num_requests",
    "duration_s",
    "think_time_s",
    "ramp_up_s",
    "arrival",
    "api",
    "inputs_per_request",
    "ignore_eos",
    "temperature",
    "request",
    "tools",
    "images",
    "models",
    "workload",
    "sessions",
    "dataset",
    "trace",
    "input_len",
    "output_len",
    "shared_prefix",
    "abandon",
    "warmup_s",
    "cooldown_s",
    "slo",
    "prefix_cache",
    "request_timeout_s",
    "read_timeout_s",
    "engine",
)
# Tables added after run folders were written: left out when unset, so an older run.json's
# scenario reads back to the very same dict.
_OMITTED_WHEN_UNSET = frozenset(
    {"trace", "prefix_cache", "abandon", "dataset", "request", "models", "request_timeout_s",
     "read_timeout_s", "inputs_per_request", "tools", "sessions",
     "images"}
)  # fmt: skip
# The client's limits (loadgen.client.limits), seconds > 0 when given.
_TIMEOUT_KEYS = ("request_timeout_s", "read_timeout_s")


def _read_length(table: Table, name: str) -> LengthDist | None:
    """A ``[input_len]``/``[output_len]`` table (``loadgen.workloads.spec.LengthDist``)."""
    sub = table.table(name)
    if sub is None:
        return None
    kind = sub.choice("kind", LENGTH_KINDS)
    params = {key: sub.get(key, typ) for key, typ in LENGTH_PARAMS[kind].items()}
    for key, typ in LENGTH_BOUNDS.items():
        bound = sub.get(key, typ, None)
        if bound is not None:  # unset: the sampler's default
            params[key] = bound
    sub.finish(f"for kind '{kind}'")
    return construct(sub, LengthDist, kind=kind, **params)


def _read_shared_prefix(table: Table) -> SharedPrefix | None:
    """The ``[shared_prefix]`` table (``loadgen.workloads.spec.SharedPrefix``)."""
    sub = table.table("shared_prefix")
    if sub is None:
        return None
    tokens = sub.get("tokens", int)
    num_prefixes = sub.get("num_prefixes", int, 1)
    share_ratio = sub.get("share_ratio", float, 1.0)
    sub.finish()
    return construct(
        sub, SharedPrefix, tokens=tokens, num_prefixes=num_prefixes, share_ratio=share_ratio
    )


def _read_slo(table: Table) -> SLO:
    sub = table.table("slo")
    if sub is None:
        return SLO()
    values = {key: sub.get(key, float, None) for key in ("ttft_ms", "tpot_ms", "e2el_ms")}
    sub.finish()
    for key, value in values.items():
        if value is not None:
            sub.check(key, value > 0, "must be > 0 milliseconds", value)
    return SLO(**values)


# preset and model_dir name the model; the other settings are keys of [engine] as they are.
_ENGINE_KEYS = tuple(s for s in SETTINGS if s.name != "model")


def _read_settings(sub: Table) -> dict[str, Any]:
    """The EngineConfig settings a table gives, each checked for type, choice and rule."""
    values: dict[str, Any] = {}
    for s in _ENGINE_KEYS:
        value = (
            sub.choice(s.name, s.choices, None)
            if s.choices is not None
            else sub.get(s.name, s.kind, None)
        )
        if value is None:
            continue
        try:
            values[s.name] = s.check(value)
        except SettingError as exc:
            raise sub.error(s.name, exc.message) from exc
    return values


def _read_engine(table: Table) -> EngineSection:
    sub = table.table("engine")
    if sub is None:
        return EngineSection()
    preset = sub.get("preset", str, "tiny")
    model_dir = sub.get("model_dir", str, None)
    settings = _read_settings(sub)
    opts = sub.table("options")
    options = _read_settings(opts) if opts is not None else {}
    if opts is not None:
        opts.finish()
    sub.finish()
    sub.check("preset", bool(preset.strip()), "must not be empty", preset)
    if twice := sorted(settings.keys() & options.keys()):
        raise sub.error(twice[0], "is given in both [engine] and [engine.options]; keep one")
    return EngineSection(preset, model_dir, settings, options)


def _read_parts(top: Table, api: str) -> dict[str, Any]:
    """What every request carries beside its text: ``[tools]`` and ``[images]``."""
    return {"tools": read_tools(top, api), "images": read_images(top, api, _read_length)}


def scenario_from_dict(
    data: Mapping[str, Any], source: str = "<dict>", default_name: str | None = None
) -> Scenario:
    """Validate a parsed scenario (a TOML document or a ``to_dict()`` result) into a Scenario.

    ``source`` names the file in error messages; ``default_name`` is used when ``name`` is absent.
    None values count as absent, so a resolved dict from run.json loads again.
    Raises ScenarioError on any unknown key, wrong type or inconsistent value.
    """
    top = Table(data, source)
    name = top.get("name", str, default_name)
    if name is None:
        raise top.error("name", "missing; expected a string")
    users = top.get("users", int, None)
    num_requests = top.get("num_requests", int, None)
    duration_s = top.get("duration_s", float, None)
    scalars = {
        "description": top.get("description", str, ""),
        "seed": top.get("seed", int, 0),
        "think_time_s": top.get("think_time_s", float, 0.0),
        "ignore_eos": top.get("ignore_eos", bool, False),
        "temperature": top.get("temperature", float, 0.0),
        "warmup_s": top.get("warmup_s", float, 0.0),
        "cooldown_s": top.get("cooldown_s", float, 0.0),
        "ramp_up_s": top.get("ramp_up_s", float, 0.0),
    }
    timeouts = {key: top.get(key, float, None) for key in _TIMEOUT_KEYS}
    scalars["api"], scalars["inputs_per_request"] = read_api(top)
    input_len = _read_length(top, "input_len")
    output_len = _read_length(top, "output_len")
    slo = _read_slo(top)
    engine = _read_engine(top)
    shared_prefix = _read_shared_prefix(top)
    workload = read_workload(top, source)
    arrival = read_arrival(top)
    trace = read_trace(top)
    prefix_cache = read_prefix_cache(top)
    abandon = read_abandon(top)
    dataset = read_dataset(top)
    request = read_request(top)
    models = read_models(top)
    parts = _read_parts(top, scalars["api"])
    sessions = read_sessions(top, _read_length)
    top.finish()
    check_api(top, scalars["api"], workload.kind, abandon, slo)
    check_combination(
        top, workload, arrival, input_len is not None, output_len is not None,
        shared_prefix is not None, trace, dataset is not None, sessions is not None,
    )  # fmt: skip
    open_loop = arrival is not None or workload.open_loop
    if users is None:
        if not open_loop:
            raise top.error("users", "missing; expected an integer (closed-loop users)")
        users = OPEN_LOOP_USERS

    top.check("name", bool(name.strip()), "must not be empty", name)
    top.check("users", users >= 1, "must be >= 1", users)
    if num_requests is not None:
        top.check("num_requests", num_requests >= 1, "must be >= 1", num_requests)
    if duration_s is not None:
        top.check("duration_s", duration_s > 0, "must be > 0 seconds", duration_s)
    whole_file = workload.kind == "trace" or (workload.kind == "sessions" and workload.path)
    if num_requests is None and duration_s is None and not whole_file:
        raise ScenarioError(f"{source}: set 'num_requests', 'duration_s' or both to end the run")
    top.check("seed", scalars["seed"] >= 0, "must be >= 0", scalars["seed"])
    for key in ("think_time_s", "temperature", "warmup_s", "cooldown_s", "ramp_up_s"):
        top.check(key, scalars[key] >= 0, "must be >= 0", scalars[key])
    for key, value in timeouts.items():
        if value is not None:
            top.check(key, value > 0, "must be > 0 seconds", value)
    if duration_s is not None:
        cut = scalars["warmup_s"] + scalars["cooldown_s"]
        top.check("cooldown_s", cut < duration_s, "warmup_s + cooldown_s must be < duration_s", cut)
    return Scenario(
        name=name,
        users=users,
        input_len=input_len,
        output_len=output_len,
        num_requests=num_requests,
        duration_s=duration_s,
        slo=slo,
        engine=engine,
        shared_prefix=shared_prefix,
        workload=workload,
        arrival=arrival,
        trace=trace,
        prefix_cache=prefix_cache,
        abandon=abandon,
        dataset=dataset,
        request=request,
        models=models,
        **parts,
        sessions=sessions,
        source=source,
        **scalars,
        **timeouts,
    )


def _shipped_dir() -> Any:
    return resources.files("bench.scenario").joinpath("scenarios")


def list_scenarios() -> list[str]:
    """Names of the shipped scenarios, sorted."""
    files = (p.name for p in _shipped_dir().iterdir())
    return sorted(name.removesuffix(".toml") for name in files if name.endswith(".toml"))


def load_scenario(name_or_path: str | os.PathLike[str]) -> Scenario:
    """Load a shipped scenario by name, else a TOML file by path.

    Raises ScenarioError for an unknown name (listing the shipped ones), a missing file, invalid
    TOML or an invalid scenario.
    """
    text = os.fspath(name_or_path)
    shipped = _shipped_dir().joinpath(f"{text}.toml")
    if os.sep not in text and "/" not in text and shipped.is_file():
        source, stem, content = str(shipped), text, shipped.read_text(encoding="utf-8")
    elif os.path.isfile(text):
        source = text
        stem = os.path.splitext(os.path.basename(text))[0]
        with open(text, encoding="utf-8") as fh:
            content = fh.read()
    else:
        names = list_scenarios()
        looks_like_path = text.endswith(".toml") or os.sep in text or "/" in text
        if looks_like_path:
            raise ScenarioError(f"scenario file not found: {text}")
        raise ScenarioError(
            f"unknown scenario '{text}'{suggest(text, names)}; shipped scenarios: "
            f"{', '.join(names)}; or give the path of a .toml file"
        )
    try:
        data = tomllib.loads(content)
    except tomllib.TOMLDecodeError as exc:
        raise ScenarioError(f"{source}: not valid TOML: {exc}") from exc
    return scenario_from_dict(data, source=source, default_name=stem)
