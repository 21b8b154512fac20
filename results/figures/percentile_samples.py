"""How many samples a percentile needs to mean anything: one rule, used wherever one is quoted.

A p-th percentile of n samples is an order statistic; with fewer than 1 / (1 - p/100) samples
there is not one sample above it, and "p99" is merely the maximum (p99 of 3 requests is the
slowest of the 3). So p50 needs 2 samples, p90 10, p99 100 and p99.9 1,000. To rest on k
samples beyond it, as the gate's rules ask (bench.gate.rules' min_tail_samples), it needs k
times that: k / (1 - p/100), rounded up.
"""

from __future__ import annotations

import math

__all__ = ["min_samples", "thin_percentile"]


def min_samples(percentile: float, beyond: int = 1) -> int:
    """Fewest samples with ``beyond`` (>= 1) of them above the ``percentile`` (0-100, exclusive
    of 100); with the default 1, the fewest for which the percentile is not the max."""
    if not 0 <= percentile < 100:
        raise ValueError(f"percentile must be in [0, 100), got {percentile}")
    if beyond < 1:
        raise ValueError(f"beyond must be >= 1 sample, got {beyond}")
    return max(1, math.ceil(round(beyond * 100 / (100 - percentile), 9)))


def thin_percentile(stat: str, count: int | None) -> str | None:
    """Why ``stat`` (``"p99"``, ``"p99.9"``; other stats are never thin) over ``count`` samples
    does not mean much, or None where it does."""
    if not stat.startswith("p"):
        return None
    try:
        needed = min_samples(float(stat[1:]))
    except ValueError:
        return None
    have = count or 0
    if have >= needed:
        return None
    return f"{stat} from {have} samples (needs >= {needed}; below that it is the maximum)"
