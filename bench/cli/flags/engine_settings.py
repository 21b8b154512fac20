"""``--set NAME=VALUE`` of `bench run` and `bench simulate` (parsed by
bench.scenario.engine_sets.parse_settings) refused for an engine bench does not configure."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["refuse_settings_for_external"]


def refuse_settings_for_external(
    settings: dict[str, Any], urls: Sequence[str], launch: str | None, launch_model: str | None
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
