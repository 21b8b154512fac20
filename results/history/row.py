"""One run's row of the history: who ran what, on what, and every figure of its summary.

A row is read from the run folder alone (run.json and summary.json; a folder without
summary.json has it recomputed from its tables, results.run_summary), so the history can always
be rebuilt from the folders. Its columns are

- the identity, :data:`IDENTITY_COLUMNS` (name and DuckDB type), declared here once;
- every figure of summary.json, derived from the document's own structure
  (:func:`flatten_figures`): each number or boolean leaf under its dotted path
  (``ttft_ms.p99``, ``throughput.output_tok_s``), the names `bench gate`'s rules use.

A run's ``run_key`` is a hash of its run.json: the same run read at another path (a folder moved
or copied to a shared volume) has the same key, so adding it again updates its path instead of
counting it twice.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from perfmodel.files import JSONObject, JSONView
from results.folder.run_folder import (
    RUN_JSON,
    SUMMARY_JSON,
    RunFolderError,
    load_run,
    read_run_json,
    read_summary_json,
)
from results.run_summary import summarize_run
from results.validity.run_validity import violation_lines

__all__ = [
    "HARDWARE_KEYS",
    "IDENTITY_COLUMNS",
    "flatten_figures",
    "hardware_fingerprint",
    "run_key",
    "run_row",
]

# What makes two machines "the same hardware" (the gate's rule, and the history's series).
# Memory size, kernel and platform strings vary between otherwise identical runners and do not
# decide speed.
HARDWARE_KEYS: tuple[str, ...] = ("cpu", "cpu_count_logical", "gpus")

# The row's identity columns, in order, with their DuckDB types. Figures follow them.
IDENTITY_COLUMNS: dict[str, str] = {
    "run_key": "VARCHAR",  # hash of run.json (module docstring)
    "run_id": "VARCHAR",  # the folder's name
    "path": "VARCHAR",  # the run folder, absolute, where it was last added from
    "started_utc": "TIMESTAMP",  # run.json's started_utc, in UTC
    "scenario": "VARCHAR",  # the scenario's name
    "engine": "VARCHAR",  # the adapter: reference, vllm, llamacpp, ...
    "engine_version": "VARCHAR",  # the engine's own version, else the lab's for the reference
    "model": "VARCHAR",  # the model name sent
    "git_commit": "VARCHAR",  # the checkout's commit (+dirty)
    "hardware": "VARCHAR",  # :func:`hardware_fingerprint`: a short hash of HARDWARE_KEYS
    "hardware_label": "VARCHAR",  # the same, readable: CPU x logical CPUs, GPUs
    "valid": "BOOLEAN",  # summary.json's validity (false: throttled, busy, tokens apart, ...)
    "usable": "BOOLEAN",  # summary.json's usability (false: too many failed requests)
    "invalid_reasons": "VARCHAR",  # the violations, one per line (empty for a valid run)
}


def run_key(run_json_path: Path) -> str:
    """The run's key: the first 16 hex digits of run.json's SHA-256."""
    return hashlib.sha256(run_json_path.read_bytes()).hexdigest()[:16]


def hardware_fingerprint(hardware: JSONView) -> tuple[str, str]:
    """(hash, label) of run.json's ``hardware`` over :data:`HARDWARE_KEYS`: equal for machines
    the gate counts as the same hardware."""
    same = {k: hardware.get(k) for k in HARDWARE_KEYS}
    digest = hashlib.sha256(json.dumps(same, sort_keys=True).encode()).hexdigest()[:12]
    gpus = hardware.get("gpus") or []
    label = f"{hardware.get('cpu') or 'unknown CPU'} x{hardware.get('cpu_count_logical') or '?'}"
    if gpus:
        label += ", " + ", ".join(sorted({str(g) for g in gpus}))
    return digest, label


def flatten_figures(summary: JSONView, prefix: str = "") -> dict[str, float]:
    """Every number and boolean of ``summary`` by dotted path (booleans as 0/1); lists, strings
    and nulls are not figures and are left out. ``schema_version`` is the format's, not a
    figure."""
    out: dict[str, float] = {}
    for key, value in summary.items():
        name = f"{prefix}{key}"
        if name == "schema_version":
            continue
        if isinstance(value, Mapping):
            out.update(flatten_figures(value, f"{name}."))
        elif isinstance(value, bool | int | float) and value == value:  # NaN is no figure
            out[name] = float(value)
    return out


def _utc(text: Any) -> str | None:
    """An ISO 8601 time as a naive UTC timestamp DuckDB reads, or None."""
    try:
        when = datetime.fromisoformat(str(text))
    except ValueError:
        return None
    if when.tzinfo is not None:
        when = when.astimezone(UTC).replace(tzinfo=None)
    return when.isoformat(sep=" ")


def _engine_version(run_json: JSONView) -> str | None:
    """The engine's word on its version (run.json's fingerprint), else, for the reference
    engine, the lab's own version."""
    identity = ((run_json.get("fingerprint") or {}).get("engine")) or {}
    if identity.get("version") is not None:
        return str(identity["version"])
    if (run_json.get("engine") or {}).get("adapter") == "reference":
        version = (run_json.get("versions") or {}).get("llm-perf-lab")
        return None if version is None else str(version)
    return None


def run_row(folder: Path) -> JSONObject:
    """The row of the run folder ``folder``: the identity columns, then its figures.

    Raises RunFolderError (one line naming the file) when it is no readable run folder.
    """
    folder = Path(folder).resolve()
    if not (folder / RUN_JSON).is_file():
        raise RunFolderError(f"not a run folder: {folder} holds no {RUN_JSON}")
    run_json = read_run_json(folder / RUN_JSON)
    if (folder / SUMMARY_JSON).is_file():
        summary: JSONView = read_summary_json(folder / SUMMARY_JSON)
    else:
        summary = summarize_run(load_run(folder))
    engine = run_json.get("engine") or {}
    hardware, label = hardware_fingerprint(run_json.get("hardware") or {})
    validity = summary.get("validity") or {}
    usability = summary.get("usability") or {}
    row: JSONObject = {
        "run_key": run_key(folder / RUN_JSON),
        "run_id": str(run_json.get("run_id") or folder.name),
        "path": str(folder),
        "started_utc": _utc(run_json.get("started_utc")),
        "scenario": (run_json.get("scenario") or {}).get("name"),
        "engine": engine.get("adapter"),
        "engine_version": _engine_version(run_json),
        "model": engine.get("model"),
        "git_commit": run_json.get("git_commit"),
        "hardware": hardware,
        "hardware_label": label,
        "valid": bool(validity.get("valid", True)),
        "usable": bool(usability.get("usable", True)),
        "invalid_reasons": "\n".join(violation_lines(summary)),
    }
    assert list(row) == list(IDENTITY_COLUMNS), "the row's identity is IDENTITY_COLUMNS"
    return {**row, **flatten_figures(summary)}
