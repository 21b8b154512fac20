"""Baseline files: the runs a gate compares against, in one JSON file meant to be committed.

Layout (``format`` "llm-perf-lab/baseline", ``format_version`` 1)::

    name, created_utc, created_by    who made it and when
    hardware                         run.json's hardware (the gate refuses other hardware)
    versions, git_commits            package versions and commits of the runs (shown on change)
    scenario                         the resolved scenario every run ran
    engine                           adapter, model and the engine's effective configuration
    runs: [{run_id, started_utc,     one entry per run:
            summary,                 its summary.json, for people reading the file (and
                                     its machine_load: the gate does not judge a busy run)
            samples}]                the per-request values the statistics resample
                                     (bench.gate.samples.RunSamples.to_dict: columns of
                                     TTFT/TPOT/E2EL/queueing ms, completion s, token counts,
                                     SLO verdicts, per-request ITL lists; ms rounded to 1 µs)

A reader rejects another ``format``, a newer ``format_version`` and any missing or mistyped
field, naming it. :class:`RunGroup` is what the gate compares: the baseline's runs, or the
candidate's run folders, in one shape.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.gate.samples import RunSamples, samples_from_run
from bench.scenario.scenario import ScenarioError, scenario_from_dict
from perfmodel.files import JSONObject, atomic_write_text, json_safe
from results.figures.machine_load import busy_line
from results.folder.run_folder import RunFolderError, load_run
from results.folder.run_group import expand_run_paths
from results.validity.run_validity import violation_lines

__all__ = [
    "FORMAT",
    "FORMAT_VERSION",
    "HARDWARE_KEYS",
    "BaselineError",
    "RunGroup",
    "baseline_dict",
    "differences",
    "dumps_compact",
    "group_from_baseline",
    "load_baseline",
    "load_run_group",
    "save_baseline",
    "workloads",
]

FORMAT = "llm-perf-lab/baseline"
FORMAT_VERSION = 1
# What makes two machines "the same hardware" for a gate. Memory size, kernel and platform
# strings vary between otherwise identical runners and do not decide speed.
HARDWARE_KEYS: tuple[str, ...] = ("cpu", "cpu_count_logical", "gpus")


class BaselineError(ValueError):
    """An unusable baseline file or run set; the message names the file, field and fix."""


@dataclass(frozen=True)
class RunGroup:
    """Runs of one configuration: the baseline's, or the candidate's run folders."""

    label: str
    runs: tuple[RunSamples, ...]
    hardware: JSONObject
    scenario: JSONObject
    engine: JSONObject
    versions: JSONObject
    git_commits: tuple[str | None, ...]
    # "run ID: other processes used N% ..." for each run whose machine was busy (its summary's
    # machine_load, results.figures.machine_load); the gate will not judge them unless allowed.
    busy: tuple[str, ...] = ()
    # "run ID: kind: why" for each other violation of a run (its summary's validity,
    # results.validity.run_validity: throttling, powersave, XID, ECC, token counts apart).
    invalid: tuple[str, ...] = ()


def busy_runs(run_ids: Sequence[str], summaries: Sequence[Any]) -> tuple[str, ...]:
    """ "run ID: why" for each run whose summary marks its machine busy."""
    out = []
    for run_id, summary in zip(run_ids, summaries, strict=True):
        line = busy_line(summary) if isinstance(summary, dict) else None
        if line is not None:
            out.append(f"run {run_id}: {line}")
    return tuple(out)


def invalid_runs(run_ids: Sequence[str], summaries: Sequence[Any]) -> tuple[str, ...]:
    """ "run ID: kind: why" for each violation of each run but a busy machine (told apart by
    :func:`busy_runs`, which ``--allow-busy`` alone lets through)."""
    out = []
    for run_id, summary in zip(run_ids, summaries, strict=True):
        lines = violation_lines(summary, skip=("busy",)) if isinstance(summary, dict) else []
        out += [f"run {run_id}: {line}" for line in lines]
    return tuple(out)


def differences(base: Any, other: Any, prefix: str, shared_only: bool = False) -> list[str]:
    """Human-readable differences "key: A -> B" between two JSON-like values, recursively.

    ``shared_only`` skips keys that only one side has (settings added by a newer version).
    """
    if isinstance(base, dict) and isinstance(other, dict):
        keys = set(base) & set(other) if shared_only else set(base) | set(other)
        out: list[str] = []
        for key in sorted(keys, key=str):
            out += differences(base.get(key), other.get(key), f"{prefix}.{key}", shared_only)
        return out
    return [] if base == other else [f"{prefix}: {base!r} -> {other!r}"]


def _engine_identity(engine: JSONObject) -> JSONObject:
    """The engine's configuration without per-run details (URL, port, start-up time)."""
    description = engine.get("description") or {}
    return json_safe(
        {
            "adapter": engine.get("adapter"),
            "model": engine.get("model"),
            "config": description.get("engine_config") or engine.get("settings"),
        }
    )


def workloads(scenarios: Sequence[JSONObject]) -> list[JSONObject]:
    """The load-defining parts of scenarios (name, description and engine table excepted),
    comparable across versions: each is re-read by this version's scenario reader, so a key
    added since a run was made takes its default on both sides. When any cannot be re-read
    (a key since removed), all are compared as written."""
    try:
        resolved = [scenario_from_dict(s, "run.json scenario").to_dict() for s in scenarios]
    except (ScenarioError, TypeError, ValueError):
        resolved = [dict(s) for s in scenarios]
    skip = ("name", "description", "engine")
    return [{k: v for k, v in s.items() if k not in skip} for s in resolved]


def _check_same(label: str, run_ids: Sequence[str], items: Sequence[Any], what: str) -> None:
    for run_id, item in zip(run_ids[1:], items[1:], strict=True):
        diff = differences(items[0], item, what)
        if diff:
            raise BaselineError(
                f"{label}: run {run_id} differs from run {run_ids[0]} in {'; '.join(diff[:5])};"
                " a group must hold runs of one configuration on one machine"
            )


def load_run_group(paths: Sequence[Path], label: str) -> tuple[RunGroup, list[JSONObject]]:
    """Read run folders (a group folder gives its runs: results.folder.run_group.expand_run_paths)
    into a RunGroup plus summaries.

    Raises BaselineError when a folder is unreadable or the runs differ in hardware, workload
    or engine configuration.
    """
    if not paths:
        raise BaselineError(f"{label}: no run folders given")
    try:
        runs = [load_run(p) for p in expand_run_paths(paths)]
    except RunFolderError as exc:
        raise BaselineError(str(exc)) from None
    ids = [str(r.run_json.get("run_id") or r.path.name) for r in runs]
    hardware = [{k: (r.run_json.get("hardware") or {}).get(k) for k in HARDWARE_KEYS} for r in runs]
    scenarios = workloads([r.run_json.get("scenario") or {} for r in runs])
    engines = [_engine_identity(r.run_json.get("engine") or {}) for r in runs]
    _check_same(label, ids, hardware, "hardware")
    _check_same(label, ids, scenarios, "scenario")
    _check_same(label, ids, engines, "engine")
    samples = tuple(samples_from_run(r) for r in runs)
    summaries = [r.summary or {} for r in runs]
    group = RunGroup(
        label=label,
        runs=samples,
        hardware=runs[0].run_json.get("hardware") or {},
        scenario=runs[0].run_json.get("scenario") or {},
        engine=engines[0],
        versions=runs[0].run_json.get("versions") or {},
        git_commits=tuple(r.run_json.get("git_commit") for r in runs),
        busy=busy_runs(ids, summaries),
        invalid=invalid_runs(ids, summaries),
    )
    return group, [{"run_id": i, "started_utc": r.run_json.get("started_utc"), "summary": s}
                   for i, r, s in zip(ids, runs, summaries, strict=True)]  # fmt: skip


def baseline_dict(group: RunGroup, runs_meta: list[JSONObject], name: str) -> JSONObject:
    """The JSON document of a baseline made of ``group`` (see the module doc)."""
    if not name.strip():
        raise BaselineError("--name must not be empty")
    runs = [
        {**meta, "samples": samples.to_dict()}
        for meta, samples in zip(runs_meta, group.runs, strict=True)
    ]
    return json_safe(
        {
            "format": FORMAT,
            "format_version": FORMAT_VERSION,
            "name": name,
            "created_utc": datetime.now(UTC).isoformat(timespec="seconds"),
            "created_by": "bench baseline save",
            "hardware": group.hardware,
            "versions": group.versions,
            "git_commits": list(group.git_commits),
            "scenario": group.scenario,
            "engine": group.engine,
            "runs": runs,
        }
    )


def dumps_compact(value: Any, indent: str = "") -> str:
    """JSON with objects one key per line but lists of numbers on one line each, so that a
    committed baseline stays small and diffs by field, not by number."""
    inner = indent + " "
    if isinstance(value, dict) and value:
        items = [f"{inner}{json.dumps(k)}: {dumps_compact(v, inner)}" for k, v in value.items()]
        return "{\n" + ",\n".join(items) + "\n" + indent + "}"
    if isinstance(value, list) and any(isinstance(v, dict | list) for v in value):
        items = [inner + dumps_compact(v, inner) for v in value]
        return "[\n" + ",\n".join(items) + "\n" + indent + "]"
    return json.dumps(value, separators=(",", ":"), allow_nan=False)


def save_baseline(paths: Sequence[Path], name: str, output: Path) -> JSONObject:
    """Build a baseline from run folders and write it to ``output``; returns the document."""
    group, meta = load_run_group(paths, "baseline runs")
    if not any(s.num_requests for s in group.runs):
        raise BaselineError("baseline runs: no run has a measured request (all failed?)")
    document = baseline_dict(group, meta, name)
    atomic_write_text(output, dumps_compact(document) + "\n")
    return document


def _field(data: JSONObject, key: str, kind: type | tuple[type, ...], where: str) -> Any:
    if key not in data:
        raise BaselineError(f"{where}: missing field '{key}'")
    if not isinstance(data[key], kind):
        names = " or ".join(k.__name__ for k in (kind if isinstance(kind, tuple) else (kind,)))
        raise BaselineError(f"{where}: field '{key}' must be {names}, found {data[key]!r:.80}")
    return data[key]


def group_from_baseline(document: Any, where: str) -> RunGroup:
    """Validate a parsed baseline document into a RunGroup; raises BaselineError."""
    if not isinstance(document, dict):
        raise BaselineError(f"{where}: expected a JSON object, found {type(document).__name__}")
    fmt = document.get("format")
    if fmt != FORMAT:
        raise BaselineError(
            f"{where}: not a baseline file (format {fmt!r}, expected {FORMAT!r}); "
            "make one with `bench baseline save RUN... --name NAME`"
        )
    version = _field(document, "format_version", int, where)
    if version > FORMAT_VERSION:
        raise BaselineError(
            f"{where}: format_version {version} is newer than this bench reads ({FORMAT_VERSION});"
            " upgrade llm-perf-lab"
        )
    name = _field(document, "name", str, where)
    runs = _field(document, "runs", list, where)
    if not runs:
        raise BaselineError(f"{where}: field 'runs' is empty; a baseline needs at least one run")
    samples = []
    for i, run in enumerate(runs):
        if not isinstance(run, dict):
            raise BaselineError(f"{where}: runs[{i}] must be an object")
        data = _field(run, "samples", dict, f"{where}: runs[{i}]")
        try:
            samples.append(RunSamples.from_dict(data, f"{where}: runs[{i}].samples"))
        except ValueError as exc:
            raise BaselineError(str(exc)) from None
    commits = _field(document, "git_commits", list, where)
    ids, summaries = [str(r.get("run_id")) for r in runs], [r.get("summary") for r in runs]
    return RunGroup(
        label=f"baseline {name}",
        runs=tuple(samples),
        hardware=_field(document, "hardware", dict, where),
        scenario=_field(document, "scenario", dict, where),
        engine=_field(document, "engine", dict, where),
        versions=_field(document, "versions", dict, where),
        git_commits=tuple(commits),
        busy=busy_runs(ids, summaries),
        invalid=invalid_runs(ids, summaries),
    )


def load_baseline(path: Path | str) -> RunGroup:
    """Read and validate a baseline file; raises BaselineError naming the problem."""
    path = Path(path)
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise BaselineError(f"{path}: cannot be read: {exc.strerror or exc}") from None
    except json.JSONDecodeError as exc:
        raise BaselineError(f"{path}: not valid JSON: {exc}") from None
    return group_from_baseline(document, str(path))
