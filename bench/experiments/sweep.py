"""Sweeps: one scenario run at several concurrencies or rates, and the search for the highest
one that meets SLOs.

Each point is a full run (its own run folder) made by a ``run_point(scenario) -> (folder,
summary)`` callable (``bench run``'s path), so a sweep measures exactly what ``bench run`` does.
The sweep folder ``runs/<UTC>-sweep-<scenario>-<axis>/sweep.json`` lists every point with its
headline figures: per-user TPS (the distribution across requests), output tokens/s, TTFT and
TPOT, goodput, and whether the client was the bottleneck; the point of the table is how per-user
speed falls as concurrency grows. With length pairs (bench.experiments.sweep_lengths) every value
is run at each pair, and each point says its ``lengths`` ([input, output] tokens).

SLO search (:func:`search_slo`): targets like ``ttft_p99=500,tpot_p99=50`` (ms; any of ttft,
tpot, itl, e2el with p50/p90/p95/p99/p99.9, or ``error_rate``) are met when every figure is at
or under its target and no request failed. The search brackets the answer by doubling from the
start value until a point fails, then bisects between the last pass and the first failure
(integers for users, to a relative tolerance for rates); every run is counted and kept.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

from bench.experiments.sweep_lengths import Lengths, with_lengths
from bench.run.end.interrupt import RunInterrupted, interruption_note
from bench.scenario.scenario import Scenario, ScenarioError
from loadgen.workloads.arrivals import ArrivalProcess
from perfmodel.files import JSONObject, JSONView, json_safe, write_json
from results.figures.percentile_samples import thin_percentile
from results.folder.folder_kinds import SWEEP_JSON

__all__ = [
    "Axis",
    "RunPoint",
    "SweepPoint",
    "load_sweep",
    "parse_slo",
    "parse_values",
    "point_figures",
    "run_sweep",
    "scenario_at",
    "search_slo",
    "slo_failures",
    "write_sweep",
]

Axis = Literal["users", "rate"]
RunPoint = Callable[[Scenario], tuple[Path, JSONObject]]
_METRICS = ("ttft", "tpot", "itl", "e2el")
_STATS = ("p50", "p90", "p95", "p99", "p99.9", "mean", "max")


# The file in a sweep's folder that lists its points (write_sweep, load_sweep).


def parse_values(text: str, axis: Axis) -> list[float]:
    """``"1,2,4,8"`` -> [1, 2, 4, 8]; users must be integers >= 1, rates numbers > 0."""
    values: list[float] = []
    for part in text.split(","):
        part = part.strip()
        try:
            value = float(part)
        except ValueError:
            raise ValueError(
                f"--{axis}: {part!r} is not a number (expected e.g. 1,2,4,8)"
            ) from None
        if axis == "users" and (value != int(value) or value < 1):
            raise ValueError(f"--users: {part!r} must be an integer >= 1")
        if axis == "rate" and not (math.isfinite(value) and value > 0):
            raise ValueError(f"--rates: {part!r} must be requests/s > 0")
        values.append(int(value) if axis == "users" else value)
    if not values:
        raise ValueError(f"--{axis}: no values given")
    return values


def parse_slo(text: str) -> dict[str, float]:
    """``"ttft_p99=500,tpot_p99=50"`` -> {"ttft_p99": 500.0, ...} (ms; error_rate a fraction)."""
    targets: dict[str, float] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        key, sep, raw = part.partition("=")
        key = key.strip()
        metric, _, stat = key.partition("_")
        valid = key == "error_rate" or (metric in _METRICS and stat in _STATS)
        if not sep or not valid:
            raise ValueError(
                f"--slo: {part!r}: expected NAME=VALUE with NAME one of "
                f"{{{','.join(_METRICS)}}}_{{{','.join(_STATS)}}} or error_rate, e.g. ttft_p99=500"
            )
        try:
            targets[key] = float(raw)
        except ValueError:
            raise ValueError(f"--slo: {part!r}: {raw!r} is not a number") from None
        if not targets[key] >= 0:
            raise ValueError(f"--slo: {part!r}: the target must be >= 0")
    if not targets:
        raise ValueError("--slo: no targets given (e.g. ttft_p99=500,tpot_p99=50)")
    return targets


def scenario_at(
    scenario: Scenario, axis: Axis, value: float, requests_per_user: int | None
) -> Scenario:
    """``scenario`` at one sweep point: ``users = value``, or open-loop arrivals at ``value``
    requests/s (Poisson unless the scenario has its own [arrival] kind)."""
    label = f"u{int(value)}" if axis == "users" else f"r{value:g}"
    changes: JSONObject = {"name": f"{scenario.name}-{label}"}
    if axis == "users":
        if scenario.open_loop:
            raise ScenarioError(
                f"{scenario.source}: --users sweeps closed-loop users; this scenario is open "
                "loop ([arrival] or a trace): sweep --rates instead"
            )
        changes["users"] = int(value)
        if requests_per_user is not None:
            changes["num_requests"] = int(value) * requests_per_user
    else:
        if scenario.workload.kind in ("trace", "multiturn"):
            raise ScenarioError(
                f"{scenario.source}: --rates needs open-loop arrivals, which workload kind "
                f"'{scenario.workload.kind}' does not take"
            )
        old = scenario.arrival
        changes["arrival"] = (
            dataclasses.replace(old, rate_rps=float(value))
            if old
            else ArrivalProcess("poisson", float(value))
        )
    return dataclasses.replace(scenario, **changes)


def _figure(summary: JSONView, section: str, stat: str) -> float | None:
    value = (summary.get(section) or {}).get(stat)
    return float(value) if isinstance(value, int | float) else None


def point_figures(summary: JSONView) -> JSONObject:
    """The headline figures of one point, from its summary.json."""
    counts = (summary.get("counts") or {}).get("window") or {}
    return {
        "per_user_tps_p50": _figure(summary, "per_user_tps", "p50"),
        "per_user_tps_p10": _figure(summary, "per_user_tps", "p10"),
        "per_user_tps_mean": _figure(summary, "per_user_tps", "mean"),
        "output_tok_s": _figure(summary, "throughput", "output_tok_s"),
        "requests_per_s": _figure(summary, "throughput", "requests_per_s"),
        "ttft_p50_ms": _figure(summary, "ttft_ms", "p50"),
        "ttft_p99_ms": _figure(summary, "ttft_ms", "p99"),
        "tpot_p50_ms": _figure(summary, "tpot_ms", "p50"),
        "tpot_p99_ms": _figure(summary, "tpot_ms", "p99"),
        "goodput_rps": _figure(summary, "goodput", "requests_per_s"),
        "error_rate": counts.get("error_rate"),
        "client_bound": (summary.get("client") or {}).get("client_bound"),
    }


def slo_failures(summary: JSONView, targets: Mapping[str, float]) -> list[str]:
    """Why a run misses ``targets`` (empty: it meets them); a missing figure is a miss."""
    misses = []
    counts = (summary.get("counts") or {}).get("window") or {}
    error_rate = counts.get("error_rate")
    limit = targets.get("error_rate", 0.0)
    if error_rate is None or error_rate > limit:
        misses.append(f"error_rate {error_rate} > {limit:g}")
    for key, target in targets.items():
        if key == "error_rate":
            continue
        metric, _, stat = key.partition("_")
        value = _figure(summary, f"{metric}_ms", stat)
        if value is None or value > target:
            shown = "none" if value is None else f"{value:.1f}"
            misses.append(f"{key} {shown} ms > {target:g} ms")
    return misses


def thin_targets(summary: JSONView, targets: Mapping[str, float]) -> list[str]:
    """The percentile targets this run has too few requests to judge
    (results.figures.percentile_samples),
    e.g. ``"ttft_p99: p99 from 3 samples (needs >= 100 ...)"``."""
    thin = []
    for key in targets:
        if key == "error_rate":
            continue
        metric, _, stat = key.partition("_")
        section = summary.get(f"{metric}_ms")
        count = section.get("count") if isinstance(section, Mapping) else None
        if (why := thin_percentile(stat, count)) is not None:
            thin.append(f"{key}: {why}")
    return thin


@dataclass
class SweepPoint:
    """One run of a sweep: the axis value, its folder and headline figures."""

    value: float
    folder: Path
    figures: JSONObject
    slo_misses: list[str] | None = None
    # The run's usability verdict (summary.json's "usability"; None in older summaries).
    usability: JSONObject | None = None
    # SLO targets judged from too few requests to mean anything (thin_targets).
    thin_percentiles: list[str] = field(default_factory=list)
    # [input, output] tokens of every request of the point (--lengths); None: the scenario's.
    lengths: list[int] | None = None

    def to_dict(self) -> JSONObject:
        return json_safe(dataclasses.asdict(self))


@dataclass
class SweepResult:
    """A sweep's points in run order; ``search`` is set for an SLO search."""

    scenario: str
    axis: Axis
    points: list[SweepPoint] = field(default_factory=list)
    search: JSONObject | None = None
    # Set when a signal ended the sweep (bench.run.end.interrupt.interruption_note): the points
    # are those that finished.
    interrupted: JSONObject | None = None


def run_sweep(
    scenario: Scenario, axis: Axis, values: Sequence[float], run_point: RunPoint,
    requests_per_user: int | None = None, on_point: Callable[[SweepPoint], None] | None = None,
    lengths: Sequence[Lengths] = (),
) -> SweepResult:  # fmt: skip
    """Run ``scenario`` at each of ``values`` in order, at each of ``lengths`` (pair by pair;
    none: the scenario's own lengths); one run folder per point. A signal ends it with the
    finished points and ``interrupted`` set. Raises ScenarioError for lengths the scenario
    cannot take, before any run."""
    result = SweepResult(scenario.name, axis)
    plan = [(with_lengths(scenario, pair), list(pair)) for pair in lengths]
    for base, pair in plan or [(scenario, None)]:
        for value in values:
            try:
                at = scenario_at(base, axis, value, requests_per_user)
                folder, summary = run_point(at)
            except RunInterrupted as exc:
                result.interrupted = interruption_note(exc)
                return result
            point = SweepPoint(
                value, Path(folder), point_figures(summary), usability=summary.get("usability"),
                lengths=pair,
            )  # fmt: skip
            result.points.append(point)
            if on_point is not None:
                on_point(point)
    return result


def search_slo(
    scenario: Scenario, axis: Axis, targets: Mapping[str, float], run_point: RunPoint, *,
    start: float = 1.0, limit: float | None = None, tolerance: float = 0.05, max_runs: int = 12,
    requests_per_user: int | None = None, on_point: Callable[[SweepPoint], None] | None = None,
) -> SweepResult:  # fmt: skip
    """The highest users (integer) or rate meeting ``targets``, by bracketing (module docstring).

    ``limit`` caps the doubling (default: 1024 users, or 64 x start requests/s); ``tolerance``
    is the relative width at which a rate search stops; ``max_runs`` bounds the runs. The
    result's ``search`` says the best value (None when even ``start`` misses), the bracket,
    and the number of runs. A signal ends it with the finished points, ``interrupted`` set and
    the bracket found so far.
    """
    result = SweepResult(scenario.name, axis)
    cap = limit if limit is not None else (1024.0 if axis == "users" else start * 64)
    tested: dict[float, bool] = {}

    def passes(value: float) -> bool:
        if value not in tested:
            folder, summary = run_point(scenario_at(scenario, axis, value, requests_per_user))
            misses = slo_failures(summary, targets)
            point = SweepPoint(
                value, Path(folder), point_figures(summary), misses, summary.get("usability"),
                thin_targets(summary, targets),
            )  # fmt: skip
            result.points.append(point)
            if on_point is not None:
                on_point(point)
            tested[value] = not misses
        return tested[value]

    low: float | None = None
    high: float | None = None
    value = float(int(start)) if axis == "users" else start
    try:
        while len(result.points) < max_runs:
            if passes(value):
                low = value
                if value >= cap:
                    break
                value = min(value * 2, cap)
            else:
                high = value
                break
        while low is not None and high is not None and len(result.points) < max_runs:
            if axis == "users":
                if high - low <= 1:
                    break
                mid = float((int(low) + int(high)) // 2)
            else:
                if (high - low) / high <= tolerance:
                    break
                mid = (low + high) / 2
            if passes(mid):
                low = mid
            else:
                high = mid
    except RunInterrupted as exc:
        result.interrupted = interruption_note(exc)
    result.search = {
        "targets": dict(targets),
        "best": (int(low) if axis == "users" else low) if low is not None else None,
        "first_failing": (int(high) if axis == "users" else high) if high is not None else None,
        "runs": len(result.points),
        "hit_limit": high is None and low is not None and low >= cap,
        "hit_max_runs": len(result.points) >= max_runs,
        "thin_percentiles": sorted({t for p in result.points for t in p.thin_percentiles}),
    }
    return result


def write_sweep(result: SweepResult, runs_dir: Path) -> Path:
    """Write ``runs_dir/<UTC>-sweep-<scenario>-<axis>/sweep.json``; returns the folder."""
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    folder = runs_dir / f"{stamp}-sweep-{result.scenario}-{result.axis}"
    suffix = 1
    while folder.exists():
        suffix += 1
        folder = runs_dir / f"{stamp}-sweep-{result.scenario}-{result.axis}-{suffix}"
    folder.mkdir(parents=True)
    body = {
        "scenario": result.scenario,
        "axis": result.axis,
        "parameter": "users" if result.axis == "users" else "rate (req/s)",
        "points": [p.to_dict() for p in result.points],
        "search": result.search,
    }
    if result.interrupted is not None:
        body["interrupted"] = result.interrupted
    write_json(folder / SWEEP_JSON, body)
    return folder


def load_sweep(folder: Path) -> SweepResult:
    """The SweepResult that :func:`write_sweep` wrote to ``folder/sweep.json``.

    Raises ValueError naming the file when it is missing or not such a document.
    """
    path = Path(folder) / SWEEP_JSON
    try:
        body = json.loads(path.read_text(encoding="utf-8"))
        points = [
            SweepPoint(
                value=float(p["value"]),
                folder=Path(p["folder"]),
                figures=dict(p["figures"]),
                slo_misses=p.get("slo_misses"),
                usability=p.get("usability"),
                thin_percentiles=list(p.get("thin_percentiles") or []),
                lengths=[int(n) for n in p["lengths"]] if p.get("lengths") else None,
            )
            for p in body["points"]
        ]
        return SweepResult(
            str(body["scenario"]), body["axis"], points, body.get("search"),
            body.get("interrupted"),
        )  # fmt: skip
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"{path}: not a sweep.json of `bench sweep`: {exc}") from exc
