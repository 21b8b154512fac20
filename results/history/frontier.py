"""Throughput against interactivity: a sweep's runs as points and their Pareto frontier.

Each run is a point: x, the speed one user sees (``per_user_tps.p50``, output tokens/s per
user), and y, the output tokens/s the machine gives per accelerator: per GPU where the run had
GPUs (run.json's ``hardware.gpus``), else per logical CPU core. A point is on the frontier when
no other point of its configuration is at least as good on both axes and better on one; the
frontier is what a configuration offers, every other point is a worse choice.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from results.folder.run_folder import RUN_JSON, read_run_json
from results.history.row import run_row

__all__ = ["X_FIGURE", "Y_FIGURE", "FrontierPoint", "frontier_points", "pareto"]

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


def frontier_points(runs: Sequence[Path]) -> list[FrontierPoint]:
    """The points of ``runs`` (run folders) with their frontier marked; runs without either
    figure are left out. Raises RunFolderError for a folder that is no run."""
    found = []
    for folder in runs:
        row = run_row(folder)
        hardware = read_run_json(Path(folder) / RUN_JSON).get("hardware") or {}
        gpus = len(hardware.get("gpus") or [])
        units, per = (gpus, "GPU") if gpus else (hardware.get("cpu_count_logical") or 1, "CPU core")
        x, y = row.get(X_FIGURE), row.get(Y_FIGURE)
        if x is not None and y is not None:
            found.append(FrontierPoint(row["run_id"], row["path"], x, y / units, per))
    marks = pareto([(p.per_user_tok_s, p.tok_s_per_unit) for p in found])
    return [
        FrontierPoint(p.run_id, p.path, p.per_user_tok_s, p.tok_s_per_unit, p.per, on)
        for p, on in zip(found, marks, strict=True)
    ]
