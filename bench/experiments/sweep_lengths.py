"""The length pairs of a sweep: ``bench sweep --lengths 128:128,512:64`` runs its users or rates
at each (input tokens, output tokens) pair, every request of a point at exactly those lengths.

Throughput and speed per user depend on the lengths as much as on the concurrency (a long prompt
is a long prefill; a long answer many decode steps), so a frontier is drawn per length pair
(results.history.frontier): one series for each.
"""

from __future__ import annotations

import dataclasses

from bench.scenario.scenario import Scenario, ScenarioError
from loadgen.workloads.spec import LengthDist

__all__ = ["Lengths", "lengths_label", "parse_lengths", "with_lengths"]

# (input tokens, output tokens) of every request of a point.
Lengths = tuple[int, int]


def parse_lengths(text: str) -> list[Lengths]:
    """``"128:128,512:64"`` -> [(128, 128), (512, 64)]; raises ValueError naming --lengths."""
    pairs: list[Lengths] = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        prompt, sep, output = part.partition(":")
        try:
            pair = (int(prompt), int(output))
        except ValueError:
            pair = (0, 0)
        if not sep or min(pair) < 1:
            raise ValueError(
                f"--lengths: {part!r}: expected INPUT:OUTPUT token counts >= 1, e.g. 128:128,512:64"
            )
        if pair in pairs:
            raise ValueError(f"--lengths: {part!r} is given twice")
        pairs.append(pair)
    if not pairs:
        raise ValueError("--lengths: no pairs given (e.g. 128:128,512:64)")
    return pairs


def lengths_label(lengths: Lengths) -> str:
    """``(128, 64)`` -> ``"128:64"``, as --lengths takes it."""
    return f"{lengths[0]}:{lengths[1]}"


def with_lengths(scenario: Scenario, lengths: Lengths) -> Scenario:
    """``scenario`` with every prompt ``lengths[0]`` tokens and every answer ``lengths[1]``
    (fixed distributions; ``ignore_eos`` is the scenario's: without it an answer may end sooner).
    Its name says the pair, so each point's run folder does."""
    if scenario.workload.kind != "synthetic" or scenario.input_len is None:
        raise ScenarioError(
            f"{scenario.source}: --lengths sets synthetic prompt and answer lengths; this"
            f" scenario's workload ({scenario.workload.kind}) takes its lengths from its data"
        )
    prompt, output = lengths
    return dataclasses.replace(
        scenario,
        name=f"{scenario.name}-in{prompt}-out{output}",
        input_len=LengthDist("fixed", value=prompt),
        output_len=LengthDist("fixed", value=output),
    )
