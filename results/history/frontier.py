"""Throughput against interactivity: a sweep's runs as points and their Pareto frontier.

Each run is a point: x, the speed one user sees (``per_user_tps.p50``, output tokens/s per
user), and y, the output tokens/s the machine gives per accelerator: per GPU where the run had
GPUs (run.json's ``hardware.gpus``), else per logical CPU core. A point is on the frontier when
no other point of its configuration is at least as good on both axes and better on one; the
frontier is what a configuration offers, every other point is a worse choice.

Throughput and speed per user depend on the prompt and answer lengths as much as on the
configuration, so runs of several fixed length pairs (`bench sweep --lengths 128:128,512:64`)
are one series per pair (:func:`frontier_series`), each with its own frontier: a point is only
compared with runs of its own lengths.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from perfmodel.files import JSONView
from results.folder.run_folder import RUN_JSON, read_run_json
from results.history.row import run_row

__all__ = [
    "X_FIGURE",
    "Y_FIGURE",
    "FrontierPoint",
    "frontier_points",
    "frontier_series",
    "pareto",
    "run_lengths",
]

X_FIGURE = "per_user_tps.p50"
Y_FIGURE = "throughput.output_tok_s"


@dataclass(frozen=True)
class FrontierPoint:
    """One run: its tokens/s per user (x), output tokens/s per ``per`` (y), and whether it is
    on its configuration's frontier."""

    run_id: str
    path: str
    per_user_tok_s: float
    tok_s_per_unit: float
    per: str
    on_frontier: bool = False
    # "INPUT:OUTPUT" tokens when every request of the run had those lengths (else None).
    lengths: str | None = None


def pareto(points: Sequence[tuple[float, float]]) -> list[bool]:
    """For each (x, y), whether no other point is at least as high on both and higher on one."""
    return [
        not any(
            (ox >= x and oy >= y) and (ox > x or oy > y)
            for j, (ox, oy) in enumerate(points)
            if j != i
        )
        for i, (x, y) in enumerate(points)
    ]


def run_lengths(scenario: JSONView) -> str | None:
    """``"128:64"`` when run.json's scenario fixed every prompt and answer length, else None."""
    prompt, output = scenario.get("input_len") or {}, scenario.get("output_len") or {}
    if prompt.get("kind") == "fixed" and output.get("kind") == "fixed":
        return f"{prompt.get('value')}:{output.get('value')}"
    return None


def _points(runs: Sequence[Path]) -> list[FrontierPoint]:
    found = []
    for folder in runs:
        row = run_row(folder)
        run_json = read_run_json(Path(folder) / RUN_JSON)
        hardware = run_json.get("hardware") or {}
        gpus = len(hardware.get("gpus") or [])
        units, per = (gpus, "GPU") if gpus else (hardware.get("cpu_count_logical") or 1, "CPU core")
        x, y = row.get(X_FIGURE), row.get(Y_FIGURE)
        lengths = run_lengths(run_json.get("scenario") or {})
        if x is not None and y is not None:
            found.append(
                FrontierPoint(row["run_id"], row["path"], x, y / units, per, False, lengths)
            )
    return found


def _marked(points: Sequence[FrontierPoint]) -> list[FrontierPoint]:
    marks = pareto([(p.per_user_tok_s, p.tok_s_per_unit) for p in points])
    return [replace(p, on_frontier=on) for p, on in zip(points, marks, strict=True)]


def frontier_points(runs: Sequence[Path]) -> list[FrontierPoint]:
    """The points of ``runs`` (run folders) with their frontier marked; runs without either
    figure are left out. Raises RunFolderError for a folder that is no run."""
    return _marked(_points(runs))


def frontier_series(runs: Sequence[Path]) -> dict[str | None, list[FrontierPoint]]:
    """The points of ``runs`` by length pair ("128:64"; None for runs of varied lengths), in
    the order the pairs first appear, each series with its own frontier marked."""
    series: dict[str | None, list[FrontierPoint]] = {}
    for point in _points(runs):
        series.setdefault(point.lengths, []).append(point)
    return {lengths: _marked(points) for lengths, points in series.items()}
