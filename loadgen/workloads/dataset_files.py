"""The rows of a dataset file: JSONL, JSON, CSV, Parquet, a Hugging Face ``datasets`` folder, or
a dataset repository of the Hugging Face cache.

:func:`read_rows` gives every row as a mapping of column to value, with where it stands in the
file (``"line 12"``, ``"row 12"``) for the messages that name it. A file that does not parse is
a :class:`~loadgen.workloads.spec.WorkloadError` of one line naming the file and the line (a
JSONL line, a JSON document's line and column, a CSV record's line), never a traceback.

Formats (``format = "auto"`` takes it from the file's suffix; a folder is a ``datasets``
folder):

* ``jsonl``: one JSON object a line (blank lines skipped);
* ``json``: a JSON list of objects (or an object whose ``data`` is that list);
* ``csv``: a header line, then one row a record; a cell that holds a JSON list or object
  (``messages``, ``request``) is read as JSON where the row's columns need it;
* ``parquet``: read with pyarrow, a column a field (lists and structs as Python values);
* ``hf``: a folder written by ``datasets.Dataset.save_to_disk`` (or a ``DatasetDict``'s, whose
  ``split`` is taken), read with ``datasets.load_from_disk``: the ``datasets`` extra;
* a Hub id (``workload.hub``): a dataset repository id (``org/name``) resolved in the Hugging
  Face cache (``HF_HUB_CACHE``, else ``HF_HOME``/hub) with local files only, as
  ``--tokenizer`` resolves a Hub id offline; its data files of ``split`` (by file name, else
  all of them) read as above.
"""

from __future__ import annotations

import csv
import json
import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Literal, get_args

from loadgen.workloads.spec import WorkloadError

__all__ = ["DATASET_FORMATS", "FILE_SUFFIXES", "DatasetFormat", "read_rows"]

DatasetFormat = Literal["auto", "jsonl", "json", "csv", "parquet", "hf"]
DATASET_FORMATS: tuple[str, ...] = get_args(DatasetFormat)
FILE_SUFFIXES = {".jsonl": "jsonl", ".ndjson": "jsonl", ".json": "json", ".csv": "csv"}
FILE_SUFFIXES[".parquet"] = "parquet"

Row = tuple[str, Mapping[str, Any]]


def _format_of(path: Path, fmt: str) -> str:
    if fmt != "auto":
        return fmt
    if path.is_dir():
        return "hf"
    found = FILE_SUFFIXES.get(path.suffix.lower())
    if found is None:
        raise WorkloadError(
            f"{path}: cannot tell the format from the suffix {path.suffix!r}; name it with "
            f"dataset.format (one of {', '.join(f for f in DATASET_FORMATS if f != 'auto')})"
        )
    return found


def _object(path: Path, where: str, value: Any) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise WorkloadError(
            f"{path}: {where}: expected a JSON object (one row), got {type(value).__name__}"
        )
    return value


def _jsonl(path: Path) -> Iterator[Row]:
    with path.open(encoding="utf-8") as fh:
        for number, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                value = json.loads(line)
            except ValueError as exc:
                raise WorkloadError(f"{path}: line {number}: not JSON ({exc})") from None
            yield f"line {number}", _object(path, f"line {number}", value)


def _json(path: Path) -> Iterator[Row]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise WorkloadError(
            f"{path}: line {exc.lineno}, column {exc.colno}: not JSON ({exc.msg})"
        ) from None
    if isinstance(data, Mapping) and isinstance(data.get("data"), list):
        data = data["data"]
    if not isinstance(data, list):
        raise WorkloadError(f"{path}: expected a JSON list of rows, got {type(data).__name__}")
    for index, value in enumerate(data):
        yield f"row {index}", _object(path, f"row {index}", value)


def _csv(path: Path) -> Iterator[Row]:
    with path.open(encoding="utf-8", newline="") as fh:
        reader = csv.DictReader(fh, strict=True)
        try:
            for row in reader:
                if None in row:
                    raise WorkloadError(
                        f"{path}: line {reader.line_num}: more cells than the header's "
                        f"{len(reader.fieldnames or [])} columns"
                    )
                yield f"line {reader.line_num}", {k: v for k, v in row.items() if v != ""}
        except csv.Error as exc:
            raise WorkloadError(f"{path}: line {reader.line_num}: not CSV ({exc})") from None


def _parquet(path: Path) -> Iterator[Row]:
    # Imported here: pyarrow's parquet reader is loaded by the runs that read a Parquet file.
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(path)
    except (OSError, ValueError) as exc:
        raise WorkloadError(f"{path}: not a readable Parquet file ({exc})") from None
    for index, row in enumerate(table.to_pylist()):
        yield f"row {index}", row


def _hf_folder(path: Path, split: str) -> Iterator[Row]:
    try:
        # Imported here: `datasets` is the optional `datasets` extra, loaded only for its folders.
        import datasets
    except ImportError:
        raise WorkloadError(
            f"{path}: a Hugging Face datasets folder needs the datasets extra: "
            "pip install -e '.[datasets]'"
        ) from None
    try:
        loaded = datasets.load_from_disk(str(path))
    except (FileNotFoundError, ValueError, OSError) as exc:
        raise WorkloadError(f"{path}: not a datasets folder ({exc})") from None
    if isinstance(loaded, datasets.DatasetDict):
        if split not in loaded:
            raise WorkloadError(
                f"{path}: no split {split!r}; it has {', '.join(sorted(loaded))}: set dataset.split"
            )
        loaded = loaded[split]
    for index, row in enumerate(loaded):
        yield f"row {index}", row


def _hub(repo_id: str, split: str) -> Iterator[Row]:
    # Imported here: the hub client is needed only for a dataset named by its Hub id.
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import HFValidationError, LocalEntryNotFoundError

    cache = os.environ.get("HF_HUB_CACHE") or (
        os.path.join(os.environ["HF_HOME"], "hub") if os.environ.get("HF_HOME") else None
    )
    try:
        folder = Path(
            snapshot_download(repo_id, repo_type="dataset", cache_dir=cache, local_files_only=True)
        )
    except (LocalEntryNotFoundError, HFValidationError, OSError) as exc:
        where = cache or "the Hugging Face cache's default folder"
        raise WorkloadError(
            f"dataset {repo_id!r}: not in {where} ({type(exc).__name__}); fetch it once "
            f"(`hf download {repo_id} --repo-type dataset`) or give a file as workload.path"
        ) from None
    files = sorted(
        p for p in folder.rglob("*") if p.is_file() and p.suffix.lower() in FILE_SUFFIXES
    )
    chosen = [p for p in files if split in p.name] or files
    if not chosen:
        raise WorkloadError(f"dataset {repo_id!r}: no data file ({', '.join(FILE_SUFFIXES)})")
    for file in chosen:
        yield from read_rows(str(file), "auto", split)


_READERS = {"jsonl": _jsonl, "json": _json, "csv": _csv, "parquet": _parquet}


def read_rows(
    source: str, fmt: str = "auto", split: str = "train", *, hub: bool = False
) -> Iterator[Row]:
    """The rows of ``source`` (a file or a datasets folder; with ``hub``, a Hub id), each with
    where it stands, in file order (module docstring).

    Raises:
        WorkloadError: the file is missing or does not parse; the message names the line.
    """
    if hub:
        yield from _hub(source, split)
        return
    path = Path(source)
    if not path.exists():
        raise WorkloadError(f"dataset file not found: {path}")
    kind = _format_of(path, fmt)
    try:
        if kind == "hf":
            yield from _hf_folder(path, split)
        else:
            yield from _READERS[kind](path)
    except UnicodeDecodeError as exc:
        raise WorkloadError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
