"""EngineConfig: the settings of one reference-engine instance, grouped by subsystem.

Inside the engine the settings are read by group (``config.cache.block_size``). Outside it they
are flat, keyed by setting name (``block_size``), because every boundary speaks in names: the
`bench serve` flags, a scenario's ``[engine]`` keys, `bench ablate --switch`, and run.json's
``engine_config`` (flat since the first run folder; :meth:`EngineConfig.to_flat` keeps it so,
and :meth:`EngineConfig.from_flat` reads old folders and new alike).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from engine.config.groups import (
    CacheSettings,
    KernelSettings,
    ModelSettings,
    ParallelSettings,
    SchedulerSettings,
    SimSettings,
    SpeculativeSettings,
)
from engine.config.setting import Setting, SettingError, SettingsGroup, closest, settings_of

__all__ = ["SETTINGS", "EngineConfig"]

_GROUPS: tuple[type[SettingsGroup], ...] = (
    ModelSettings,
    CacheSettings,
    SchedulerSettings,
    ParallelSettings,
    SpeculativeSettings,
    KernelSettings,
    SimSettings,
)

#: Every engine setting, group by group in declaration order.
SETTINGS: tuple[Setting, ...] = tuple(s for group in _GROUPS for s in settings_of(group))
_BY_NAME: dict[str, Setting] = {s.name: s for s in SETTINGS}
if len(_BY_NAME) != len(SETTINGS):
    raise TypeError("engine setting names must be unique across groups (the flat view's keys)")


@dataclass(frozen=True)
class EngineConfig:
    """Reference engine settings; each group checks its own fields, this class the rules that
    span groups (the simulated device's). Build one from flat names with :meth:`from_flat`."""

    model: ModelSettings = field(default_factory=ModelSettings)
    cache: CacheSettings = field(default_factory=CacheSettings)
    scheduler: SchedulerSettings = field(default_factory=SchedulerSettings)
    parallel: ParallelSettings = field(default_factory=ParallelSettings)
    speculative: SpeculativeSettings = field(default_factory=SpeculativeSettings)
    kernels: KernelSettings = field(default_factory=KernelSettings)
    sim: SimSettings = field(default_factory=SimSettings)

    def __post_init__(self) -> None:
        for group in _GROUPS:
            if not isinstance(getattr(self, group.GROUP), group):
                raise TypeError(f"EngineConfig.{group.GROUP} must be a {group.__name__}")
        sim = self.model.device == "sim"
        gpu, tp, rate = self.sim.gpu, self.parallel.tp, self.sim.sim_acceptance_rate
        if sim and not gpu:
            raise SettingError(
                "gpu",
                "is needed by device='sim': a GPU of the hardware table (a100-80gb, h100-sxm, "
                "...) or 'cpu' for this machine as `bench calibrate` measured it",
            )
        if not sim and gpu is not None:
            raise SettingError("gpu", f"{gpu!r} names a simulated device; set device='sim' too")
        if tp > 1 and not sim:
            raise SettingError(
                "tp", f"above 1 runs only on the simulated device (device='sim'), got {tp}"
            )
        if not self.cache.kv_cache and self.speculative.method != "off":
            raise SettingError(
                "speculative",
                "needs kv_cache on: verifying drafts reuses the K/V of the accepted tokens",
            )
        if sim and self.speculative.method != "off" and rate is None:
            raise SettingError(
                "sim_acceptance_rate",
                "is needed by speculative decoding on the simulated device (the probability "
                "that each draft token is accepted, 0..1)",
            )

    @staticmethod
    def setting(name: str) -> Setting:
        """The setting called ``name``; SettingError with the closest name when there is none."""
        try:
            return _BY_NAME[name]
        except KeyError:
            hint = closest(name, list(_BY_NAME))
            raise SettingError(name, "is not an engine setting" + hint) from None

    @classmethod
    def from_flat(cls, values: Mapping[str, Any]) -> EngineConfig:
        """The config of flat ``{name: value}`` settings; absent or None ones take the default
        (the default of every setting that may be None is None).

        Raises SettingError (a ValueError) for an unknown name, a wrong type, a value out of
        range or a rule between settings broken; the message names the setting.
        """
        groups: dict[str, dict[str, Any]] = {group.GROUP: {} for group in _GROUPS}
        for name, value in values.items():
            s = cls.setting(name)
            if value is not None:
                groups[s.group][s.attr] = value  # checked by the group's constructor
        return cls(**{group.GROUP: group(**groups[group.GROUP]) for group in _GROUPS})

    def to_flat(self) -> dict[str, Any]:
        """Every setting by name, in declaration order (JSON-safe): run.json's engine_config."""
        return {s.name: getattr(getattr(self, s.group), s.attr) for s in SETTINGS}


if [f.name for f in fields(EngineConfig)] != [group.GROUP for group in _GROUPS]:
    raise TypeError("EngineConfig's fields must be its groups, each named by its GROUP")
