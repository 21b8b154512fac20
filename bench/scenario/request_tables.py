"""The scenario's ``[request]`` and ``[dataset]`` tables: what every request carries, and how a
dataset's rows are read.

``[request]`` holds request body fields sent with every request, as they are
(``chat_template_kwargs``, ``response_format``, ``top_k``, ``min_tokens``,
``skip_special_tokens``, ...); `bench run --extra-body JSON` adds to them, winning over the
file's. A dataset row's own fields win over both, and all of them over the body's defaults
(``temperature``, ``seed``). The fields the load generator sets itself
(``loadgen.request_spec.RESERVED_FIELDS``: ``model``, ``stream``, ``max_tokens``,
``ignore_eos``, ...) are refused, each naming the key that sets it instead::

    [request]
    top_k = 20
    chat_template_kwargs = { enable_thinking = false }
    response_format = { type = "json_object" }

``[dataset]`` (only with ``[workload] kind = "dataset"``; loadgen.workloads.dataset)::

    [dataset]
    format = "auto"        # jsonl | json | csv | parquet | hf (a datasets folder); auto: suffix
    split = "train"        # a datasets folder's or Hub dataset's split
    order = "in-order"     # or "shuffle" (by the scenario's seed)
    fields = ["top_p"]     # columns sent as request fields of their own name
    [dataset.columns]      # the file's names for prompt, messages, max_tokens, request, tools,
                           # tool_choice
    prompt = "question"
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Mapping
from typing import Any

from bench.scenario.load import construct
from bench.scenario.toml_table import ScenarioError, Table
from loadgen.request_spec import RESERVED_FIELDS
from loadgen.workloads.dataset import COLUMN_NAMES, DATASET_ORDERS, DatasetSource
from loadgen.workloads.dataset_files import DATASET_FORMATS

__all__ = ["field_problem", "parse_extra_body", "read_dataset", "read_request"]


def _has_date(value: Any) -> bool:
    if isinstance(value, datetime.date | datetime.time):
        return True
    if isinstance(value, Mapping):
        return any(_has_date(v) for v in value.values())
    if isinstance(value, list):
        return any(_has_date(v) for v in value)
    return False


def field_problem(key: str, value: Any) -> str | None:
    """Why request field ``key`` cannot be sent with ``value`` (None: it can): a field the load
    generator sets itself, or a value with no JSON form."""
    if key in RESERVED_FIELDS:
        return f"the load generator sets it; use {RESERVED_FIELDS[key]}"
    if _has_date(value):
        return "a date has no JSON form; quote it"
    return None


def read_request(table: Table) -> dict[str, Any] | None:
    """The ``[request]`` table's fields, or None when absent or empty."""
    sub = table.table("request")
    if sub is None:
        return None
    fields = sub.take_all()
    for key, value in fields.items():
        if (problem := field_problem(key, value)) is not None:
            raise sub.error(key, problem)
    return fields or None


def read_dataset(table: Table) -> DatasetSource | None:
    """The ``[dataset]`` table, or None (the defaults of DatasetSource) when absent."""
    sub = table.table("dataset")
    if sub is None:
        return None
    values: dict[str, Any] = {
        "format": sub.choice("format", DATASET_FORMATS, "auto"),
        "split": sub.get("split", str, "train"),
        "order": sub.choice("order", DATASET_ORDERS, "in-order"),
    }
    columns = sub.table("columns")
    mapping: dict[str, str] = {}
    if columns is not None:
        for name in COLUMN_NAMES:
            if (column := columns.get(name, str, None)) is not None:
                mapping[name] = column
        columns.finish()
    fields = sub.get("fields", list, [])
    sub.finish()
    if not all(isinstance(f, str) for f in fields):
        raise sub.error("fields", f"expected a list of column names, got {fields!r}")
    return construct(sub, DatasetSource, **values, columns=mapping, fields=tuple(fields))


def parse_extra_body(text: str) -> dict[str, Any]:
    """``--extra-body``'s JSON object, checked as ``[request]`` is."""
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise ScenarioError(
            f"--extra-body: not JSON ({exc}); give an object, e.g. '{{\"top_k\": 20}}'"
        ) from None
    if not isinstance(value, dict):
        raise ScenarioError(f"--extra-body: expected a JSON object, got {type(value).__name__}")
    for key, field_value in value.items():
        if (problem := field_problem(key, field_value)) is not None:
            raise ScenarioError(f"--extra-body: key {key!r}: {problem}")
    return value
