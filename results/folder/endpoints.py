"""Which replica served each request and which model it asked for: run.json's endpoints, and the
``endpoint`` and ``model`` columns a folder written before fleets or models lacks
(results.figures.fleet and results.figures.models break the figures down by them)."""

from __future__ import annotations

from collections.abc import Mapping

import pandas as pd

from perfmodel.files import JSONView
from results.folder.records import endpoint_of

__all__ = ["fill_endpoints", "fill_models", "fleet_endpoints"]


def fleet_endpoints(run_json: JSONView) -> list[str]:
    """The replicas a run was sent to, in ``--url`` order: run.json's ``engine.endpoints``,
    else its one ``engine.url`` (a list of one), else none (a simulated run)."""
    engine = run_json.get("engine")
    if not isinstance(engine, Mapping):
        return []
    listed = engine.get("endpoints")
    if isinstance(listed, list) and listed:
        return [str(url) for url in listed]
    url = engine.get("url")
    return [endpoint_of(url)] if isinstance(url, str) and url else []


def fill_endpoints(requests: pd.DataFrame, run_json: JSONView) -> pd.DataFrame:
    """``requests`` with every missing ``endpoint`` read as the run's one engine URL (a folder
    written before fleets); the frame itself when none is missing or the run names no URL."""
    missing = requests["endpoint"].isna()
    urls = fleet_endpoints(run_json)
    if not missing.any() or len(urls) != 1:
        return requests
    requests = requests.copy()
    requests.loc[missing, "endpoint"] = urls[0]
    return requests


def fill_models(requests: pd.DataFrame, run_json: JSONView) -> pd.DataFrame:
    """``requests`` with every missing ``model`` read as run.json's ``engine.model`` (a request
    cut before it was sent, or a folder written before models were recorded); the frame
    itself when none is missing or run.json names no model."""
    engine = run_json.get("engine")
    model = engine.get("model") if isinstance(engine, Mapping) else None
    if "model" not in requests.columns:
        return requests
    missing = requests["model"].isna()
    if not missing.any() or not isinstance(model, str) or not model:
        return requests
    requests = requests.copy()
    requests.loc[missing, "model"] = model
    return requests
