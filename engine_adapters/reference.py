"""The built-in reference engine: launched as `bench serve` in a subprocess."""

from __future__ import annotations

import sys
from collections.abc import Mapping

from engine.config import EngineConfig, SettingValue
from engine_adapters.base import EngineAdapter
from engine_adapters.vllm import VLLM_METRICS

# It exports vLLM's names, so it shares vLLM's map.
REFERENCE = EngineAdapter(
    name="reference", metric_names=VLLM_METRICS, reset_prefix_cache_path="/reset_prefix_cache"
)


def serve_command(host: str, port: int, settings: Mapping[str, SettingValue]) -> list[str]:
    """`bench serve` command line for ``settings`` (EngineConfig setting names; None = default).

    Each flag is the setting's own (engine.config.Setting.flag), so what `bench serve` parses
    back is the same EngineConfig. Raises engine.config.SettingError for an unknown name.
    """
    cmd = [sys.executable, "-m", "bench", "serve", "--host", host, "--port", str(port)]
    return cmd + serve_flags(settings)


def serve_flags(settings: Mapping[str, SettingValue]) -> list[str]:
    """`bench serve`'s flags for ``settings`` (see :func:`serve_command`)."""
    cmd: list[str] = []
    for name, value in settings.items():
        flag = EngineConfig.setting(name).flag
        if value is None:
            continue
        if isinstance(value, bool):
            cmd.append(flag if value else "--no-" + flag.removeprefix("--"))
        else:
            cmd += [flag, str(value)]
    return cmd
