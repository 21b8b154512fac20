"""The reference engine's settings: :class:`EngineConfig`, its groups, and each setting's
declaration (name, type, default, help, rule), from which every interface derives its own."""

from engine.config.engine_config import SETTINGS, EngineConfig
from engine.config.groups import (
    CacheSettings,
    KernelSettings,
    ModelSettings,
    ParallelSettings,
    SchedulerSettings,
    SimSettings,
    SpeculativeSettings,
)
from engine.config.setting import Setting, SettingError, SettingValue

__all__ = [
    "SETTINGS",
    "CacheSettings",
    "EngineConfig",
    "KernelSettings",
    "ModelSettings",
    "ParallelSettings",
    "SchedulerSettings",
    "Setting",
    "SettingError",
    "SettingValue",
    "SimSettings",
    "SpeculativeSettings",
]
