"""A real history: the A/B smoke scenario against the reference engine of each of N commits of
this repository's main that touched engine/ (the last N up to ``--newest``), indexed in a run
history, its change points set beside the commits whose messages say they changed the engine's
speed.

    python benchmarks/real_history.py [--commits 24] [--newest main] [--num-requests 48]
        [--work runs/real-history] [--budget-min 40]

1. Commits: ``git log --first-parent NEWEST -- engine``, the last ``--commits``, oldest first:
   only a commit that changed the engine can change its speed (the load generator, the probes
   and the figures are this checkout's for every run). Each is installed as `bench ab --a-rev`
   installs a side (bench.ab.revisions: a cached worktree and virtualenv per commit) and its
   engine serves one run of the scenario (``--num-requests`` requests), the CPU probe on.
   A commit whose engine cannot be installed or started here is listed with the reason.
2. The runs are indexed in ``WORK/history.duckdb`` (`bench history add`), and `bench history
   changes --include-invalid --json` searches output tokens/s and the engine's CPU seconds per
   output token (the runs of a shared box are marked busy, so not valid; the search is over all
   of them). Run i is commit i: the history's started_utc order is the commits' order.
3. Printed: per commit its subject, whether the message says it changed speed (``SPEED``), the
   run's tok/s and CPU ms per token, and the change points whose first run is that commit's.

Everything lands under --work: the run folders by commit, history.duckdb, history.json (the
commits, their runs or failures, the change points), written as it goes.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.console import Console

from bench.ab.sides import Side, prepare, run_options
from bench.run.orchestrate import RunOptions, run_benchmark
from bench.scenario.scenario import load_scenario

_HERE = Path(__file__).resolve().parent
_ROOT = _HERE.parent
# Words of a commit message that claim a change of the engine's speed.
SPEED_CLAIM = re.compile(
    r"faster|slower|speed|tok/s|\bms\b|->|kernel|native|in one C call|GEMV|AVX", re.IGNORECASE
)
METRICS = ("throughput.output_tok_s", "probes.cpu_work.engine_cpu_s_per_output_token")


def engine_commits(newest: str, count: int) -> list[tuple[str, str]]:
    """(sha, subject) of the last ``count`` first-parent commits up to ``newest`` that touched
    engine/, oldest first."""
    out = subprocess.run(
        ["git", "log", "--first-parent", f"-n{count}", "--format=%H%x09%s", newest, "--", "engine"],
        cwd=_ROOT, capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    rows = [line.split("\t", 1) for line in out.splitlines() if line]
    return [(sha, subject) for sha, subject in reversed(rows)]


def measure_commit(sha: str, base: RunOptions, work: Path, console: Console) -> dict[str, Any]:
    """One run of the scenario against ``sha``'s engine: its folder and figures, or why not."""
    started = time.monotonic()
    try:
        side = prepare(Side("A", {}, sha))
        folder, summary = run_benchmark(run_options(side, base, work / "runs" / sha[:12]), console)
    except Exception as exc:  # an old engine that cannot run here is a finding, not a crash
        return {"error": f"{type(exc).__name__}: {exc}"[:400]}
    work_figures = (summary.get("probes") or {}).get("cpu_work") or {}
    return {
        "folder": str(folder),
        "run_id": folder.name,
        "seconds": time.monotonic() - started,
        "output_tok_s": (summary.get("throughput") or {}).get("output_tok_s"),
        "engine_cpu_s_per_output_token": work_figures.get("engine_cpu_s_per_output_token"),
        "errors": ((summary.get("counts") or {}).get("all") or {}).get("errors"),
    }


def bench(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "bench", *args], cwd=_ROOT, capture_output=True, text=True
    )


def change_points(work: Path, folders: Sequence[str]) -> list[dict[str, Any]]:
    """Index ``folders`` in WORK/history.duckdb and return its change points (JSON)."""
    history = str(work / "history.duckdb")
    added = bench("history", "add", *folders, "--history", history)
    if added.returncode != 0:
        raise SystemExit(f"bench history add failed: {added.stdout}{added.stderr}")
    found = bench(
        "history", "changes", *METRICS, "--history", history, "--include-invalid", "--json"
    )
    if found.returncode != 0:
        raise SystemExit(f"bench history changes failed: {found.stdout}{found.stderr}")
    return json.loads(found.stdout)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--commits", type=int, default=24)
    parser.add_argument("--newest", default="main", help="The newest commit of the window.")
    parser.add_argument("--scenario", default=str(_HERE / "perf-gate" / "ab-smoke.toml"))
    parser.add_argument("--num-requests", type=int, default=48)
    parser.add_argument("--work", type=Path, default=Path("runs/real-history"))
    parser.add_argument("--budget-min", type=float, default=40.0, help="No commit started past it.")
    args = parser.parse_args(argv)
    console = Console()
    work: Path = args.work.resolve()
    work.mkdir(parents=True, exist_ok=True)
    scenario = dataclasses.replace(load_scenario(args.scenario), num_requests=args.num_requests)
    base = RunOptions(scenario, None, "reference", None, None, work, False, probes=True)
    started = time.monotonic()
    load_before = Path("/proc/loadavg").read_text().split()[:3]
    commits: list[dict[str, Any]] = []
    for sha, subject in engine_commits(args.newest, args.commits):
        if time.monotonic() - started > 60 * args.budget_min:
            console.print(f"budget of {args.budget_min:g} min spent: {sha[:10]} and later not run")
            break
        entry = {
            "commit": sha,
            "subject": subject,
            "speed_claim": bool(SPEED_CLAIM.search(subject)),
        }
        entry.update(measure_commit(sha, base, work, console))
        commits.append(entry)
        console.print(f"{sha[:10]} {entry.get('output_tok_s') or entry.get('error')}")
        (work / "history.json").write_text(json.dumps({"commits": commits}, indent=2) + "\n")
    folders = [c["folder"] for c in commits if "folder" in c]
    changes = change_points(work, folders) if len(folders) >= 2 else []
    document = {
        "scenario": args.scenario,
        "num_requests": args.num_requests,
        "minutes": (time.monotonic() - started) / 60,
        "loadavg_before": load_before,
        "loadavg_after": Path("/proc/loadavg").read_text().split()[:3],
        "commits": commits,
        "changes": changes,
    }
    (work / "history.json").write_text(json.dumps(document, indent=2, default=str) + "\n")
    _print(console, document)


def _print(console: Console, document: dict[str, Any]) -> None:
    by_run: dict[str, list[str]] = {}
    for change in document["changes"]:
        first = change["first_run"]["run_id"]
        short = "tok/s" if change["metric"].startswith("throughput") else "CPU/token"
        text = f"{short} {change['change_pct']:+.1f}% (p {change['pvalue']:.3g})"
        by_run.setdefault(first, []).append(text)
    console.print(
        f"{len(document['commits'])} commits in {document['minutes']:.1f} min, load average"
        f" {document['loadavg_before']} -> {document['loadavg_after']}"
    )
    for c in document["commits"]:
        claim = "SPEED" if c["speed_claim"] else "     "
        if "error" in c:
            console.print(f"{c['commit'][:10]} {claim} not run: {c['error'][:100]}")
            continue
        cpu = c["engine_cpu_s_per_output_token"]
        figures = f"{c['output_tok_s'] or 0:7.1f} tok/s {1000 * (cpu or 0):6.3f} CPU ms/token"
        marks = "; ".join(by_run.get(c["run_id"], []))
        console.print(f"{c['commit'][:10]} {claim} {figures} {marks:40} {c['subject'][:60]}")


if __name__ == "__main__":
    main()
