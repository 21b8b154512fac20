"""How far the simulated device's predictions are from real runs of the torch executor, here.

For 1, 10 and 100 closed-loop users (the shipped 1-user and 100-users scenarios; 10 users with
100 requests), run the real reference engine on this CPU (`bench run`, no probes) and then, back
to back so that the machine's load is alike, the same scenario on the simulated CPU (`bench
simulate --gpu cpu`), and print output tokens/s, per-user TPS p50 and TTFT p50 of both with the
simulation's relative error. Both engines use one torch thread (a machine shared with other
processes makes multi-threaded steps swing tenfold; see engine.sim.calibration).

    python benchmarks/sim_validate_cpu.py [--calibrate served|engine] [--users 1,10,100]

``--calibrate`` first runs `bench calibrate`, then fits the simulated CPU (`bench
sim-calibrate`, saved under ~/.cache/llm-perf-lab for every later simulation of this CPU) to
``served``: two served runs at other loads and lengths than the ones validated (4 and 48 users,
prompts 48-320 and outputs 32-128 tokens, another seed), whose steps include what serving costs
the engine (the server's and the client's CPU time on the same cores); or ``engine``: steps of
the engine alone, driven directly in a loop (`bench sim-calibrate`'s own measurement).
"""

from __future__ import annotations

import argparse
import dataclasses
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from bench.cli.simulate import sim_calibrate
from bench.run.orchestrate import RunOptions, run_benchmark
from bench.scenario.scenario import Scenario, load_scenario
from bench.sim.simulate import simulate
from loadgen.workloads.spec import LengthDist

METRICS = (
    ("output tok/s", ("throughput", "output_tok_s")),
    ("per-user TPS p50", ("per_user_tps", "p50")),
    ("TTFT p50 ms", ("ttft_ms", "p50")),
)


def scenario_for(users: int) -> Scenario:
    """The shipped scenario for 1 or 100 users; 10 users: 100-users' workload, 100 requests."""
    base = load_scenario("1-user" if users == 1 else "100-users")
    if users not in (1, 100):
        base = dataclasses.replace(base, name=f"{users}-users", users=users, num_requests=100)
    return dataclasses.replace(base, engine=dataclasses.replace(base.engine, num_threads=1))


def calibration_scenario(users: int) -> Scenario:
    """A served run to calibrate from: other load, lengths and seed than the validation's."""
    base = scenario_for(100)
    return dataclasses.replace(
        base, name=f"sim-calibration-{users}-users", users=users, num_requests=3 * users,
        seed=1, input_len=LengthDist("uniform", low=48, high=320),
        output_len=LengthDist("uniform", low=32, high=128),
    )  # fmt: skip


def calibrate(how: str, runs_dir: Path, console: Console) -> None:
    bench = [sys.executable, "-m", "bench"]
    subprocess.run([*bench, "calibrate"], check=True)
    folders = []
    if how == "served":
        for users in (4, 48):
            opts = RunOptions(calibration_scenario(users), None, "reference", None, None,
                              runs_dir, live=False, probes=False)  # fmt: skip
            folders.append(run_benchmark(opts, console)[0])
    # In process: `bench sim-calibrate` is the same function.
    sim_calibrate(model="tiny", from_run=folders or None, output=None, num_threads=1)


def figure(summary: dict[str, Any], path: tuple[str, str]) -> float | None:
    value = (summary.get(path[0]) or {}).get(path[1])
    return float(value) if value is not None else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--calibrate",
        choices=("served", "engine"),
        default=None,
        help="calibrate this CPU first, from served runs or the engine alone",
    )
    parser.add_argument("--users", default="1,10,100", help="comma-separated user counts")
    parser.add_argument("--runs-dir", type=Path, default=None, help="run folders (default: tmp)")
    args = parser.parse_args()
    console = Console(width=132)
    runs_dir = args.runs_dir or Path(tempfile.mkdtemp(prefix="sim-validate-"))
    if args.calibrate:
        calibrate(args.calibrate, runs_dir, console)
    table = Table(title="simulated CPU vs the torch executor on it (tiny preset)")
    for col in ("users", "metric", "real", "simulated", "error"):
        table.add_column(col, justify="right")
    for users in (int(u) for u in args.users.split(",")):
        spec = scenario_for(users)
        console.print(f"[bold]{users} users[/bold]: real run ...")
        opts = RunOptions(spec, None, "reference", None, None, runs_dir, live=False, probes=False)
        real_folder, real = run_benchmark(opts, console)
        sim_folder, sim = simulate(spec, runs_dir, {"gpu": "cpu"})
        console.print(f"  real {real_folder.name}  simulated {sim_folder.name}")
        for name, path in METRICS:
            r, s = figure(real, path), figure(sim, path)
            error = f"{(s - r) / r:+.1%}" if r and s is not None else "n/a"
            table.add_row(str(users), name, f"{r:,.1f}" if r else "n/a",
                          f"{s:,.1f}" if s is not None else "n/a", error)  # fmt: skip
    console.print(table)
    console.print(f"run folders: {runs_dir}")


if __name__ == "__main__":
    main()
