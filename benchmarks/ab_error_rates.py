"""The error rates of `bench ab` on this machine: false fails of identical sides, and how often,
and after how many pairs, a slowdown of 10% and of 25% of throughput is caught.

    python benchmarks/ab_error_rates.py [--rounds 12] [--work runs/ab-error-rates]
        [--scenario benchmarks/perf-gate/ab-smoke.toml] [--rules benchmarks/perf-gate/ab-rules.toml]
        [--min-pairs 3] [--max-pairs 6] [--decisions 2000]

1. Calibration: two runs of the scenario, each against a fresh reference engine; the median
   time between step starts while requests run, T (the shorter of the two: other jobs lengthen
   steps, and the delay is a share of the engine's own), gives the step delay that costs a
   fraction s of throughput: d = T * s / (1 - s) (the engine setting step_delay_ms).
2. Pairs: ``--rounds`` rounds; each makes one pair of every arm (identical sides, B slowed by
   10%, B slowed by 25%), arms in rotating order, each pair A B or B A in turn, every run
   against a fresh engine exactly as `bench ab` makes them (bench.ab.sides). All arms thus see
   the same machine over the same minutes. Each pair gives per-metric ratios B / A
   (bench.ab.paired.per_run_values), and its wall time.
3. Decisions, as `bench ab --pairs MIN --until-decided --max-pairs MAX` makes them (the verdict
   of bench.ab.paired.ratio_verdict per metric, the gate's overall verdict):
   - consecutive: each arm's pairs in the order they were made, cut into decisions one after
     the other (no pair used twice): real decisions, few of them;
   - resampled: ``--decisions`` decisions per arm, each taking the arm's measured pairs in a
     random order (without replacement, so never more pairs than were measured): the rates at
     a resolution the consecutive ones cannot have, if pairs are exchangeable; with few
     measured pairs the decisions overlap and the rates are coarse.
   Printed per arm: the share of pass, fail and inconclusive, the pairs each decision took
   (mean, 95th percentile) and its time (pairs x the measured seconds per pair). Identical
   sides and the 10% arm are also judged under rules halved (an allowance of 5%) with every
   measured pair as the cap: what a 10% slowdown needs here.

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
ARMS: dict[str, float] = {"identical": 0.0, "slower-10%": 0.10, "slower-25%": 0.25}
CALIBRATION_RUNS = 2
PAIRS_JSON = "pairs.json"


def step_period_s(run_folder: Path) -> float:
    """The median time between step starts while requests ran (seconds), from steps.parquet."""
    steps = pd.read_parquet(run_folder / "steps.parquet")
    busy = steps[steps["num_seqs"] > 0].sort_values("start_s")
    gaps = busy["start_s"].diff().dropna()
    return float(gaps.median())


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


def measure(
    opts: RunOptions, work: Path, rounds: int, console: Console
) -> tuple[dict[str, float], dict[str, list[dict[str, Any]]]]:
    """Calibrate the delays, then make ``rounds`` rounds of pairs (module doc, steps 1-2)."""
    # Other jobs lengthen steps while they run; the shortest of a few periods is the engine's
    # own, which the delay is a share of.
    periods = [
        step_period_s(run_benchmark(replace(opts, runs_dir=work / "calibration"), console)[0])
        for _ in range(CALIBRATION_RUNS)
    ]
    period = min(periods)
    delays = {arm: 1000 * period * s / (1 - s) for arm, s in ARMS.items()}
    console.print(f"step period {1000 * period:.3f} ms; delays (ms): {delays}")
    pairs: dict[str, list[dict[str, Any]]] = {arm: [] for arm in ARMS}
    arms = list(ARMS)
    for index in range(rounds):
        for arm in arms[index % len(arms) :] + arms[: index % len(arms)]:
            sides = {"A": Side("A"), "B": Side("B")}
            if delays[arm] > 0:
                sides["B"] = Side("B", {"step_delay_ms": round(delays[arm], 4)})
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
            document = {"delays_ms": delays, "periods_ms": [1000 * p for p in periods]}
            (work / PAIRS_JSON).write_text(json.dumps({**document, "pairs": pairs}, indent=2))
    return delays, pairs


def ratios_of(entries: list[dict[str, Any]], rules: GateRules) -> np.ndarray:
    a, _ = load_run_group([Path(e["A"]) for e in entries], "A")
    b, _ = load_run_group([Path(e["B"]) for e in entries], "B")
    columns = [per_run_values(b, rule) / per_run_values(a, rule) for rule in rules.rules]
    return np.stack(columns, axis=1)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=12)
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
    rules = load_rules(args.rules)
    work: Path = args.work
    started = datetime.now(UTC).isoformat()
    load_before = Path("/proc/loadavg").read_text().split()[:3]
    if args.from_json:
        previous = json.loads(args.from_json.read_text())
        delays, pairs = previous["delays_ms"], previous["pairs"]
        rounds = min(len(entries) for entries in pairs.values())
        pairs = {arm: entries[:rounds] for arm, entries in pairs.items()}
    else:
        scenario = load_scenario(args.scenario)
        opts = RunOptions(scenario, None, "reference", None, None, work, False, probes=False)
        delays, pairs = measure(opts, work, args.rounds, console)
    load_after = Path("/proc/loadavg").read_text().split()[:3]
    results: dict[str, Any] = {}
    ratios = {arm: ratios_of(pairs[arm], rules) for arm in ARMS}
    for arm in ARMS:
        seconds = float(np.mean([e["seconds"] for e in pairs[arm]]))
        r = ratios[arm]
        results[arm] = {
            "pairs_measured": int(r.shape[0]),
            "seconds_per_pair": seconds,
            "ratio_geomean": {
                rule.metric.name: float(np.exp(np.log(r[:, m]).mean()))
                for m, rule in enumerate(rules.rules)
            },
            "ratio_sd_log": {
                rule.metric.name: float(np.log(r[:, m]).std(ddof=1))
                for m, rule in enumerate(rules.rules)
            },
            "consecutive": summarize(
                consecutive(r, rules, args.min_pairs, args.max_pairs), seconds
            ),
            "resampled": summarize(
                resampled(r, rules, args.min_pairs, args.max_pairs, args.decisions, 0), seconds
            ),
        }
    tight = halved(rules)
    for arm in ("identical", "slower-10%"):
        seconds, cap = results[arm]["seconds_per_pair"], ratios[arm].shape[0]
        results[arm]["resampled_allowance_halved"] = summarize(
            resampled(ratios[arm], tight, args.min_pairs, cap, args.decisions, 1), seconds
        )
    document = {
        "started_utc": started,
        "ended_utc": datetime.now(UTC).isoformat(),
        "loadavg_before": load_before,
        "loadavg_after": load_after,
        "rules": str(args.rules),
        "scenario": str(args.scenario),
        "min_pairs": args.min_pairs,
        "max_pairs": args.max_pairs,
        "delays_ms": delays,
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
            f"[bold]{arm}[/bold] (step delay {document['delays_ms'][arm]:.3f} ms):"
            f" {res['pairs_measured']} pairs, {res['seconds_per_pair']:.1f} s per pair,"
            f" ratio B/A {res['ratio_geomean']}, sd(log) {res['ratio_sd_log']}"
        )
        for kind in ("consecutive", "resampled", "resampled_allowance_halved"):
            if kind not in res:
                continue
            s = res[kind]
            if not s["decisions"]:
                console.print(f"  {kind}: no decision (too few pairs)")
                continue
            console.print(
                f"  {kind}: {s['decisions']} decisions: pass {100 * s['pass']:.1f}%,"
                f" fail {100 * s['fail']:.1f}%, inconclusive {100 * s['inconclusive']:.1f}%;"
                f" pairs mean {s['pairs_mean']:.2f}, p95 {s['pairs_p95']:.0f};"
                f" time mean {s['seconds_mean']:.0f} s, p95 {s['seconds_p95']:.0f} s"
            )


if __name__ == "__main__":
    main()
