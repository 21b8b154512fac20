"""A `bench run` against several replicas (`--url A --url B ... [--route POLICY]`).

What changes from a run against one endpoint, and where:

- the options: every ``--url`` of a fleet in order (:func:`fleet_urls`; one URL is an ordinary
  run), for a running engine only (no engine that bench starts);
- the pre-flight (:func:`preflight_fleet`): every replica is checked as one endpoint is
  (bench.run.endpoint.preflight), against the model the first one serves, and the first that refuses
  stops the run (exit 2), named with its place in the fleet;
- run.json's engine section lists the replicas and the policy (:func:`fleet_engine_fields`);
  the engine's description is the first replica's, and neither steps.parquet nor the engine's
  cumulative counters are recorded, since one table or one set of counters would mix replicas
  that step on their own;
- the load: each request goes to the replica its client's router picks
  (loadgen.client.routing); the probes scrape every replica's /metrics, each series labelled
  ``endpoint`` (bench.run.probing);
- the summary: per replica beside the totals (results.figures.fleet), and its terminal table
  (bench.run.end.fleet_report).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

from bench.run.endpoint.preflight import Preflight, PreflightError, preflight
from bench.scenario.scenario import Scenario
from engine_adapters.base import EngineAdapter
from loadgen.client.routing import check_route
from loadgen.drivers.driver import LoadPlan
from results.folder.records import endpoint_of
from results.schema import EngineSection

__all__ = ["fleet_engine_fields", "fleet_urls", "preflight_fleet"]


def fleet_urls(urls: Sequence[str], route: str, *, starts_engine: bool) -> tuple[str, ...]:
    """The replicas of a run given ``urls`` (every ``--url``, in order): all of them when there
    are several, else none (an ordinary run). ``starts_engine``: --launch or --launch-model.

    Raises:
        ValueError: a bad ``--route``, the same replica twice, or a fleet with an engine that
            bench starts; the message names the option and the fix.
    """
    check_route(route)
    if len(urls) < 2:
        return ()
    named = [endpoint_of(url) for url in urls]
    twice = sorted({url for url in named if named.count(url) > 1})
    if twice:
        raise ValueError(
            f"--url {twice[0]} is given twice: a fleet's replicas are distinct endpoints"
        )
    if starts_engine:
        raise ValueError(
            "several --url run against engines already running: drop --launch/--launch-model, "
            "or start each replica first"
        )
    return tuple(named)


def preflight_fleet(
    scenario: Scenario,
    plan: LoadPlan,
    endpoints: Sequence[str],
    adapter: EngineAdapter,
    model: str | None,
    headers: Mapping[str, str] | None = None,
) -> Preflight:
    """bench.run.endpoint.preflight.preflight on every replica, in order; the model is ``model``,
    else
    the one the first replica serves first, which every other must serve. Returns the first
    replica's findings with every replica's notes.

    Raises:
        PreflightError: the first replica that refuses, its message prefixed with which one.
    """
    checked: Preflight | None = None
    notes: list[str] = []
    for n, url in enumerate(endpoints, start=1):
        try:
            found = preflight(scenario, plan, url, adapter, model, headers)
        except PreflightError as e:
            raise PreflightError(f"replica {n} of {len(endpoints)} ({url}): {e}") from e
        notes += found.notes
        if checked is None:
            checked, model = found, found.model
    assert checked is not None, "a fleet has replicas"
    return dataclasses.replace(checked, notes=notes)


def fleet_engine_fields(endpoints: Sequence[str], route: str) -> EngineSection:
    """run.json's engine section's fleet keys: none for one endpoint (module docstring)."""
    if len(endpoints) < 2:
        return EngineSection()
    return EngineSection(endpoints=list(endpoints), route=route)
