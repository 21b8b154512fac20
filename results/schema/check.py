"""Checking a JSON document against the TypedDict that declares it.

The schema classes (results.schema.run_json, results.schema.summary_json) are TypedDicts, so the
files keep their plain JSON shape and every reader keeps indexing them as dicts; this module
derives the runtime check from those same annotations, so a key's type is declared once.

Supported annotations: str, int, float (an int is a float; a bool is neither), bool, None,
Any, Literal[...], X | Y, list[X], dict[str, X] and nested TypedDicts. A TypedDict's keys
are required unless marked NotRequired (or the class is ``total=False``); keys it does not
declare are allowed, except at the top level of a document being written (``closed``), where
an undeclared key is almost always a typo.
"""

from __future__ import annotations

import difflib
import types
from collections.abc import Mapping
from typing import Any, Literal, Union, get_args, get_origin, get_type_hints, is_typeddict

from perfmodel.files import JSONObject, JSONView

__all__ = [
    "SchemaError",
    "check_document",
    "check_for_writing",
    "schema_version_of",
    "stamped",
]


class SchemaError(ValueError):
    """A JSON document that does not fit its schema; the message names the file, the key and
    what was expected, on one line."""


def _describe(annotation: Any) -> str:
    if annotation is type(None):
        return "null"
    if is_typeddict(annotation):
        return f"an object ({annotation.__name__})"
    origin = get_origin(annotation)
    if origin in (Union, types.UnionType):
        return " or ".join(_describe(arg) for arg in get_args(annotation))
    if origin is Literal:
        return "one of " + ", ".join(repr(arg) for arg in get_args(annotation))
    if origin is list:
        return "a list"
    if origin is dict:
        return "an object"
    names = {str: "a string", int: "an integer", float: "a number", bool: "true or false"}
    return names.get(annotation, getattr(annotation, "__name__", str(annotation)))


def _json_kind(value: Any) -> str:
    if value is None:
        return "null"
    kinds = {bool: "a boolean", str: "a string", int: "an integer", float: "a number"}
    kinds.update({list: "a list", dict: "an object"})
    kind = kinds.get(type(value), type(value).__name__)
    text = repr(value)
    return kind if len(text) > 40 else f"{kind} ({text})"


def _fits_scalar(value: Any, annotation: Any) -> bool | None:
    """Whether ``value`` fits a scalar annotation; None when ``annotation`` is not a scalar."""
    if annotation is Any:
        return True
    if annotation is type(None):
        return value is None
    if annotation is bool:
        return isinstance(value, bool)
    if annotation is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if annotation is float:
        return isinstance(value, int | float) and not isinstance(value, bool)
    if annotation is str:
        return isinstance(value, str)
    if get_origin(annotation) is Literal:
        return any(value == arg and type(value) is type(arg) for arg in get_args(annotation))
    return None


def _join(where: str, key: object) -> str:
    """The place of ``key`` inside ``where``: "run.json: engine" then "run.json: engine.url"."""
    return f"{where} {key}" if where.endswith(":") else f"{where}.{key}"


def _head(where: str) -> str:
    return where if where.endswith(":") else f"{where}:"


def _mismatch(where: str, annotation: Any, value: Any) -> SchemaError:
    return SchemaError(f"{_head(where)} expected {_describe(annotation)}, got {_json_kind(value)}")


def _check(value: Any, annotation: Any, where: str) -> None:
    fits = _fits_scalar(value, annotation)
    if fits is not None:
        if not fits:
            raise _mismatch(where, annotation, value)
        return
    origin = get_origin(annotation)
    if origin in (Union, types.UnionType):
        options = get_args(annotation)
        if value is None and type(None) in options:
            return
        rest = [arg for arg in options if arg is not type(None)]
        if len(rest) == 1 and _fits_scalar(value, rest[0]) is None:
            # An object or list, or null: the inner check names the very key that is wrong.
            _check(value, rest[0], where)
            return
        for arg in rest:
            try:
                _check(value, arg, where)
                return
            except SchemaError:
                continue
        raise _mismatch(where, annotation, value)
    if is_typeddict(annotation):
        _check_object(value, annotation, where, closed=False)
        return
    if origin is list:
        if not isinstance(value, list):
            raise _mismatch(where, annotation, value)
        (item,) = get_args(annotation)
        for i, element in enumerate(value):
            _check(element, item, f"{where}[{i}]")
        return
    if origin is dict:
        if not isinstance(value, Mapping):
            raise _mismatch(where, annotation, value)
        _, item = get_args(annotation)
        for key, element in value.items():
            _check(element, item, _join(where, key))
        return
    raise TypeError(f"{_head(where)} results.schema.check cannot check {annotation!r}")


def _check_object(value: Any, schema: type, where: str, closed: bool) -> None:
    if not isinstance(value, Mapping):
        raise SchemaError(
            f"{_head(where)} expected an object ({schema.__name__}), got {_json_kind(value)}"
        )
    hints = get_type_hints(schema)  # NotRequired is stripped; __required_keys__ keeps it
    missing = [key for key in hints if key in schema.__required_keys__ and key not in value]
    if missing:
        raise SchemaError(
            f"{_head(where)} missing {', '.join(missing)} ({schema.__name__} requires it)"
        )
    if closed:
        for key in value:
            if key not in hints:
                close = difflib.get_close_matches(str(key), list(hints), n=1)
                hint = f"did you mean {close[0]!r}? " if close else ""
                raise SchemaError(
                    f"{_head(where)} unknown key {key!r}; {hint}{schema.__name__} declares "
                    f"{', '.join(hints)}"
                )
    for key, annotation in hints.items():
        if key in value:
            _check(value[key], annotation, _join(where, key))


def check_document(data: Any, schema: type, source: str, *, closed: bool = False) -> None:
    """Raise SchemaError unless ``data`` fits the TypedDict ``schema`` (module docstring).

    ``source`` names the file in the message ("runs/x/run.json"); ``closed`` also refuses top-level
    keys the schema does not declare (for writers: a misspelt section is caught before it lands).
    """
    _check_object(data, schema, f"{source}:", closed)


def check_for_writing(
    data: JSONView, schema: type, version: int, source: str, document: str, constant: str
) -> None:
    """Raise SchemaError unless ``data`` is a ``document`` (e.g. "run.json") to write: at
    ``version``, the current one (results.schema.``constant``), and fitting ``schema`` with no
    undeclared section."""
    found = data.get("schema_version")
    if found != version:
        raise SchemaError(
            f"{source}: schema_version {found!r}; a {document} being written is version "
            f"{version} (results.schema.{constant})"
        )
    check_document(data, schema, source, closed=True)


def schema_version_of(data: JSONView, source: str, current: int, unversioned: int) -> int:
    """The ``schema_version`` of a document read from ``source``.

    A document without one is version ``unversioned`` (written before the versions existed).
    Raises SchemaError for a version that is not a non-negative integer, or one newer than
    ``current``, which this code cannot know how to read.
    """
    version = data.get("schema_version", unversioned)
    if not isinstance(version, int) or isinstance(version, bool) or version < 0:
        raise SchemaError(
            f"{source}: schema_version must be a non-negative integer, got {version!r}"
        )
    if version > current:
        raise SchemaError(
            f"{source}: schema_version {version} is newer than this llm-perf-lab reads (up to "
            f"{current}); read it with the llm-perf-lab version that wrote it, or a newer one"
        )
    return version


def stamped(data: JSONView, version: int) -> JSONObject:
    """``data`` upgraded to ``version``: its ``schema_version`` set to it, first, as writers
    put it (whatever version the file said)."""
    return {"schema_version": version, **{k: v for k, v in data.items() if k != "schema_version"}}
