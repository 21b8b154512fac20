"""Several models in one run (a scenario's ``[[models]]``, LoRA adapters, a workload's per-row
models): every request figure per model beside the run's totals.

- requests.parquet's ``model`` (results.folder.records.RequestRecord) names the model each request
  sent; a request cut before it was sent, and a folder written before the column, read it as
  run.json's ``engine.model`` (results.folder.endpoints.fill_models);
- summary.json's ``models`` section (:func:`model_section`, only for a run whose requests name
  more than one model) holds, per model, the request figures a fleet gives per replica
  (results.figures.fleet.ENDPOINT_FIGURES), computed the same way over the run's window: the
  models' request counts and throughputs add up to the totals; ``share`` is each model's part of
  the run's requests, ``planned_share`` its part of the scenario's ``[[models]]`` shares (None
  for a model the scenario does not list).
"""

from __future__ import annotations

from collections.abc import Mapping

import pandas as pd

from perfmodel.files import JSONObject, JSONView
from results.figures.fleet import part_figures
from results.folder.token_source import TokenSource

__all__ = ["model_names", "model_section"]


def model_names(requests: pd.DataFrame, run_json: JSONView) -> list[str]:
    """The models the run's requests sent: the scenario's ``[[models]]`` in file order, then any
    other the requests name, sorted."""
    listed = [
        str(m["name"])
        for m in ((run_json.get("scenario") or {}).get("models") or [])
        if isinstance(m, Mapping) and m.get("name")
    ]
    if "model" not in requests.columns:
        return listed
    sent = {str(name) for name in requests["model"].dropna().unique()}
    return [*listed, *sorted(sent - set(listed))]


def _planned_shares(run_json: JSONView) -> dict[str, float]:
    models = [
        m for m in ((run_json.get("scenario") or {}).get("models") or []) if isinstance(m, Mapping)
    ]
    total = sum(float(m.get("share") or 0.0) for m in models)
    return {str(m["name"]): float(m.get("share") or 0.0) / total for m in models if total > 0}


def model_section(
    requests: pd.DataFrame,
    tokens: pd.DataFrame | TokenSource,
    run_json: JSONView,
    window: JSONView,
) -> JSONObject | None:
    """summary.json's ``models`` section, or None for a run whose requests name one model.

    Returns ``{"by_model": {name: {figure: ...}}}``, the models in :func:`model_names` order,
    each with the per-part figures (results.figures.fleet.part_figures), ``share`` and
    ``planned_share`` (module docstring). ``window`` is the run's (summary.json's ``window``).
    """
    names = model_names(requests, run_json)
    if len(names) < 2:
        return None
    planned = _planned_shares(run_json)
    by_model: JSONObject = {}
    for name in names:
        part = requests[requests["model"] == name]
        by_model[name] = part_figures(part, tokens, run_json, window, len(requests))
        by_model[name]["planned_share"] = planned.get(name)
    return {"by_model": by_model}
