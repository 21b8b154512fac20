"""A stand-in for `bench sweep`'s runs: a model of an endpoint whose figures follow the load."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import typer

from bench.cli import sweep as cli_sweep
from bench.scenario.scenario import Scenario

__all__ = ["ModelServer", "sweep_app"]


class ModelServer:
    """TTFT p99 = 10 ms x load; per-user TPS = 100 / sqrt(load); counts every run."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.runs: list[Scenario] = []

    def __call__(self, scenario: Scenario) -> tuple[Path, dict[str, Any]]:
        self.runs.append(scenario)
        load = scenario.arrival.rate_rps if scenario.arrival else scenario.users
        folder = self.tmp / f"run-{len(self.runs)}"
        folder.mkdir(parents=True)
        summary = {
            "counts": {"window": {"error_rate": 0.0}},
            "ttft_ms": {"p99": 10.0 * load, "p50": 5.0 * load},
            "tpot_ms": {"p99": 5.0 + load, "p50": 5.0},
            "per_user_tps": {"p50": 100 / load**0.5, "p10": 80 / load**0.5, "mean": 1.0},
            "throughput": {"output_tok_s": 100 * load**0.5, "requests_per_s": 1.0},
            "goodput": {"requests_per_s": None},
            "client": {"client_bound": load > 100},
        }
        return folder, summary


def sweep_app(tmp: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[typer.Typer, ModelServer]:
    """An app of `bench sweep` alone whose runs go to a ModelServer in ``tmp``."""
    server = ModelServer(tmp)
    monkeypatch.setattr(cli_sweep, "make_run_point", lambda console, **kw: server)
    app = typer.Typer()
    cli_sweep.register(app)
    app.command()(lambda: None)  # a second command keeps `sweep` a subcommand
    return app, server
