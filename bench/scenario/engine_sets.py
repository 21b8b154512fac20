"""``NAME=VALUE`` pairs of reference-engine settings from a command line (`bench run --set`,
`bench simulate --set`, `bench ab --a-set/--b-set`), parsed by the setting itself
(engine.config.Setting.parse, as `bench ablate --switch` parses its values), so a name or value
is checked as the scenario's [engine] keys are."""

from __future__ import annotations

from collections.abc import Sequence

from bench.scenario.toml_table import suggest
from engine.config import SETTINGS, EngineConfig, SettingError

__all__ = ["SettingValue", "parse_settings"]

# A reference-engine setting's value: each setting's own type (engine.config.Setting), or None
# for its default.
SettingValue = str | int | float | bool | None


def parse_settings(items: Sequence[str], option: str = "--set") -> dict[str, SettingValue]:
    """``NAME=VALUE`` pairs as EngineConfig settings by name, each value of the setting's type.

    Raises:
        ValueError: a malformed pair, a name that is no setting (with the close ones and where
            they are listed), a value of the wrong type or out of the setting's rule, or one
            name given twice; the message names ``option`` (``--set``, ``--a-set`` ...), the
            pair and the fix.
    """
    names = [s.name for s in SETTINGS]
    out: dict[str, SettingValue] = {}
    for item in items:
        raw_name, sep, value = item.partition("=")
        name = raw_name.strip().replace("-", "_")
        if not sep or not name or not value.strip():
            raise ValueError(f"{option} {item!r}: expected NAME=VALUE (e.g. batching=static)")
        if name not in names:
            raise ValueError(
                f"{option} {item!r}: {name} is not an engine setting{suggest(name, names)} "
                "(`bench serve --help` lists them)"
            )
        if name in out:
            raise ValueError(f"{option} {item!r}: {name} is set twice; keep one")
        try:
            out[name] = EngineConfig.setting(name).parse(value.strip())
        except SettingError as e:
            raise ValueError(f"{option} {item!r}: {e}") from e
    return out
