"""The scenario's ``[[models]]`` array: several models (or LoRA adapters) in one run.

::

    [[models]]
    name = "base"          # the ``model`` field sent (a served model, or a LoRA adapter's name)
    share = 2              # its part of the requests, relative to the others' (default 1)

    [[models]]
    name = "adapter-a"
    share = 1

The requests are split among the models by the scenario's seed, in exact counts (Hamilton's
largest remainder over the planned requests: bench.run.load_plan.assign_models); a multi-turn
session keeps one model for all its turns. A request a workload already named a model for
(``loadgen.request_spec.RequestSpec.model``, e.g. a dataset's per-row model) keeps it. Without
``[[models]]`` every request goes to the run's one model (``--model``, else the server's first).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from bench.scenario.toml_table import Table

__all__ = ["ModelShare", "read_models"]


@dataclass(frozen=True)
class ModelShare:
    """One ``[[models]]`` entry: the model name to send and its relative ``share`` (> 0)."""

    name: str
    share: float = 1.0

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "share": self.share}


def read_models(table: Table) -> tuple[ModelShare, ...]:
    """The ``[[models]]`` entries in file order, or () when absent; each name once, each
    share > 0, and at least one entry."""
    entries = table.tables("models")
    if entries is None:
        return ()
    table.check("models", bool(entries), "must list at least one [[models]] entry", entries)
    models: list[ModelShare] = []
    for entry in entries:
        name = entry.get("name", str)
        share = entry.get("share", float, 1.0)
        entry.finish()
        entry.check("name", bool(name.strip()), "must not be empty", name)
        entry.check("share", share > 0, "must be > 0 (a relative part of the requests)", share)
        if any(m.name == name for m in models):
            raise entry.error("name", f"{name!r} is listed twice; give each model one entry")
        models.append(ModelShare(name, share))
    return tuple(models)
