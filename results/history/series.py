"""Change points per series, with the runs and commits on either side, and the runs since the
last one: what `bench history changes` lists, the trend page marks and `bench gate --history`
takes as its baseline.

A series is the valid runs of one scenario, engine, model and hardware
(results.history.query.SERIES_KEYS), in time order; change points are searched in each alone.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import duckdb
import pandas as pd

from results.history.changes import DEFAULT_MAX_PVALUE, ChangePoint, find
from results.history.query import SERIES_KEYS, Filters, metric_series

__all__ = ["SeriesChange", "runs_since_last_change", "series_changes", "split_series"]


@dataclass(frozen=True)
class SeriesChange:
    """A change point of ``metric`` in the series ``series`` (SERIES_KEYS to values): the run
    that starts the new level and the one before it, their commits, and the runs counted on
    either side (up to the neighbouring change points)."""

    series: Mapping[str, Any]
    metric: str
    point: ChangePoint
    first_run: Mapping[str, Any]
    last_run_before: Mapping[str, Any]
    runs_before: int
    runs_after: int

    def to_dict(self) -> dict[str, Any]:
        def run(r: Mapping[str, Any]) -> dict[str, Any]:
            keys = ("run_id", "path", "started_utc", "git_commit", "engine_version")
            return {k: str(r[k]) if r.get(k) is not None else None for k in keys}

        return {
            "series": dict(self.series),
            "metric": self.metric,
            "change_pct": self.point.change_pct,
            "mean_before": self.point.mean_before,
            "mean_after": self.point.mean_after,
            "pvalue": self.point.pvalue,
            "confidence": 1.0 - self.point.pvalue,
            "first_run": run(self.first_run),
            "last_run_before": run(self.last_run_before),
            "runs_before": self.runs_before,
            "runs_after": self.runs_after,
        }


def split_series(frame: pd.DataFrame) -> Iterable[tuple[dict[str, Any], pd.DataFrame]]:
    """(series key, its rows in time order) of every series in ``frame``."""
    if frame.empty:
        return
    for key, rows in frame.groupby(list(SERIES_KEYS), dropna=False, sort=True):
        yield dict(zip(SERIES_KEYS, key, strict=True)), rows.reset_index(drop=True)


def _changes_of(
    key: Mapping[str, Any], metric: str, rows: pd.DataFrame, max_pvalue: float
) -> list[SeriesChange]:
    points = find(rows["value"].to_numpy(), max_pvalue=max_pvalue)
    bounds = [0, *(p.index for p in points), len(rows)]
    records = rows.to_dict("records")
    return [
        SeriesChange(
            key,
            metric,
            p,
            records[p.index],
            records[p.index - 1],
            p.index - bounds[i],
            bounds[i + 2] - p.index,
        )
        for i, p in enumerate(points)
    ]


def series_changes(
    con: duckdb.DuckDBPyConnection,
    metrics: Sequence[str],
    filters: Filters,
    max_pvalue: float = DEFAULT_MAX_PVALUE,
) -> list[SeriesChange]:
    """Every change point of each of ``metrics`` in each series ``filters`` take (valid runs
    only unless they include invalid ones: an invalid run's figure is not the engine's alone),
    by series, metric and time."""
    out: list[SeriesChange] = []
    for metric in metrics:
        for key, rows in split_series(metric_series(con, metric, filters)):
            out += _changes_of(key, metric, rows, max_pvalue)
    return out


def runs_since_last_change(
    con: duckdb.DuckDBPyConnection,
    series: Mapping[str, Any],
    metrics: Sequence[str],
    exclude: Sequence[str] = (),
    max_pvalue: float = DEFAULT_MAX_PVALUE,
) -> tuple[pd.DataFrame, SeriesChange | None]:
    """The valid runs of ``series`` since its last change point in any of ``metrics`` (all of
    them when it has none), less the run keys ``exclude`` (the candidate's own); and that
    change point (None: none). A series whose hardware is None takes the hardware of its
    latest run."""
    filters = Filters(scenario=series["scenario"], engine=series["engine"], model=series["model"])
    if series.get("hardware") is None:
        latest = metric_series(con, metrics[0], filters)
        latest = latest[~latest["run_key"].isin(exclude)]
        if latest.empty:
            return latest, None
        series = {**series, "hardware": latest["hardware"].iloc[-1]}
    frames, last = [], None
    for metric in metrics:
        rows = metric_series(con, metric, filters)
        rows = rows[~rows["run_key"].isin(exclude)]
        if series.get("hardware") is not None:
            rows = rows[rows["hardware"] == series["hardware"]]
        rows = rows.reset_index(drop=True)
        frames.append(rows)
        for change in _changes_of(series, metric, rows, max_pvalue):
            if last is None or change.first_run["started_utc"] > last.first_run["started_utc"]:
                last = change
    runs = pd.concat(frames).drop_duplicates("run_key") if frames else pd.DataFrame()
    if last is not None and not runs.empty:
        runs = runs[runs["started_utc"] >= last.first_run["started_utc"]]
    return runs.sort_values(["started_utc", "run_id"]).reset_index(drop=True), last
