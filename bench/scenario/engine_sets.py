"""``NAME=VALUE`` pairs of reference-engine settings from a command line (`bench run --set`,
`bench simulate --set`, `bench ab --a-set/--b-set`), parsed by the setting itself
(engine.config.Setting.parse, as `bench ablate --switch` parses its values), so a name or value
is checked as the scenario's [engine] keys are; and refused for an engine bench does not
configure."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from bench.scenario.toml_table import suggest
from engine.config import SETTINGS, EngineConfig, SettingError, SettingValue

__all__ = ["SettingValue", "parse_settings", "refuse_settings_for_external"]


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


def refuse_settings_for_external(
    settings: Mapping[str, SettingValue],
    urls: Sequence[str],
    launch: str | None,
    launch_model: str | None,
) -> None:
    """Raise ValueError when ``--set`` meets an engine bench does not configure: one at --url,
    or one started by --launch/--launch-model (its own flags configure it)."""
    if not settings:
        return
    if urls:
        raise ValueError(
            "--set configures the reference engine bench starts; the engine at --url runs with "
            "its own settings: drop --set, or drop --url to start the reference engine"
        )
    if launch is not None or launch_model is not None:
        raise ValueError(
            "--set configures the reference engine; an engine started by --launch or "
            "--launch-model takes its settings on its own command line: put them in --launch"
        )
