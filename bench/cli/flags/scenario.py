"""The ``--scenario`` option's help, naming every scenario shipped in bench/scenario/scenarios."""

from __future__ import annotations

from bench.scenario.scenario import list_scenarios

__all__ = ["SCENARIO_HELP"]

SCENARIO_HELP = (
    f"A shipped scenario ({', '.join(list_scenarios())}) or the path of a scenario TOML file."
)
"""Derived from the shipped folder, so a scenario added there is listed without editing this."""
