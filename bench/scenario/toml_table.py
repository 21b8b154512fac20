"""Strict, typed reading of one parsed TOML table, for scenario files.

Every lookup records the key it asked for, so :meth:`Table.finish` can report the keys nobody asked
for (typos) with the closest known names. Errors name the file and the dotted key.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["ScenarioError", "Table", "suggest"]


class ScenarioError(ValueError):
    """A scenario that cannot be used; the message names the file, the key and the fix."""


_MISSING: Any = object()

_TYPE_NAMES: dict[type, str] = {
    int: "an integer",
    float: "a number",
    str: "a string",
    bool: "a boolean (true or false)",
    list: "a list",
}


def suggest(word: str, candidates: Sequence[str]) -> str:
    """A "; did you mean ...?" hint for the closest candidates, or "" if none is close."""
    close = difflib.get_close_matches(word, list(candidates), n=3, cutoff=0.6)
    if not close:
        return ""
    return "; did you mean " + " or ".join(repr(c) for c in close) + "?"


def _found(value: Any) -> str:
    kind = "table" if isinstance(value, Mapping) else type(value).__name__
    return f"{value!r} ({kind})"


def _matches(value: Any, expected: type) -> bool:
    # bool is a subclass of int in Python, but `users = true` is a mistake, not the number 1.
    if isinstance(value, bool):
        return expected is bool
    if expected is float:
        return isinstance(value, int | float)
    return isinstance(value, expected)


class Table:
    """One table of a scenario being read, at the dotted position ``prefix`` in ``source``."""

    def __init__(self, data: Mapping[str, Any], source: str, prefix: str = "") -> None:
        self._data = data
        self._source = source
        self._prefix = prefix
        self._known: list[str] = []

    def key(self, name: str) -> str:
        """The dotted key of ``name`` in this table, as written in error messages."""
        return f"{self._prefix}{name}"

    def error(self, name: str, message: str) -> ScenarioError:
        return ScenarioError(f"{self._source}: key '{self.key(name)}': {message}")

    def check(self, name: str, ok: bool, requirement: str, found: Any) -> None:
        """Raise a ScenarioError unless ``ok``: "key 'x': <requirement>, got <found>"."""
        if not ok:
            raise self.error(name, f"{requirement}, got {found!r}")

    def _raw(self, name: str, default: Any, expected: str) -> Any:
        self._known.append(name)
        value = self._data.get(name)
        # None counts as absent so that a resolved dict (run.json) loads again; TOML has no null.
        if value is None:
            if default is _MISSING:
                raise self.error(name, f"missing; expected {expected}")
            return _MISSING
        return value

    def get(self, name: str, expected: type, default: Any = _MISSING) -> Any:
        """The value of ``name``, checked to be of type ``expected`` (an int is a valid float).

        Returns ``default`` when absent; raises when absent and no default is given.
        """
        value = self._raw(name, default, _TYPE_NAMES[expected])
        if value is _MISSING:
            return default
        if not _matches(value, expected):
            raise self.error(name, f"expected {_TYPE_NAMES[expected]}, got {_found(value)}")
        if expected is float:
            if not math.isfinite(value):
                raise self.error(name, f"expected a finite number, got {value!r}")
            return float(value)
        return value

    def choice(self, name: str, options: Sequence[str], default: Any = _MISSING) -> Any:
        """A string that must be one of ``options``."""
        value = self.get(name, str, default)
        if value is not default and value not in options:
            listed = ", ".join(repr(o) for o in options)
            raise self.error(
                name, f"expected one of {listed}, got {value!r}{suggest(value, options)}"
            )
        return value

    def table(self, name: str, required: bool = False) -> Table | None:
        """The sub-table ``name`` (None when absent and not required)."""
        value = self._raw(name, _MISSING if required else None, "a table")
        if value is _MISSING:
            return None
        if not isinstance(value, Mapping):
            raise self.error(name, f"expected a table, got {_found(value)}")
        return Table(value, self._source, f"{self.key(name)}.")

    def take_all(self) -> dict[str, Any]:
        """Every key of this table with its value as TOML gave it, each counted as asked for
        (a table whose keys are the user's own, such as ``[request]``)."""
        self._known.extend(self._data)
        return dict(self._data)

    def tables(self, name: str) -> list[Table] | None:
        """The array of tables ``name`` (``[[name]]`` in TOML), each read at ``name[i].``; None
        when absent."""
        value = self._raw(name, None, "an array of tables")
        if value is _MISSING:
            return None
        if not isinstance(value, list) or not all(isinstance(v, Mapping) for v in value):
            raise self.error(name, f"expected an array of tables ([[{name}]]), got {_found(value)}")
        return [Table(v, self._source, f"{self.key(name)}[{i}].") for i, v in enumerate(value)]

    def finish(self, context: str = "") -> None:
        """Raise a ScenarioError listing every key of this table that no lookup asked for."""
        unknown = [k for k in self._data if k not in self._known]
        if not unknown:
            return
        where = f"[{self._prefix[:-1]}]" if self._prefix else "the top level"
        if context:
            where = f"{where} {context}"
        problems = [
            f"unknown key '{self.key(k)}'{suggest(k, self._known)}" for k in sorted(unknown)
        ]
        known = ", ".join(sorted(self._known))
        raise ScenarioError(
            f"{self._source}: {'; '.join(problems)} (known keys in {where}: {known})"
        )
