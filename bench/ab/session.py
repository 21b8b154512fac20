"""One `bench ab`: pairs of runs in alternation, judged after each pair, written to one folder.

The folder ``<runs_dir>/<UTC time>-<scenario>-ab/`` holds::

    A/<run folder>, B/<run folder>   every run, one `bench run` folder each, report.html too
    ab.json                          the sides, the order, each metric's per-pair ratios, change,
                                     interval and verdict, the verdict and exit code, and how
                                     many pairs it took (rewritten after every pair)
    junit.xml, report.md             the gate's JUnit and Markdown reports of the verdict
    ab.html                          the comparison page (`bench compare`'s plus the ratios)

Order: pair 1 runs A then B, pair 2 B then A, and so on (A B B A A B B A ...), so that a
machine drifting in one direction over the session weighs on both sides alike; each run against
a fresh engine (bench.ab.sides). ``pairs`` pairs are run, then judged (bench.ab.paired); with
``until_decided`` one more pair is run and judged while the verdict is inconclusive, fewer
than ``max_pairs`` were run and, at the pace of the pairs so far, one more pair ends within
``budget_s`` of the start. A run that is not usable (too many failed requests) ends the A/B
with an unusable verdict: its failures are the finding, not noise to average over.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from rich.console import Console

from bench.ab.paired import PairedMetric, judge_pairs
from bench.ab.sides import Side, prepare, run_options
from bench.gate.rules import GateRules
from bench.gate.verdict import EXIT_CODES, GateReport
from bench.run.end.interrupt import RunInterrupted, interruption_note
from bench.run.messages import print_info
from bench.run.orchestrate import RunError, RunOptions, run_and_report
from perfmodel.files import JSONObject, write_json
from results.folder.folder_kinds import AB_JSON
from results.folder.run_folder import RunFolder

__all__ = ["AB_FORMAT", "AbPlan", "AbResult", "pair_order", "run_ab"]

AB_FORMAT = "llm-perf-lab/ab"


@dataclass(frozen=True)
class AbPlan:
    """What one `bench ab` does: its sides, the shared run options, the rules and the counts."""

    a: Side
    b: Side
    base: RunOptions
    rules: GateRules
    pairs: int = 3
    until_decided: bool = False
    max_pairs: int = 10
    allow_busy: bool = False
    # Judge runs whose summary marks them not valid (`bench gate --allow-invalid`).
    allow_invalid: bool = False
    # --until-decided adds no pair that would end past this many seconds from the start (at
    # the mean pace of the pairs so far); None: no limit but max_pairs.
    budget_s: float | None = None


@dataclass(frozen=True)
class AbResult:
    """The A/B's folder, its report (None when no verdict could be made) and the pair count."""

    folder: Path
    report: GateReport | None
    paired: tuple[PairedMetric, ...]
    pairs: int
    labels: tuple[str, str]
    a_runs: tuple[Path, ...]
    b_runs: tuple[Path, ...]
    unusable: str | None = None
    # Why --until-decided stopped undecided: "max_pairs" or "budget" (None when decided).
    stopped_by: str | None = None

    @property
    def exit_code(self) -> int:
        if self.report is None:
            return EXIT_CODES["inconclusive"]
        return self.report.exit_code


def pair_order(index: int) -> tuple[str, str]:
    """The sides' order in pair ``index`` (from 0): A B, then B A, alternating."""
    return ("A", "B") if index % 2 == 0 else ("B", "A")


def _unusable(summary: JSONObject) -> str | None:
    usability = summary.get("usability") or {}
    if usability.get("usable", True):
        return None
    return "; ".join(usability.get("reasons") or ["not usable"])


def _write(folder: Path, document: JSONObject) -> None:
    write_json(folder / AB_JSON, document)


def _metrics(paired: tuple[PairedMetric, ...]) -> list[JSONObject]:
    out = []
    for p in paired:
        r = p.result
        out.append(
            {
                "metric": r.metric,
                "unit": r.unit,
                "higher_is_better": r.higher_is_better,
                "allowed": r.limit_text,
                "verdict": r.verdict,
                "reason": r.reason,
                "a_mean": r.baseline,
                "b_mean": r.candidate,
                "change_pct": r.change_pct,
                "ci_low_pct": r.ci_low_pct,
                "ci_high_pct": r.ci_high_pct,
                "pair_ratios": list(p.ratios),
            }
        )
    return out


def _new_document(plan: AbPlan, sides: dict[str, Side]) -> JSONObject:
    """ab.json before the first pair (module docstring)."""
    return {
        "format": AB_FORMAT,
        "format_version": 1,
        "scenario": plan.base.scenario.name,
        "sides": {name: side.to_dict() for name, side in sides.items()},
        "rules": plan.rules.source,
        "pairs_requested": plan.pairs,
        "until_decided": plan.until_decided,
        "max_pairs": plan.max_pairs,
        "pairs": [],
        "pairs_run": 0,
        "decided_after_pairs": None,
        "stopped_by": None,
        "budget_s": plan.budget_s,
        "verdict": None,
        "exit_code": None,
        "metrics": [],
        "notes": [],
        "started_utc": datetime.now(UTC).isoformat(),
        "ended_utc": None,
        "error": None,
    }


def _run_pair(
    index: int,
    plan: AbPlan,
    sides: dict[str, Side],
    labels: tuple[str, str],
    folder: Path,
    runs: dict[str, list[Path]],
    console: Console,
) -> tuple[JSONObject, str | None]:
    """Pair ``index``'s two runs, each with its report.html, appended to ``runs``; returns
    ab.json's entry of the pair and why a run is not usable (None when both are)."""
    entry: JSONObject = {"pair": index + 1, "order": "".join(pair_order(index))}
    unusable: str | None = None
    for name in pair_order(index):
        print_info(console, f"pair {index + 1}, side {labels[ord(name) - ord('A')]}")
        opts = run_options(sides[name], plan.base, folder / name)
        run_folder, summary = run_and_report(opts, console)
        runs[name].append(run_folder)
        entry[name.lower() + "_run"] = str(run_folder.relative_to(folder))
        if (why := _unusable(dict(summary))) is not None:
            unusable = f"{name} run {run_folder.name} is not usable: {why}"
    return entry, unusable


def _stopped_by(plan: AbPlan, pairs_run: int, elapsed_s: float) -> str | None:
    """Why --until-decided runs no more pairs while undecided: "max_pairs", "budget" (one more
    pair, at the pace so far, would end past it), or None (run one more)."""
    if pairs_run >= plan.max_pairs:
        return "max_pairs"
    if plan.budget_s is not None and elapsed_s * (pairs_run + 1) / pairs_run > plan.budget_s:
        return "budget"
    return None


def _finish_document(
    document: JSONObject,
    report: GateReport | None,
    paired: tuple[PairedMetric, ...],
    unusable: str | None,
) -> None:
    """ab.json's verdict, metrics and end time, however the A/B ended."""
    document["ended_utc"] = datetime.now(UTC).isoformat()
    if report is not None:
        document["verdict"] = report.verdict
        document["exit_code"] = report.exit_code
        document["metrics"] = _metrics(paired)
        document["notes"] = list(report.notes)
    if unusable is not None:
        document["verdict"] = "unusable"
        document["exit_code"] = EXIT_CODES["inconclusive"]
        document["error"] = unusable


def run_ab(plan: AbPlan, console: Console) -> AbResult:
    """Run the A/B of ``plan`` (module doc) and return its result; ab.json is written after
    every pair. Raises AbError (bad side), RunError (a run that could not finish) and
    RunInterrupted (a signal), each after ab.json records what was done."""
    if plan.pairs < 1 or plan.max_pairs < plan.pairs:
        raise ValueError(f"need 1 <= --pairs <= --max-pairs, got {plan.pairs}, {plan.max_pairs}")
    sides = {"A": prepare(plan.a), "B": prepare(plan.b)}
    labels = (sides["A"].describe(), sides["B"].describe())
    folder = RunFolder.create(plan.base.runs_dir, plan.base.scenario.name, "ab").path
    document = _new_document(plan, sides)
    _write(folder, document)
    runs: dict[str, list[Path]] = {"A": [], "B": []}
    report: GateReport | None = None
    paired: tuple[PairedMetric, ...] = ()
    unusable: str | None = None
    started = time.monotonic()
    try:
        index = 0
        while True:
            entry, unusable = _run_pair(index, plan, sides, labels, folder, runs, console)
            document["pairs"].append(entry)
            document["pairs_run"] = index + 1
            if unusable is not None:
                break
            if index + 1 >= plan.pairs:
                report, paired = judge_pairs(
                    plan.rules, runs["A"], runs["B"], labels, plan.allow_busy, plan.allow_invalid
                )
                print_info(console, f"after {index + 1} pair(s): {report.verdict}")
                decided = report.verdict != "inconclusive"
                if decided and document["decided_after_pairs"] is None:
                    document["decided_after_pairs"] = index + 1
                if decided or not plan.until_decided:
                    break
                stopped = _stopped_by(plan, index + 1, time.monotonic() - started)
                if stopped is not None:
                    document["stopped_by"] = stopped
                    break
            _write(folder, document)
            index += 1
    except RunError as exc:
        document["error"] = str(exc)
        raise
    except RunInterrupted as exc:
        document["interrupted"] = interruption_note(exc)
        raise
    finally:
        _finish_document(document, report, paired, unusable)
        _write(folder, document)
    if unusable is not None:
        report, paired = None, ()
    return AbResult(
        folder, report, paired, int(document["pairs_run"]), labels, tuple(runs["A"]),
        tuple(runs["B"]), unusable, document["stopped_by"],
    )  # fmt: skip
