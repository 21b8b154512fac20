"""The error rates of `bench ab` on this machine, for wall-clock figures and for CPU work: false
fails of identical sides, and how often, and after how many pairs, a 10% regression is caught
when it is a wait (a sleep in every step) and when it is work (a spin in every step).

    python benchmarks/ab_error_rates.py [--rounds 8] [--work runs/ab-error-rates]
        [--scenario benchmarks/perf-gate/ab-smoke.toml] [--rules benchmarks/perf-gate/ab-rules.toml]
        [--min-pairs 3] [--max-pairs 6] [--decisions 2000]

1. Calibration: two runs of the scenario, each against a fresh reference engine with the probes
   on. The median time between step starts while requests run, T, gives the sleep that costs a
   fraction s of throughput: d = T * s / (1 - s) (the engine setting step_delay_ms). The
   engine's CPU seconds per busy step, C (its CPU seconds per output token, summary.json's
   probes.cpu_work, times the run's output tokens per busy step), gives the spin that adds a
   fraction s to its CPU work: d = C * s (step_spin_ms, CPU time the engine thread burns). The
   shorter of the two runs' T and C: other jobs lengthen steps, and each regression is a share
   of the engine's own.
2. Pairs: ``--rounds`` rounds; each makes one pair of every arm (identical sides, B slept 10%,
   B spun 10%), arms in rotating order, each pair A B or B A in turn, every run against a fresh
   engine exactly as `bench ab` makes them (bench.ab.sides). All arms thus see the same machine
   over the same minutes. Each pair gives per-metric ratios B / A
   (bench.ab.paired.per_run_values), and its wall time.
3. Decisions, per kind of metric: wall (the rules' latency and throughput metrics) and CPU (the
   rules' cpu_work metrics), each as `bench ab --pairs MIN --until-decided --max-pairs MAX`
   would decide on that kind alone (the verdict of bench.ab.paired.ratio_verdict per metric, the
   gate's overall verdict):
   - consecutive: each arm's pairs in the order they were made, cut into decisions one after
     the other (no pair used twice): real decisions, few of them;
   - resampled: ``--decisions`` decisions per arm, each taking the arm's measured pairs in a
     random order (without replacement, so never more pairs than were measured): the rates at
     a resolution the consecutive ones cannot have, if pairs are exchangeable; with few
     measured pairs the decisions overlap and the rates are coarse;
   - resampled under the rules with every allowance halved (5% for CI's 10%) and every measured
     pair as the cap: what catching a 10% regression needs, since a change equal to the
     allowance can never be proven beyond it.
   Printed per arm and kind: the share of pass, fail and inconclusive, the pairs each decision
   took (mean, 95th percentile) and its time (pairs x the measured seconds per pair).

Everything lands under --work: the run folders per arm, and error_rates.json with the pairs'
ratios and the printed figures.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Sequence
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from rich.console import Console

from bench.ab.paired import per_run_values, ratio_verdict
from bench.ab.session import pair_order
from bench.ab.sides import Side, run_options
from bench.gate.baseline import load_run_group
from bench.gate.rules import GateRules, load_rules
from bench.run.orchestrate import RunOptions, run_benchmark
from bench.scenario.scenario import load_scenario

_HERE = Path(__file__).resolve().parent
# Each arm's regression of B: (the engine setting that makes it, its size as a fraction).
ARMS: dict[str, tuple[str, float] | None] = {
    "identical": None,
    "sleep-10%": ("step_delay_ms", 0.10),
    "spin-10%": ("step_spin_ms", 0.10),
}
CPU_FAMILY = "cpu_work"
CALIBRATION_RUNS = 2
PAIRS_JSON = "pairs.json"


def step_period_s(run_folder: Path) -> float:
    """The median time between step starts while requests ran (seconds), from steps.parquet."""
    steps = pd.read_parquet(run_folder / "steps.parquet")
    busy = steps[steps["num_seqs"] > 0].sort_values("start_s")
    gaps = busy["start_s"].diff().dropna()
    return float(gaps.median())


def step_cpu_s(run_folder: Path, summary: dict[str, Any]) -> float:
    """The engine's CPU seconds per busy step: its CPU seconds per output token (summary.json's
    probes.cpu_work) times the run's output tokens per busy step (requests and steps.parquet)."""
    work = (summary.get("probes") or {}).get("cpu_work") or {}
    per_token = work.get("engine_cpu_s_per_output_token")
    if not per_token:
        raise SystemExit(f"{run_folder}: no engine CPU work in its summary (probes off?)")
    steps = pd.read_parquet(run_folder / "steps.parquet")
    tokens = pd.read_parquet(run_folder / "requests.parquet")["output_tokens"].sum()
    return float(per_token) * float(tokens) / int((steps["num_seqs"] > 0).sum())


def kinds(rules: GateRules) -> dict[str, GateRules]:
    """The rules split by kind: "wall" (latencies and rates) and "cpu" (CPU work)."""
    cpu = tuple(r for r in rules.rules if r.metric.family == CPU_FAMILY)
    wall = tuple(r for r in rules.rules if r.metric.family != CPU_FAMILY)
    if not cpu or not wall:
        raise SystemExit(f"{rules.source}: needs wall-clock and {CPU_FAMILY}.* rules both")
    return {"wall": replace(rules, rules=wall), "cpu": replace(rules, rules=cpu)}


def overall(verdicts: Sequence[str]) -> str:
    """The gate's overall verdict: any fail, else any inconclusive, else pass."""
    return next(v for v in ("fail", "inconclusive", "pass") if v in {*verdicts, "pass"})


def decide(ratios: np.ndarray, rules: GateRules, min_pairs: int, max_pairs: int) -> tuple[str, int]:
    """``bench ab --until-decided`` over the rows of ``ratios`` (pairs x metrics), in order:
    the verdict and the pairs it took (None rows past what is given are not drawn)."""
    limit = min(max_pairs, ratios.shape[0])
    verdict = "inconclusive"
    for n in range(min_pairs, limit + 1):
        verdict = overall(
            [ratio_verdict(rule, rules, ratios[:n, m])[0] for m, rule in enumerate(rules.rules)]
        )
        if verdict != "inconclusive":
            return verdict, n
    return verdict, limit


def halved(rules: GateRules) -> GateRules:
    """The rules with every allowance halved."""
    tighter = tuple(replace(r, max_regression_pct=r.max_regression_pct / 2) for r in rules.rules)
    return replace(rules, rules=tighter, source=f"{rules.source} (allowances halved)")


def summarize(outcomes: list[tuple[str, int]], seconds_per_pair: float) -> dict[str, Any]:
    verdicts = [v for v, _ in outcomes]
    pairs = np.array([n for _, n in outcomes], dtype=float)
    count = len(outcomes)
    return {
        "decisions": count,
        **{v: sum(x == v for x in verdicts) / count if count else None for v in ("pass", "fail")},
        "inconclusive": sum(x == "inconclusive" for x in verdicts) / count if count else None,
        "pairs_mean": float(pairs.mean()) if count else None,
        "pairs_p95": float(np.percentile(pairs, 95)) if count else None,
        "seconds_mean": float(pairs.mean() * seconds_per_pair) if count else None,
        "seconds_p95": float(np.percentile(pairs, 95) * seconds_per_pair) if count else None,
    }


def consecutive(
    ratios: np.ndarray, rules: GateRules, min_pairs: int, max_pairs: int
) -> list[tuple[str, int]]:
    out, start = [], 0
    while ratios.shape[0] - start >= min_pairs:
        verdict, used = decide(ratios[start:], rules, min_pairs, max_pairs)
        out.append((verdict, used))
        start += used
    return out


def resampled(
    ratios: np.ndarray, rules: GateRules, min_pairs: int, max_pairs: int, count: int, seed: int
) -> list[tuple[str, int]]:
    """``count`` decisions, each over the arm's pairs in a random order. Without replacement:
    a pair drawn twice would add no spread and narrow the interval falsely."""
    rng = np.random.default_rng(seed)
    return [
        decide(ratios[rng.permutation(ratios.shape[0])], rules, min_pairs, max_pairs)
        for _ in range(count)
    ]


def calibrate(opts: RunOptions, work: Path, console: Console) -> dict[str, Any]:
    """The step period T and CPU seconds per step C (the shortest of the calibration runs'), and
    each arm's setting (module doc, step 1)."""
    periods, cpu_steps = [], []
    for _ in range(CALIBRATION_RUNS):
        folder, summary = run_benchmark(replace(opts, runs_dir=work / "calibration"), console)
        periods.append(step_period_s(folder))
        cpu_steps.append(step_cpu_s(folder, summary))
    period, cpu = min(periods), min(cpu_steps)
    settings: dict[str, dict[str, float]] = {}
    for arm, regression in ARMS.items():
        if regression is None:
            settings[arm] = {}
            continue
        name, share = regression
        ms = 1000 * (period * share / (1 - share) if name == "step_delay_ms" else cpu * share)
        settings[arm] = {name: round(ms, 4)}
    console.print(f"step period {1000 * period:.3f} ms, engine CPU per step {1000 * cpu:.3f} ms")
    console.print(f"settings of B: {settings}")
    return {
        "settings": settings,
        "periods_ms": [1000 * p for p in periods],
        "step_cpu_ms": [1000 * c for c in cpu_steps],
    }


def measure(
    opts: RunOptions, work: Path, rounds: int, console: Console
) -> tuple[dict[str, Any], dict[str, list[dict[str, Any]]]]:
    """Calibrate the arms, then make ``rounds`` rounds of pairs (module doc, steps 1-2)."""
    calibration = calibrate(opts, work, console)
    pairs: dict[str, list[dict[str, Any]]] = {arm: [] for arm in ARMS}
    arms = list(ARMS)
    for index in range(rounds):
        for arm in arms[index % len(arms) :] + arms[: index % len(arms)]:
            sides = {"A": Side("A"), "B": Side("B", calibration["settings"][arm])}
            entry: dict[str, Any] = {"round": index + 1, "order": "".join(pair_order(index))}
            started = time.monotonic()
            for name in pair_order(index):
                folder = work / arm / name
                run_folder, _ = run_benchmark(run_options(sides[name], opts, folder), console)
                entry[name] = str(run_folder)
            entry["seconds"] = time.monotonic() - started
            pairs[arm].append(entry)
            console.print(f"round {index + 1}/{rounds} {arm}: {entry['seconds']:.1f} s")
            # Written as it goes: an interrupted measurement can still be judged (--from-json).
            (work / PAIRS_JSON).write_text(json.dumps({**calibration, "pairs": pairs}, indent=2))
    return calibration, pairs


def ratios_of(entries: list[dict[str, Any]], rules: GateRules) -> np.ndarray:
    a, _ = load_run_group([Path(e["A"]) for e in entries], "A")
    b, _ = load_run_group([Path(e["B"]) for e in entries], "B")
    columns = [per_run_values(b, rule) / per_run_values(a, rule) for rule in rules.rules]
    return np.stack(columns, axis=1)


def judge_arm(
    ratios: np.ndarray, rules: GateRules, seconds: float, args: argparse.Namespace
) -> dict[str, Any]:
    """One arm's figures on one kind of rules (module doc, step 3); ``ratios``: pairs x rules."""
    names = [rule.metric.name for rule in rules.rules]
    logs = np.log(ratios)
    cap = ratios.shape[0]
    return {
        "ratio_geomean": dict(zip(names, np.exp(logs.mean(axis=0)).tolist(), strict=True)),
        "ratio_sd_log": dict(zip(names, logs.std(axis=0, ddof=1).tolist(), strict=True)),
        "consecutive": summarize(
            consecutive(ratios, rules, args.min_pairs, args.max_pairs), seconds
        ),
        "resampled": summarize(
            resampled(ratios, rules, args.min_pairs, args.max_pairs, args.decisions, 0), seconds
        ),
        "resampled_allowance_halved": summarize(
            resampled(ratios, halved(rules), args.min_pairs, cap, args.decisions, 1), seconds
        ),
    }


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--work", type=Path, default=Path("runs/ab-error-rates"))
    parser.add_argument("--scenario", default=str(_HERE / "perf-gate" / "ab-smoke.toml"))
    parser.add_argument("--rules", type=Path, default=_HERE / "perf-gate" / "ab-rules.toml")
    parser.add_argument("--min-pairs", type=int, default=3)
    parser.add_argument("--max-pairs", type=int, default=6)
    parser.add_argument("--decisions", type=int, default=2000)
    parser.add_argument(
        "--from-json",
        type=Path,
        help="Judge the pairs of an earlier pairs.json or error_rates.json again (no runs).",
    )
    args = parser.parse_args(argv)
    console = Console()
    by_kind = kinds(load_rules(args.rules))
    work: Path = args.work
    started = datetime.now(UTC).isoformat()
    load_before = Path("/proc/loadavg").read_text().split()[:3]
    if args.from_json:
        previous = json.loads(args.from_json.read_text())
        calibration = {
            k: v for k, v in previous.items() if k in ("settings", "periods_ms", "step_cpu_ms")
        }
        pairs = previous["pairs"]
        rounds = min(len(entries) for entries in pairs.values())
        pairs = {arm: entries[:rounds] for arm, entries in pairs.items()}
    else:
        scenario = load_scenario(args.scenario)
        # The CPU probe gives each run's CPU work; the other probes find nothing on a CPU box.
        opts = RunOptions(scenario, None, "reference", None, None, work, False, probes=True)
        calibration, pairs = measure(opts, work, args.rounds, console)
    load_after = Path("/proc/loadavg").read_text().split()[:3]
    results: dict[str, Any] = {}
    for arm in ARMS:
        seconds = float(np.mean([e["seconds"] for e in pairs[arm]]))
        results[arm] = {"pairs_measured": len(pairs[arm]), "seconds_per_pair": seconds}
        for kind, rules in by_kind.items():
            results[arm][kind] = judge_arm(ratios_of(pairs[arm], rules), rules, seconds, args)
    document = {
        "started_utc": started,
        "ended_utc": datetime.now(UTC).isoformat(),
        "loadavg_before": load_before,
        "loadavg_after": load_after,
        "rules": str(args.rules),
        "scenario": str(args.scenario),
        "min_pairs": args.min_pairs,
        "max_pairs": args.max_pairs,
        **calibration,
        "pairs": pairs,
        "results": results,
    }
    work.mkdir(parents=True, exist_ok=True)
    (work / "error_rates.json").write_text(json.dumps(document, indent=2) + "\n")
    _print(console, document)


def _print(console: Console, document: dict[str, Any]) -> None:
    console.print(
        f"rules {document['rules']}, pairs {document['min_pairs']}..{document['max_pairs']},"
        f" load average {document['loadavg_before']} -> {document['loadavg_after']}"
    )
    for arm, res in document["results"].items():
        console.print(
            f"[bold]{arm}[/bold] (B: {document['settings'][arm] or 'as A'}):"
            f" {res['pairs_measured']} pairs, {res['seconds_per_pair']:.1f} s per pair"
        )
        for kind in ("wall", "cpu"):
            figures = res[kind]
            geomean = {k: round(v, 3) for k, v in figures["ratio_geomean"].items()}
            sd = {k: round(v, 3) for k, v in figures["ratio_sd_log"].items()}
            console.print(f"  {kind}: ratio B/A {geomean}, sd(log) {sd}")
            for how in ("consecutive", "resampled", "resampled_allowance_halved"):
                s = figures[how]
                if not s["decisions"]:
                    console.print(f"    {how}: no decision (too few pairs)")
                    continue
                console.print(
                    f"    {how}: {s['decisions']} decisions: pass {100 * s['pass']:.1f}%,"
                    f" fail {100 * s['fail']:.1f}%, inconclusive {100 * s['inconclusive']:.1f}%;"
                    f" pairs mean {s['pairs_mean']:.2f}, p95 {s['pairs_p95']:.0f};"
                    f" time mean {s['seconds_mean']:.0f} s, p95 {s['seconds_p95']:.0f} s"
                )


if __name__ == "__main__":
    main()
