"""Change points on synthetic run histories: detection rate, false change points, delay.

    python benchmarks/change_points.py --noise 0.05 [--detector lab|otava|spa] [--histories 40]
        [--before 40] [--after 20] [--steps 0.03,0.05,0.10] [--seed 0] [--out FILE.json]

Each history is ``--before`` runs at one level then ``--after`` runs at a level ``step`` higher
(a slowdown: the metric multiplied by 1 + step), every run's value the level times a lognormal
noise of log-sd ``--noise`` (the spread this machine shows between repeated runs, measured with
`bench run --repeat`, docs/history.md). Histories with no step (0) measure false alarms alone.
As CI sees it, the history grows a run at a time after the step: the change is *found* at the
first length whose change points include one within 2 runs of the step; its *delay* is that
length less the step's index. Reported per step size: the share of histories where it was found
by the last run (detection rate), the median and 90th percentile delay in runs, and the change
points more than 2 runs from any step, per 100 runs of the full histories (false change points).

Detectors: ``lab``, this project's (results.history.changes: ruptures' binary segmentation and
a t-test, p < 0.001); ``otava``, Apache Otava's compute_change_points (p < 0.001); ``spa``,
MongoDB's signal-processing-algorithms e_divisive (permutation test, p < 0.01, 100
permutations). The last two are run with a Python where that package is installed (they pin
numpy apart from this project's: docs/history.md); the script needs only numpy besides.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable, Sequence

import numpy as np

NEAR = 2  # a change point within this many runs of the step finds it


def _lab() -> Callable[[np.ndarray], list[int]]:
    # Imported here: the other detectors run where this project is not installed.
    from results.history.changes import find

    return lambda x: [c.index for c in find(x)]


def _otava() -> Callable[[np.ndarray], list[int]]:
    from otava.analysis import compute_change_points

    return lambda x: [int(c.index) for c in compute_change_points(list(x), max_pvalue=0.001)[0]]


def _spa() -> Callable[[np.ndarray], list[int]]:
    from signal_processing_algorithms.energy_statistics.energy_statistics import e_divisive

    return lambda x: sorted(int(i) for i in e_divisive(x, pvalue=0.01, permutations=100))


DETECTORS = {"lab": _lab, "otava": _otava, "spa": _spa}


def history(rng: np.random.Generator, before: int, after: int, step: float, noise: float):
    level = np.r_[np.ones(before), np.full(after, 1.0 + step)]
    return level * np.exp(rng.normal(0.0, noise, before + after))


def measure(
    detect: Callable[[np.ndarray], list[int]],
    noise: float,
    steps: Sequence[float],
    histories: int,
    before: int,
    after: int,
    seed: int,
) -> dict[str, dict[str, float | None]]:
    """The figures of the module docstring per step size."""
    out: dict[str, dict[str, float | None]] = {}
    for step in steps:
        rng = np.random.default_rng([seed, int(step * 1000)])
        found, delays, false_points, runs = 0, [], 0, 0
        for _ in range(histories):
            x = history(rng, before, after, step, noise)
            full = detect(x)
            false_points += sum(1 for i in full if step == 0 or abs(i - before) > NEAR)
            runs += len(x)
            if step == 0:
                continue
            for length in range(before + 1, before + after + 1):
                if any(abs(i - before) <= NEAR for i in detect(x[:length])):
                    found += 1
                    delays.append(length - before)
                    break
        out[f"{step:g}"] = {
            "detection_rate": None if step == 0 else found / histories,
            "delay_median_runs": float(np.median(delays)) if delays else None,
            "delay_p90_runs": float(np.percentile(delays, 90)) if delays else None,
            "false_per_100_runs": 100.0 * false_points / runs,
        }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--noise", type=float, required=True, help="log-sd between runs")
    parser.add_argument("--detector", choices=sorted(DETECTORS), default="lab")
    parser.add_argument("--histories", type=int, default=40)
    parser.add_argument("--before", type=int, default=40)
    parser.add_argument("--after", type=int, default=20)
    parser.add_argument("--steps", default="0,0.03,0.05,0.10")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=None, help="also write the figures here as JSON")
    args = parser.parse_args()
    detect = DETECTORS[args.detector]()
    steps = [float(s) for s in args.steps.split(",")]
    start = time.perf_counter()
    figures = measure(detect, args.noise, steps, args.histories, args.before, args.after, args.seed)
    elapsed = time.perf_counter() - start
    print(
        f"detector {args.detector}, noise log-sd {args.noise}, {args.histories} histories of "
        f"{args.before}+{args.after} runs per step, {elapsed:.1f} s"
    )
    print(f"{'step':>6} {'detected':>9} {'delay p50':>10} {'delay p90':>10} {'false/100 runs':>15}")
    for step, f in figures.items():
        rate = "-" if f["detection_rate"] is None else f"{f['detection_rate']:.0%}"
        p50 = "-" if f["delay_median_runs"] is None else f"{f['delay_median_runs']:g}"
        p90 = "-" if f["delay_p90_runs"] is None else f"{f['delay_p90_runs']:g}"
        print(f"{step:>6} {rate:>9} {p50:>10} {p90:>10} {f['false_per_100_runs']:>15.2f}")
    if args.out:
        with open(args.out, "w", encoding="utf-8") as handle:
            json.dump(
                {
                    "detector": args.detector,
                    "noise": args.noise,
                    "histories": args.histories,
                    "before": args.before,
                    "after": args.after,
                    "figures": figures,
                },
                handle,
                indent=2,
            )


if __name__ == "__main__":
    main()
