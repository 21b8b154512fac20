"""How the lab writes a file: whole or not at all, and JSON from numpy and pandas values.

Every file a reader may open while it is written (a run folder's tables, summary.json, a
calibration, a baseline, a page) goes through :func:`atomic_write`: the bytes land in a temporary
file beside the target, which is renamed over it (``os.replace``, atomic on one filesystem), so
a reader, a concurrent writer or an interrupt never leaves a torn file. The temporary name
carries the writer's pid: two processes writing one path never share a temporary file.
:func:`sync_write` writes a parquet table so, synced to the disk before the rename (the parts a
run streams into its folder, which must survive a kill or a power cut).

:func:`json_safe` is the one encoder of the JSON files: what it returns ``json.dumps`` writes
with ``allow_nan=False``. On the ground floor so that every layer may write through it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
import sys
from collections.abc import Callable, Mapping
from datetime import date, datetime
from pathlib import Path, PurePath
from typing import Any

import numpy as np

__all__ = [
    "JSONObject",
    "JSONView",
    "atomic_write",
    "atomic_write_text",
    "json_safe",
    "json_text",
    "sync_write",
    "write_json",
]

# A JSON object as json.loads gives it (run.json, summary.json and their sections, the other
# documents bench writes and reads) or as it is built to be written through json_safe: its
# values are JSON's, and what they mean is the document's schema's to say (results/schema/).
JSONObject = dict[str, Any]
# The same, read only: what a reader of a document takes.
JSONView = Mapping[str, Any]


def atomic_write(path: Path | str, write: Callable[[Path], object]) -> Path:
    """Call ``write(tmp)`` to write a temporary file beside ``path``, then rename it to ``path``
    (its folder is made if missing); on any failure the temporary file is removed and ``path``
    is left as it was. Returns ``path``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        write(tmp)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    return path


def sync_write(path: Path | str, table: Any) -> Path:
    """A pyarrow Table to ``path`` as parquet (atomically), flushed to the disk before the
    rename: a part of a run folder's stream is there whole after a kill or a power cut, or not
    at all. Returns ``path``."""
    # Imported here: the ground floor loads pyarrow only for a writer of parquet.
    import pyarrow.parquet as pq

    def write(tmp: Path) -> None:
        with open(tmp, "wb") as f:
            pq.write_table(table, f)
            f.flush()
            os.fsync(f.fileno())

    return atomic_write(path, write)


def atomic_write_text(path: Path | str, text: str) -> Path:
    """``text`` (UTF-8) to ``path`` through :func:`atomic_write`."""
    return atomic_write(path, lambda tmp: tmp.write_text(text, encoding="utf-8"))


def write_json(path: Path | str, value: Any, indent: int | None = 2) -> Path:
    """``json_safe(value)`` as JSON (``indent`` spaces, a final newline) to ``path``, atomically."""
    return atomic_write_text(path, json_text(json_safe(value), indent))


def json_text(encoded: Any, indent: int | None = 2) -> str:
    """The text :func:`write_json` writes of ``encoded``, a value already through
    :func:`json_safe` (for a writer that checks the encoded document before writing it)."""
    return json.dumps(encoded, indent=indent, allow_nan=False) + "\n"


def json_safe(value: Any) -> Any:
    """``value`` as plain JSON types: NaN, inf and pd.NA become None, numpy scalars and arrays
    Python numbers and lists, tuples lists, Paths and datetimes strings, dataclasses dicts,
    mapping keys strings. Raises TypeError naming anything else."""
    if value is None or _is_pandas_na(value):
        return None
    if isinstance(value, bool | str):
        return value
    if isinstance(value, np.bool_):
        return bool(value)
    if isinstance(value, int | np.integer):
        return int(value)
    if isinstance(value, float | np.floating):
        number = float(value)
        return number if math.isfinite(number) else None
    if isinstance(value, Mapping):
        out: dict[str, Any] = {}
        for key, item in value.items():
            if not isinstance(key, str | int | np.integer) or isinstance(key, bool):
                raise TypeError(f"JSON object keys must be strings, got {key!r}")
            out[str(key)] = json_safe(item)
        return out
    if isinstance(value, list | tuple | np.ndarray):
        return [json_safe(item) for item in value]
    if isinstance(value, PurePath):
        return str(value)
    if isinstance(value, datetime | date):
        return value.isoformat()
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return json_safe(dataclasses.asdict(value))
    raise TypeError(f"cannot write {type(value).__name__} to JSON: {value!r}")


def _is_pandas_na(value: Any) -> bool:
    # pd.NA exists only where pandas is loaded: the ground floor never imports it itself.
    pandas = sys.modules.get("pandas")
    return pandas is not None and value is pandas.NA
