"""Which replica served each request: run.json's endpoints, and the ``endpoint`` column a folder
written before fleets lacks (results.figures.fleet breaks the figures down by it)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pandas as pd

from results.folder.records import endpoint_of

__all__ = ["fill_endpoints", "fleet_endpoints"]


def fleet_endpoints(run_json: Mapping[str, Any]) -> list[str]:
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


def fill_endpoints(requests: pd.DataFrame, run_json: Mapping[str, Any]) -> pd.DataFrame:
    """``requests`` with every missing ``endpoint`` read as the run's one engine URL (a folder
    written before fleets); the frame itself when none is missing or the run names no URL."""
    missing = requests["endpoint"].isna()
    urls = fleet_endpoints(run_json)
    if not missing.any() or len(urls) != 1:
        return requests
    requests = requests.copy()
    requests.loc[missing, "endpoint"] = urls[0]
    return requests
