"""The history's options: where it is (every command that writes runs, and `bench history`),
and the filters `bench history list`, `trend` and `changes` share."""

from __future__ import annotations

from pathlib import Path

from bench.cli.flags.shared import BenchOption
from results.history.target import DEFAULT_NAME, ENV_VAR

__all__ = [
    "HistoryEngine",
    "HistoryHardware",
    "HistoryModel",
    "HistoryPath",
    "HistoryScenario",
    "IncludeInvalid",
    "NoHistory",
    "Since",
]

HistoryPath = BenchOption(
    Path | None,
    None,
    f"The run history (a DuckDB file) each finished run adds itself to; default: ${ENV_VAR} "
    f"(a shared one), else {DEFAULT_NAME} in the runs folder.",
    metavar="PATH",
    flag="--history",
).annotated()
NoHistory = BenchOption(bool, False, "Add the runs to no history.", flag="--no-history").annotated()
HistoryScenario = BenchOption(
    str | None, None, "Only runs of this scenario (its name).", metavar="NAME", flag="--scenario"
).annotated()
HistoryEngine = BenchOption(
    str | None, None, "Only runs of this engine adapter.", metavar="ADAPTER", flag="--engine"
).annotated()
HistoryModel = BenchOption(
    str | None, None, "Only runs of this model.", metavar="NAME", flag="--model"
).annotated()
HistoryHardware = BenchOption(
    str | None,
    None,
    "Only runs on this hardware: its fingerprint (a prefix) or part of its label (the CPU or GPU).",
    metavar="TEXT",
    flag="--hardware",
).annotated()
Since = BenchOption(
    str | None,
    None,
    "Only runs started since: an ISO date or time (UTC), or an age (7d, 12h, 30m).",
    metavar="WHEN",
).annotated()
IncludeInvalid = BenchOption(
    bool,
    False,
    "Take runs marked not valid (throttled, busy, token counts apart) or not usable too.",
    flag="--include-invalid",
).annotated()
