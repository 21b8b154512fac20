"""One engine setting, declared once: its name, type, default, help text and rule.

The groups of :class:`engine.config.EngineConfig` declare each field with :func:`setting`.
Everything that speaks in settings (`bench serve`'s options, a scenario's ``[engine]`` keys,
`bench ablate --switch`, the reference adapter's flags) reads that declaration through
:class:`Setting` instead of repeating it: a new field appears everywhere without touching them.

A setting's *name* is its field name, unique across groups, except where ``setting(name=...)``
keeps an older spelling; it is the flag (``--max-num-seqs``), the scenario key and the
``engine_config`` key of run.json. Choices are the values of a ``Literal`` type.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import math
import types
import typing
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Literal, Union

__all__ = [
    "POWER_OF_TWO",
    "Rule",
    "Setting",
    "SettingError",
    "SettingsGroup",
    "at_least",
    "closest",
    "in_range",
    "setting",
    "settings_of",
]

_TRUE, _FALSE = ("on", "true", "yes", "1"), ("off", "false", "no", "0")
_KIND_NAMES = {bool: "a boolean", int: "an integer", float: "a number", str: "a string"}


# A setting's value as it travels from a command line or a scenario to the engine: each
# setting's own type (Setting.kind), or None for its default.
SettingValue = str | int | float | bool | None


class SettingError(ValueError):
    """A setting that cannot be used. ``name`` is the setting, ``message`` what is wrong with
    it, without the name ("must be at least 1, got 0"); ``str()`` joins the two."""

    def __init__(self, name: str, message: str) -> None:
        super().__init__(f"{name} {message}")
        self.name = name
        self.message = message


@dataclass(frozen=True)
class Rule:
    """A bound on a value, with the requirement it states ("at least 1")."""

    text: str
    holds: Callable[[Any], bool]


def at_least(low: float) -> Rule:
    return Rule(f"at least {low}", lambda v: v >= low)


def in_range(low: float, high: float, *, low_open: bool = False) -> Rule:
    """``low <= v <= high``, or ``low < v <= high`` with ``low_open``."""
    text = f"in {'(' if low_open else '['}{low}, {high}]"
    return Rule(text, lambda v: (v > low if low_open else v >= low) and v <= high)


POWER_OF_TWO = Rule("a power of two", lambda v: v >= 1 and v & (v - 1) == 0)


def setting(default: Any, help: str, *, rule: Rule | None = None, name: str | None = None) -> Any:
    """A dataclass field that carries its help text, its rule and (rarely) its public name."""
    return dataclasses.field(default=default, metadata={"help": help, "rule": rule, "name": name})


def closest(word: str, candidates: Sequence[str]) -> str:
    """A "; did you mean 'x'?" hint for the closest candidate, or "" when none is close."""
    close = difflib.get_close_matches(word, list(candidates), n=1, cutoff=0.6)
    return f"; did you mean {close[0]!r}?" if close else ""


@dataclass(frozen=True)
class Setting:
    """One field of an EngineConfig group, as the outside world sees it.

    ``kind`` is bool, int, float or str; ``choices`` the allowed strings (a ``Literal`` type),
    else None; ``nullable`` whether None is a value (it always means "the engine decides", and
    is then the default).
    """

    name: str
    group: str
    attr: str
    kind: type
    choices: tuple[str, ...] | None
    nullable: bool
    default: Any
    help: str
    rule: Rule | None

    @property
    def flag(self) -> str:
        """The command-line flag: ``--max-num-seqs`` (a boolean also has ``--no-...``)."""
        return "--" + self.name.replace("_", "-")

    def check(self, value: Any) -> Any:
        """``value`` checked for type, choice and rule; returned as the field stores it (an
        integer given for a number becomes a float). Raises SettingError naming the setting."""
        if value is None:
            if self.nullable:
                return None
            raise SettingError(self.name, f"must be set: {self._expected()}")
        accepted = (int, float) if self.kind is float else (self.kind,)
        # bool is an int in Python, but `max_num_seqs = true` is a mistake, not the number 1.
        if isinstance(value, bool) != (self.kind is bool) or not isinstance(value, accepted):
            raise SettingError(
                self.name, f"must be {self._expected()}, got {value!r} ({type(value).__name__})"
            )
        if self.kind is float:
            value = float(value)
            if not math.isfinite(value):
                raise SettingError(self.name, f"must be a finite number, got {value!r}")
        if self.choices is not None and value not in self.choices:
            raise SettingError(
                self.name,
                f"must be one of {', '.join(self.choices)}, got {value!r}"
                + closest(value, self.choices),
            )
        if self.rule is not None and not self.rule.holds(value):
            raise SettingError(self.name, f"must be {self.rule.text}, got {value!r}")
        return value

    def parse(self, text: str) -> Any:
        """A value from command-line text (`bench ablate --switch`, `bench simulate --set`):
        on/off for a boolean, none/default for None where allowed; then :meth:`check`."""
        word = text.strip()
        value: Any = word
        if self.nullable and word.lower() in ("none", "default"):
            value = None
        elif self.kind is bool:
            if word.lower() not in _TRUE + _FALSE:
                raise SettingError(self.name, f"must be on/off (or true/false), got {word!r}")
            value = word.lower() in _TRUE
        elif self.kind in (int, float):
            try:
                value = self.kind(word)
            except ValueError:
                raise SettingError(
                    self.name, f"must be {_KIND_NAMES[self.kind]}, got {word!r}"
                ) from None
        return self.check(value)

    def _expected(self) -> str:
        if self.choices is not None:
            return "one of " + ", ".join(self.choices)
        return _KIND_NAMES[self.kind]


def _kind(hint: Any) -> tuple[type, tuple[str, ...] | None, bool]:
    """(kind, choices, nullable) of a field's resolved type hint."""
    nullable = False
    if typing.get_origin(hint) in (Union, types.UnionType):
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        nullable = len(args) < len(typing.get_args(hint))
        (hint,) = args
    if typing.get_origin(hint) is Literal:
        return str, tuple(typing.get_args(hint)), nullable
    if hint not in _KIND_NAMES:
        raise TypeError(f"an engine setting is a bool, int, float, str or Literal, not {hint}")
    return hint, None, nullable


@functools.cache
def settings_of(cls: type) -> tuple[Setting, ...]:
    """The settings a group dataclass declares (``cls.GROUP`` names the group), in order."""
    hints = typing.get_type_hints(cls)
    out = []
    for f in dataclasses.fields(cls):
        kind, choices, nullable = _kind(hints[f.name])
        out.append(
            Setting(
                name=f.metadata.get("name") or f.name,
                group=cls.GROUP,
                attr=f.name,
                kind=kind,
                choices=choices,
                nullable=nullable,
                default=f.default,
                help=f.metadata["help"],
                rule=f.metadata.get("rule"),
            )
        )
    return tuple(out)


class SettingsGroup:
    """Base of EngineConfig's groups (frozen dataclasses of :func:`setting` fields).

    ``GROUP`` is the group's attribute on EngineConfig. Constructing a group checks every field
    (:meth:`Setting.check`, storing the checked value), then the rules between its fields
    (:meth:`check_rules`).
    """

    GROUP: ClassVar[str]

    def __post_init__(self) -> None:
        for s in settings_of(type(self)):
            # Stored as checked: an integer given for a number becomes a float here too.
            object.__setattr__(self, s.attr, s.check(getattr(self, s.attr)))
        self.check_rules()

    def check_rules(self) -> None:
        """Rules between this group's fields; raise SettingError. None by default."""
